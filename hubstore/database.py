"""What a unit of work runs against: the engine, its connections, the dialect's SQL
component, what the migrations installed, the assign status listeners, and the change
watcher that wakes the store's waiters.

One :class:`Database` per store. It sits below the unit of work and the services, so
that they reach the store's shared state without importing the store (the facade is
the layer above them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL

from hubstore.connections import ConnectionSource
from hubstore.dialects import SqlDialect, dialect_for
from hubstore.errors import StoreClosed
from hubstore.models import AssignJob
from hubstore.signals import ChangeWatcher
from hubstore.sqlite_setup import BUSY_TIMEOUT_MS
from hubstore.types import AssignEvent

#: A status listener: called with the event (AssignEvent) and the job after each commit.
AssignListener = Callable[[AssignEvent, AssignJob], object]


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


class OpenUnitOfWork(Protocol):
    """A unit of work open in a thread or task (hubstore.transaction.Transaction)."""

    def savepoint(self, write: bool = True) -> AbstractContextManager[Any]:
        """A nested block of it (see Transaction.savepoint)."""
        ...


class Database:
    """A store's shared state, as units of work and services see it."""

    def __init__(self, engine: Engine, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.engine = engine
        self.url: URL = engine.url
        self.dialect: str = engine.dialect.name
        #: The dialect's SQL component: every difference between the dialects that a
        #: service or the unit of work needs (hubstore.dialects).
        self.sql: SqlDialect = dialect_for(self.dialect)
        self.features = Features.detect(engine)
        self.connections = ConnectionSource(engine, busy_timeout_ms=busy_timeout_ms)
        self.assign_listeners: list[AssignListener] = []
        #: When this store's claims next look for stalled jobs (services/assigns/rescue.py).
        self.rescue_at_ms = 0
        #: The unit of work open in this thread or task, which store calls join.
        self.current_uow: ContextVar[OpenUnitOfWork | None] = ContextVar(
            f"hubstore_uow_{id(self):x}", default=None)
        #: Where the PostgreSQL listener of the waiters connects (``store.listen_url``):
        #: None means the store's URL; a direct URL when the store goes through PgBouncer
        #: in transaction mode; False for no LISTEN (waiters then look every
        #: signals.FALLBACK_RECHECK_S). Set it before the first wait.
        self.listen_url: URL | str | bool | None = None
        self._watcher: ChangeWatcher | None = None
        self._watcher_guard = threading.Lock()

    def change_watcher(self) -> ChangeWatcher:
        """The store's change watcher, which wakes its waiters (made on first use;
        StoreClosed once the store is closed)."""
        if self.connections.closed:
            raise StoreClosed()
        watcher = self._watcher
        if watcher is None:
            with self._watcher_guard:
                watcher = self._watcher
                if watcher is None:
                    watcher = self._watcher = ChangeWatcher(self.url, self.listen_url)
        return watcher

    def close_waiters(self) -> None:
        """Stop the watcher's thread and wake its waiters (they return as on a timeout);
        a later wait makes a new watcher."""
        with self._watcher_guard:
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.close()
