"""HubStore: opening a database, units of work, and the facade of every store method."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL

from hubstore.connections import ConnectionSource
from hubstore.db_errors import translate
from hubstore.engine import BUSY_TIMEOUT_MS, create_hub_engine
from hubstore.errors import (
    DatabaseUnavailable,
    HubStoreError,
    SchemaNotCurrent,
    ValidationError,
)
from hubstore.services import HubOperations
from hubstore.services.waiting import WaitingOps
from hubstore.types import AssignEvent
from hubstore.uow import UnitOfWork
from hubstore.urls import resolve_url, sqlite_path
from hubstore.validation import require_callable, require_int

if TYPE_CHECKING:
    from hubstore.models import AssignJob

#: A status listener: called with the event (AssignEvent) and the job after each commit.
AssignListener = Callable[[AssignEvent, "AssignJob"], object]


def open_error(exc: Exception) -> HubStoreError:
    """The hubstore error for a failure to open a store."""
    error = translate(exc)
    if error is not None:
        return error
    if isinstance(exc, OSError):
        return DatabaseUnavailable(f"the SQLite file cannot be created or opened: {exc}")
    if isinstance(exc, TypeError | ValueError | LookupError):
        return ValidationError(f"cannot open the store with these arguments: {exc}")
    return HubStoreError(f"cannot open the store: {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Features:
    """Optional schema support that revisions 0003 and 0004 install where the database
    has it: trigger-kept counters (deltas too on PostgreSQL), SQLite's FTS5 trigram index;
    on SQLite, message inserts counted by their message_log rows (0009)."""

    counters: bool = False
    counter_deltas: bool = False
    reflexion_fts: bool = False
    log_counts: bool = False

    @classmethod
    def detect(cls, engine: Engine) -> Features:
        inspector = inspect(engine)
        names = set(inspector.get_table_names())
        return cls(counters="hub_counters" in names,
                   counter_deltas="hub_counter_deltas" in names,
                   reflexion_fts="reflexion_entries_fts" in names,
                   log_counts="hub_counters" in names and "message_log" in names and any(
                       c["name"] == "queue_at_insert"
                       for c in inspector.get_columns("message_log")))


class HubStore(WaitingOps, HubOperations):
    """The hub's store. Each method called here is a unit of work of its own.

    >>> with HubStore.open("sqlite:///hub.db", auto_migrate=True) as store:  # doctest: +SKIP
    ...     with store.unit_of_work() as uow:
    ...         job = uow.assign_async("lead", "worker-1", task="write tests")
    """

    def __init__(self, engine: Engine, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.engine = engine
        self.url: URL = engine.url
        self.dialect: str = engine.dialect.name
        self.assign_listeners: list[AssignListener] = []
        self.features = Features.detect(engine)
        self.connections = ConnectionSource(engine, busy_timeout_ms=busy_timeout_ms)
        #: The unit of work open in this thread or task, which store calls join.
        self.current_uow: ContextVar[UnitOfWork | None] = ContextVar(
            f"hubstore_uow_{id(self):x}", default=None)

    @classmethod
    def open(cls, url: str | URL | None = None, *, auto_migrate: bool = False,
             busy_timeout_ms: int = BUSY_TIMEOUT_MS, **engine_options: Any) -> HubStore:
        """Open the store at ``url`` (else $HUBSTORE_URL, else the embedded default).

        With ``auto_migrate`` the database is migrated to head first (adopting a legacy
        triflux file); without it, a database that is not at head raises
        SchemaNotCurrent and nothing is created or changed. ``busy_timeout_ms`` bounds
        every wait for SQLite's write lock (then DatabaseBusy).

        Every failure is a HubStoreError: ValidationError for a bad URL or argument
        (engine options included), DatabaseUnavailable for a file or server that
        cannot be used, SchemaNotCurrent, UnknownSchema.
        """
        require_int(busy_timeout_ms, "busy_timeout_ms", minimum=0, maximum=2**31 - 1)
        try:
            return cls._open(resolve_url(url), auto_migrate, busy_timeout_ms, engine_options)
        except HubStoreError:
            raise
        except Exception as exc:
            raise open_error(exc) from exc

    @classmethod
    def _open(cls, url: URL, auto_migrate: bool, busy_timeout_ms: int,
              engine_options: dict[str, Any]) -> HubStore:
        """The URL resolved once; one engine when the database is at head."""
        from hubstore import migrations

        path = sqlite_path(url)
        engine: Engine | None = None
        if path is not None:
            at = migrations.revision_at(url)
        else:
            engine = create_hub_engine(url, busy_timeout_ms=busy_timeout_ms, **engine_options)
            try:
                with engine.connect() as conn:
                    at = migrations.read_revision(conn)
            except BaseException:
                engine.dispose()
                raise
        if at != migrations.head():
            try:
                if not auto_migrate:
                    migrations.require_current(url, at=at)
                migrations.upgrade(url)
            except SchemaNotCurrent:
                if engine is not None:
                    engine.dispose()
                raise
        if engine is None:
            engine = create_hub_engine(url, busy_timeout_ms=busy_timeout_ms, **engine_options)
        return cls(engine, busy_timeout_ms=busy_timeout_ms)

    def unit_of_work(self, write: bool = True) -> AbstractContextManager[UnitOfWork]:
        """A unit of work: one transaction, one Session (see :class:`UnitOfWork`).

        While one is open in this thread or task, this joins it instead: as a SAVEPOINT
        when ``write``, so that an exception inside rolls back this block only.
        """
        current = self.current_uow.get()
        if current is not None:
            return current.savepoint(write)
        return UnitOfWork(self, write=write)

    def one_statement(self) -> AbstractContextManager[UnitOfWork]:
        """A writing unit of work for a store method that runs one statement: on
        PostgreSQL in autocommit, the statement its own transaction (one round trip, no
        BEGIN or COMMIT). Inside an open unit of work it joins it, as unit_of_work()."""
        return self._single_statement(write=True)

    def one_read(self) -> AbstractContextManager[UnitOfWork]:
        """A reading unit of work for a store method that runs one SELECT: in
        autocommit on both dialects, the statement its own snapshot (no BEGIN or COMMIT;
        PostgreSQL: one round trip). Inside an open unit of work it joins it."""
        return self._single_statement(write=False)

    def _single_statement(self, *, write: bool) -> AbstractContextManager[UnitOfWork]:
        current = self.current_uow.get()
        if current is not None:
            return current.savepoint(write)
        return UnitOfWork(self, write=write, single_statement=True)

    def on_assign_status_change(self, listener: AssignListener) -> Callable[[], None]:
        """Call ``listener(event, job)`` after each committed assign status change.

        Returns a function that unsubscribes it.
        """
        require_callable(listener, "listener")
        self.assign_listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self.assign_listeners:
                self.assign_listeners.remove(listener)

        return unsubscribe

    def close(self) -> None:
        """Release everything: wake and stop the waiters (``wait_for_assign`` and
        message feeds return as on a timeout), then close every connection."""
        self.close_waiters()
        self.connections.close()

    def __enter__(self) -> HubStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
