"""HubStore: opening a database, units of work, and the facade of every store method."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL

from hubstore.connections import ConnectionSource
from hubstore.engine import create_hub_engine, resolve_url
from hubstore.services import HubOperations
from hubstore.services.waiting import WaitingOps
from hubstore.uow import UnitOfWork

if TYPE_CHECKING:
    from hubstore.models import AssignJob

AssignListener = Callable[[dict[str, Any], "AssignJob"], object]


@dataclass(frozen=True)
class Features:
    """Optional schema support that revisions 0003 and 0004 install where the database
    has it: trigger-kept counters (deltas too on PostgreSQL), SQLite's FTS5 trigram index."""

    counters: bool = False
    counter_deltas: bool = False
    reflexion_fts: bool = False

    @classmethod
    def detect(cls, engine: Engine) -> Features:
        names = set(inspect(engine).get_table_names())
        return cls(counters="hub_counters" in names,
                   counter_deltas="hub_counter_deltas" in names,
                   reflexion_fts="reflexion_entries_fts" in names)


class HubStore(WaitingOps, HubOperations):
    """The hub's store. Each method called here is a unit of work of its own.

    >>> with HubStore.open("sqlite:///hub.db", auto_migrate=True) as store:  # doctest: +SKIP
    ...     with store.unit_of_work() as uow:
    ...         job = uow.assign_async("lead", "worker-1", task="write tests")
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.url: URL = engine.url
        self.assign_listeners: list[AssignListener] = []
        self.features = Features.detect(engine)
        self.connections = ConnectionSource(engine)

    @classmethod
    def open(cls, url: str | URL | None = None, *, auto_migrate: bool = False,
             **engine_options: Any) -> HubStore:
        """Open the store at ``url`` (else $HUBSTORE_URL, else the embedded default).

        With ``auto_migrate`` the database is migrated to head first (adopting a legacy
        triflux file); without it, a database that is not at head raises
        SchemaNotCurrent and nothing is created or changed.
        """
        from hubstore import migrations

        resolved = resolve_url(url)
        if auto_migrate:
            migrations.upgrade(resolved)
        else:
            migrations.require_current(resolved)
        return cls(create_hub_engine(resolved, **engine_options))

    def unit_of_work(self, write: bool = True) -> UnitOfWork:
        """A new unit of work: one Session, one transaction (see UnitOfWork)."""
        return UnitOfWork(self, write=write)

    def on_assign_status_change(self, listener: AssignListener) -> Callable[[], None]:
        """Call ``listener(event, job)`` after each committed assign status change.

        Returns a function that unsubscribes it.
        """
        self.assign_listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self.assign_listeners:
                self.assign_listeners.remove(listener)

        return unsubscribe

    def close(self) -> None:
        """Release every connection."""
        self.connections.close()

    def __enter__(self) -> HubStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
