"""Everything hubstore does differently on SQLite, in one place.

- Connection set-up: WAL, synchronous NORMAL, foreign keys, a busy timeout, pysqlite's
  own transaction handling off, so that the one BEGIN path below decides how a
  transaction starts (BEGIN IMMEDIATE for writers: the write lock up front, waiting out
  the busy timeout instead of failing with SQLITE_BUSY half-way through).
- The writers' queue: hubstore writers of every process take turns on a lock file beside
  the database before BEGIN IMMEDIATE. SQLite's own wait is a sleep-and-retry loop with
  sleeps growing to 100 ms: under load from several processes it was unfair (one process
  waited 2.7 s while others wrote hundreds of jobs). The queue waits at most the busy
  timeout, then raises DatabaseBusy, so a frozen or killed writer never stalls the others
  beyond it. Where ``fcntl`` does not exist (Windows) the queue is only the in-process
  lock, and SQLite's own lock orders the processes.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event

from hubstore import forks
from hubstore.errors import DatabaseBusy

try:  # POSIX; elsewhere SQLite's own lock orders the processes
    import fcntl
except ImportError:  # pragma: no cover - exercised in a subprocess without fcntl
    fcntl = None  # type: ignore[assignment]

#: Execution option naming how a transaction begins ("DEFERRED" or "IMMEDIATE").
BEGIN_MODE = "hubstore_begin"
BUSY_TIMEOUT_MS = 5000
#: Page cache per connection (negative: KiB), as better-sqlite3 (the reference's driver)
#: builds SQLite with: the default 2 MB made every audit-log insert re-read index pages
#: at 100,000 messages, and reads at 1,000,000.
CACHE_SIZE = -16000
#: WAL pages after which a commit checkpoints (SQLite's default is 1,000). A checkpoint
#: copies each page once however many commits rewrote it since the last one, and the
#: pages a hub writes are mostly the same few (index leaves, the counters): measured
#: at 100,000 messages, an audit_log went 233 -> 175 us and a heartbeat 43 -> 40 us,
#: polls unchanged. The WAL file grows to about 10 MB (40 MB on a file of 4 KiB pages)
#: before it is reused from its start.
WAL_AUTOCHECKPOINT = 10_000
#: Page size of the files hubstore creates (SQLite's default is 4,096; a file made by
#: the reference keeps its own). Every commit copies each page it changed into the WAL,
#: and a hub's commits are one small row each, touching one leaf per index: at 100,000
#: messages an audit_log changes about 12 pages, so 1 KiB pages put a quarter of the
#: bytes through the WAL. Measured on fresh copies of one preload, alternating, 1 KiB
#: against 4 KiB pages: audit_log 1.35x to 1.38x, assign lifecycle 1.16x to 1.24x,
#: heartbeat, polls and figures 0.96x to 1.04x, a 3 KB payload written 1.20x and polled
#: 0.93x (benchmarks/HISTORY.md). SQLite ignores it for a file that already has tables.
PAGE_SIZE = 1024


#: The engines configure_engine has set up (an application's own engine given to
#: HubStore is set up on first use).
_CONFIGURED: weakref.WeakSet[Engine] = weakref.WeakSet()


def is_configured(engine: Engine) -> bool:
    """Whether configure_engine set ``engine`` up."""
    return engine in _CONFIGURED


def configure_engine(engine: Engine, *, wal: bool, foreign_keys: bool,
                     busy_timeout_ms: int, query_only: bool = False) -> None:
    """Connection pragmas, and the one place a SQLite transaction begins."""
    _CONFIGURED.add(engine)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # hubstore emits BEGIN itself (below)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cur.execute(f"PRAGMA cache_size = {CACHE_SIZE}")
        cur.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # a new file only (see PAGE_SIZE)
        if wal:
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
        cur.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        driver: Any = conn.connection.driver_connection
        if driver.in_transaction:  # a unit of work began it on the driver: join it
            return
        mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
        driver.execute(begin_statement(mode == "IMMEDIATE"))


def begin_statement(write: bool) -> str:
    """How a transaction begins: writers take the write lock up front."""
    return "BEGIN IMMEDIATE" if write else "BEGIN DEFERRED"


def set_query_only(conn: Connection, on: bool) -> None:
    """Make the connection refuse writes (SQLite's ``query_only``), or allow them again."""
    conn.connection.driver_connection.execute(  # type: ignore[union-attr]
        f"PRAGMA query_only = {1 if on else 0}")


class WriterLock:
    """The writers' queue of one database file: an in-process lock, then an exclusive
    lock on ``PATH.lock`` shared by every process, both waited on for at most the busy
    timeout. One descriptor per process, opened on first use and again after a fork."""

    def __init__(self, database: Path, timeout_s: float) -> None:
        self.path = database.with_name(database.name + ".lock")
        self.timeout_s = timeout_s
        self._threads = threading.Lock()
        self._fd: int | None = None
        self._fork = forks.generation()

    def acquire(self) -> None:
        """Wait for this writer's turn, at most the busy timeout; else DatabaseBusy."""
        if self._fork != forks.generation():  # a forked child: the parent's lock isn't ours
            self._threads, self._fd = threading.Lock(), None
            self._fork = forks.generation()
        deadline = None
        if not self._threads.acquire(False):
            deadline = time.monotonic() + self.timeout_s
            if not self._threads.acquire(timeout=self.timeout_s):
                raise self._busy("another thread of this process")
        if fcntl is None:
            return
        fd = self._fd
        if fd is not None:  # the common case, uncontended: one system call, no loop
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            except BaseException:
                self._threads.release()
                raise
        try:
            self._lock_file(time.monotonic() + self.timeout_s if deadline is None else deadline)
        except BaseException:
            self._threads.release()
            raise

    def _lock_file(self, deadline: float) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        pause = 0.0002
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._busy("another process (or another store on this file)") from None
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.002)

    def release(self) -> None:
        """Give the turn to the next writer."""
        if fcntl is not None and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def close(self) -> None:
        """Close the lock file's descriptor (the store is closing)."""
        fd, self._fd = self._fd, None
        if fd is not None and self._fork == forks.generation():
            os.close(fd)

    def _busy(self, holder: str) -> DatabaseBusy:
        return DatabaseBusy(
            f"the write lock of {self.path.with_suffix('')} was not free within "
            f"{self.timeout_s:g} s: {holder} is writing")
