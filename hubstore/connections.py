"""Where units of work get their connection, and how SQLite writers take turns.

PostgreSQL: from the engine's pool, returned after each unit of work (pool_pre_ping
checks it on the way out). SQLite: each thread keeps one connection to the file and
reuses it from one unit of work to the next. Checking a connection out of the pool and
back in cost as much as the statement it ran; an idle SQLite connection holds no lock
and blocks no checkpoint.

SQLite's own wait for the write lock is a sleep-and-retry loop with growing sleeps:
under load from several processes it is unfair (one process waited 2.7 s while others
wrote hundreds of jobs) and can end in "database is locked". Writing units of work
therefore queue first on an flock of a small file beside the database (``PATH.lock``),
which the kernel hands over as soon as it is free, then BEGIN IMMEDIATE, which then
rarely waits. Writers that do not use hubstore still meet SQLite's own lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from sqlalchemy import Connection, Engine

from hubstore.engine import sqlite_path


class WriterQueue:
    """An exclusive flock that orders the writing units of work of every process."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._local = threading.local()

    def _fd(self) -> int:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            local.pid, local.depth = os.getpid(), 0
        fd: int = local.fd
        return fd

    def acquire(self) -> None:
        """Wait for this thread's turn (re-entrant within a thread)."""
        fd = self._fd()
        if self._local.depth == 0:
            fcntl.flock(fd, fcntl.LOCK_EX)
        self._local.depth += 1

    def release(self) -> None:
        """Give the turn to the next writer."""
        self._local.depth -= 1
        if self._local.depth == 0:
            fcntl.flock(self._local.fd, fcntl.LOCK_UN)


class ConnectionSource:
    """Hands out a connection per unit of work."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._keep = engine.dialect.name == "sqlite"
        self._local = threading.local()
        self._kept: list[Connection] = []
        self._lock = threading.Lock()
        path = sqlite_path(engine.url)
        #: SQLite files only: the queue writers take turns in (None elsewhere).
        self.writers = WriterQueue(path) if path is not None else None

    def acquire(self) -> Connection:
        """A connection with no transaction; give it back with :meth:`release`."""
        if not self._keep:
            return self.engine.connect()
        local = self._local
        conn: Connection | None = getattr(local, "connection", None)
        if conn is None or getattr(local, "pid", None) != os.getpid() or conn.closed:
            conn = self.engine.connect()
            local.connection, local.pid, local.busy = conn, os.getpid(), False
            with self._lock:
                self._kept.append(conn)
        if local.busy:  # a unit of work opened inside another one on this thread
            return self.engine.connect()
        local.busy = True
        return conn

    def release(self, conn: Connection) -> None:
        """Take a connection back after its transaction ended."""
        if getattr(self._local, "connection", None) is conn:
            self._local.busy = False
        else:
            conn.close()

    def close(self) -> None:
        """Close every kept connection and the engine's pool."""
        with self._lock:
            kept, self._kept = self._kept, []
        for conn in kept:
            if not conn.closed:
                conn.close()
        self._local = threading.local()
        self.engine.dispose()
