"""Where units of work get their connection.

PostgreSQL: from the engine's pool, returned after each unit of work; read-only units of
work run as READ ONLY transactions. SQLite: each thread keeps two connections to the file,
one for writing and one that refuses writes (``query_only``), and reuses them from one
unit of work to the next: checking a connection out of a pool and back in cost as much
as the statement it ran, and an idle SQLite connection holds no lock and blocks no
checkpoint. A thread's connections are closed when the thread ends, and all of them by
:meth:`ConnectionSource.close`.

After ``fork()`` a child never touches its parent's connections: the first use in the
child drops them without closing them (SQLAlchemy's recipe for pools across fork) and
starts afresh.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

from sqlalchemy import Connection, Engine

from hubstore import execution, forks, sqlite_setup
from hubstore.urls import sqlite_path

#: Connection.info key (PostgreSQL): the psycopg setting acquire changed, and its value
#: before, for release to put back.
_CHANGED = "hubstore_changed_mode"


def _set_mode(conn: Connection, setting: str) -> None:
    """Turn the psycopg connection's ``setting`` (autocommit, read_only) on."""
    driver: Any = conn.connection.driver_connection
    before = getattr(driver, setting)
    if before is not True:
        conn.info[_CHANGED] = (setting, before)
        setattr(driver, setting, True)


def _restore_mode(conn: Connection) -> None:
    """Undo what _set_mode changed, if the connection is still usable (an invalidated
    one goes back to no pool)."""
    if conn.invalidated or conn.closed:
        return
    changed = conn.info.pop(_CHANGED, None)
    if changed is not None:
        setattr(conn.connection.driver_connection, *changed)


class _Kept:
    """One thread's SQLite connections (write, read), closed when the thread ends."""

    def __init__(self) -> None:
        self.conns: list[Connection | None] = [None, None]
        self.busy = [False, False]
        self.finalizer = weakref.finalize(self, _close_all, self.conns)


def _close_all(conns: list[Connection | None]) -> None:
    for i, conn in enumerate(conns):
        conns[i] = None
        if conn is not None and not conn.closed:
            with contextlib.suppress(Exception):  # a closed store's, a dead thread's
                conn.close()


class ConnectionSource:
    """Hands out a connection per unit of work, and the SQLite writers' lock."""

    def __init__(self, engine: Engine, *, busy_timeout_ms: int = sqlite_setup.BUSY_TIMEOUT_MS
                 ) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        path = sqlite_path(engine.url)
        #: SQLite files only: the queue writers take turns in (None elsewhere).
        self.writers = (sqlite_setup.WriterLock(path, busy_timeout_ms / 1000)
                        if path is not None else None)
        self._fork = forks.generation()
        self._local = threading.local()
        self._all: weakref.WeakSet[_Kept] = weakref.WeakSet()
        self._guard = threading.Lock()
        #: Set by :meth:`close`: the store is closed, and every unit of work refuses to
        #: begin (StoreClosed) instead of opening new connections.
        self.closed = False

    def _check_fork(self) -> None:
        if self._fork != forks.generation():
            self._fork = forks.generation()
            self._local = threading.local()
            self._all = weakref.WeakSet()
            self.engine.dispose(close=False)

    def acquire(self, write: bool, *, autocommit: bool = False) -> Connection:
        """A connection with no transaction; give it back with :meth:`release`.

        ``autocommit``: each statement is its own transaction, for a unit of work of one
        statement. PostgreSQL: no BEGIN, no COMMIT (one round trip); a read-only one is
        READ ONLY. Both are set on the psycopg connection itself and undone by
        :meth:`release` before the pool gets it back (SQLAlchemy's execution options
        and their reset at check-in took three times the CPU); a connection whose
        setting cannot be undone is dropped. SQLite: a read of one statement (one of
        hubstore's own SELECTs) runs on the thread's writing connection when it is idle
        and nothing watches it (see :meth:`_warm_reader`)."""
        self._check_fork()
        if not self.is_sqlite:
            conn = self.engine.connect()
            if not write or autocommit:
                try:
                    _set_mode(conn, "autocommit" if autocommit else "read_only")
                except BaseException:
                    self.release(conn, write, broken=True)
                    raise
            return conn
        kept: _Kept | None = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = _Kept()
            with self._guard:
                self._all.add(kept)
        if autocommit and not write:
            warm = self._warm_reader(kept)
            if warm is not None:
                return warm
        slot = 0 if write else 1
        if kept.busy[slot]:  # a second store-level transaction on this thread
            return self._open(write)
        kept_conn = kept.conns[slot]
        if kept_conn is None or kept_conn.closed:
            kept_conn = kept.conns[slot] = self._open(write)
        kept.busy[slot] = True
        return kept_conn

    @staticmethod
    def _warm_reader(kept: _Kept) -> Connection | None:
        """The thread's writing connection for a read of one SELECT, when it is open,
        idle and unwatched (else None: the reading connection serves).

        SQLite drops a connection's whole page cache when it begins a read after
        another connection wrote, so on a hub that writes between its reads the
        reading connection started every poll cold, fetching each page again from the
        WAL or the file; the writer's cache holds what its own commits wrote. Measured
        with an insert between polls at 100,000 messages: a poll's statement 94 ->
        69 us. The read takes no lock (autocommit, no BEGIN), and the statement is
        hubstore's own SELECT, so the reading connection's ``query_only`` guard is not
        needed for it. With a listener watching, the writer's BEGIN would be
        IMMEDIATE: such reads keep the reading connection.
        """
        conn = kept.conns[0]
        if conn is None or kept.busy[0] or conn.closed or not execution.unwatched(conn):
            return None
        kept.busy[0] = True
        return conn

    def _open(self, write: bool) -> Connection:
        conn = self.engine.connect()
        if write:
            conn.execution_options(**{sqlite_setup.BEGIN_MODE: "IMMEDIATE"})
        else:
            sqlite_setup.set_query_only(conn, True)
        return conn

    def release(self, conn: Connection, write: bool, *, broken: bool = False) -> None:
        """Take a connection back after its transaction ended (``broken``: it could not
        even roll back, so it is dropped, not reused)."""
        if not self.is_sqlite and not broken:
            try:
                _restore_mode(conn)
            except Exception:  # never back to the pool in autocommit or read-only
                broken = True
        if broken:
            with contextlib.suppress(Exception):
                conn.invalidate()
        if not self.is_sqlite:
            with contextlib.suppress(Exception):
                conn.close()
            return
        kept: _Kept | None = getattr(self._local, "kept", None)
        slot = 0 if write or (kept is not None and kept.conns[0] is conn) else 1
        if kept is not None and kept.conns[slot] is conn:
            kept.busy[slot] = False
            if not broken:
                return
            kept.conns[slot] = None
        with contextlib.suppress(Exception):
            conn.close()

    def close(self) -> None:
        """Close every kept connection, the lock file and the engine's pool; from now
        on the store is closed (see ``closed``)."""
        self.closed = True
        with self._guard:
            every, self._all = list(self._all), weakref.WeakSet()
        for kept in every:
            kept.finalizer()
        self._local = threading.local()
        if self.writers is not None:
            self.writers.close()
        self.engine.dispose()

    def describe(self) -> dict[str, Any]:
        """How many kept connections are open (for tests and diagnostics)."""
        with self._guard:
            return {"threads": len(self._all),
                    "open": sum(c is not None and not c.closed
                                for kept in self._all for c in kept.conns)}
