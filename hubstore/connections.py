"""Where units of work get their connection.

PostgreSQL: from the engine's pool, returned after each unit of work (pool_pre_ping
checks it on the way out). SQLite: each thread keeps one connection to the file and
reuses it from one unit of work to the next. Checking a connection out of the pool and
back in cost as much as the statement it ran; an idle SQLite connection holds no lock
and blocks no checkpoint.
"""

from __future__ import annotations

import os
import threading

from sqlalchemy import Connection, Engine


class ConnectionSource:
    """Hands out a connection per unit of work."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._keep = engine.dialect.name == "sqlite"
        self._local = threading.local()
        self._kept: list[Connection] = []
        self._lock = threading.Lock()

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
