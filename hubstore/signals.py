"""Change signals for waiters: what wakes ``wait_for_assign`` and ``feed.next``.

One watcher thread per store (per process), started by the first waiter, ending on its
own once no one has waited for a while:

- PostgreSQL: a connection of its own, outside the pool, LISTENs on
  ``hubstore_assigns`` and ``hubstore_messages`` (the triggers of revision 0007 send
  them at commit). It blocks in the driver between notifications: no statement, no CPU.
  LISTEN needs a direct session; behind PgBouncer in transaction pooling mode set
  ``store.listen_url`` to a direct URL, or to ``False`` for timed re-checks only.
- SQLite: ``PRAGMA data_version`` on a read-only connection (a few microseconds, no
  read of the hub's tables) every 10 ms after a change, backing off to every 50 ms
  while nothing changes. Any commit by another connection wakes every waiter.

Waiters subscribe *before* looking at the tables and look again after every wake-up, and
every :data:`RECHECK_S` seconds anyway; the watcher wakes everyone after (re)connecting.
So a notification lost while the listener was away never loses work: at worst it is
found by the next look.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy.engine import URL, make_url

from hubstore import pg_connections
from hubstore.urls import HUBSTORE_OPTIONS, behind_pgbouncer, call_timeout_in, sqlite_path

log = logging.getLogger(__name__)

ASSIGNS = "hubstore_assigns"
MESSAGES = "hubstore_messages"
#: A waiter looks at the tables at least this often even when nothing woke it.
RECHECK_S = 5.0
#: Without any change signal (no LISTEN possible): how often waiters look.
FALLBACK_RECHECK_S = 0.5
SQLITE_MIN_INTERVAL_S = 0.01
SQLITE_MAX_INTERVAL_S = 0.05
#: The watcher thread ends after this long with no subscriber.
IDLE_EXIT_S = 5.0
PG_WAIT_S = 0.5


def digest(value: str) -> str:
    """md5 hex of ``value``, as the PostgreSQL triggers compute it for payloads."""
    return hashlib.md5(value.encode("utf-8"), usedforsecurity=False).hexdigest()


def worker_key(worker_agent: str) -> str:
    return digest(worker_agent)


def agent_key(agent_id: str) -> str:
    return "a" + digest(agent_id)


def topic_key(topic: str) -> str:
    return "t" + digest(topic)


def limit_key(key: str) -> str:
    """The NOTIFY payload of room freed under an assign limit (revision 0014's trigger)."""
    return "l" + digest(key)


class Subscription:
    """One waiter's interest: a channel and payload keys (None: any payload)."""

    def __init__(self, watcher: ChangeWatcher, channel: str, keys: frozenset[str] | None,
                 wake: Callable[[], None] | None) -> None:
        self.watcher = watcher
        self.channel = channel
        self.keys = keys
        self.event = threading.Event()
        self._wake = wake

    def matches(self, channel: str | None, payload: str | None) -> bool:
        if channel is None:
            return True
        return channel == self.channel and (
            self.keys is None or payload is None or payload in self.keys)

    def fire(self) -> None:
        self.event.set()
        if self._wake is not None:
            self._wake()

    def clear(self) -> None:
        """Forget earlier wake-ups (call before looking at the tables)."""
        self.event.clear()

    def wait(self, timeout: float) -> bool:
        """Block until woken or ``timeout`` seconds passed (True when woken)."""
        return self.event.wait(max(0.0, timeout))

    def close(self) -> None:
        self.watcher.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChangeWatcher:
    """The one thread that turns database changes into wake-ups for this store."""

    def __init__(self, url: URL, listen_url: URL | str | bool | None = None) -> None:
        self.url = url
        self.is_sqlite = url.get_backend_name() == "sqlite"
        self.listen_url = listen_url
        self._subs: set[Subscription] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()
        #: False when changes cannot be heard at all (waiters look every FALLBACK_RECHECK_S).
        self.signals = self._can_signal()

    def _can_signal(self) -> bool:
        if self.is_sqlite:
            return sqlite_path(self.url) is not None
        if self.listen_url is None and behind_pgbouncer(self.url):
            # LISTEN through PgBouncer in transaction mode hears nothing reliably.
            log.warning("hubstore: %s goes through PgBouncer (?pgbouncer=true) and "
                        "store.listen_url is not set: waiters look every %s s instead of "
                        "listening; set listen_url to a direct URL", self.url,
                        FALLBACK_RECHECK_S)
            return False
        return self.listen_url is not False

    @property
    def recheck_s(self) -> float:
        return RECHECK_S if self.signals else FALLBACK_RECHECK_S

    def subscribe(self, channel: str, keys: Iterable[str] | None = None,
                  wake: Callable[[], None] | None = None) -> Subscription:
        """Register interest; the caller must look at the tables after this returns."""
        sub = Subscription(self, channel, None if keys is None else frozenset(keys), wake)
        with self._cond:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not ours
                self._pid, self._thread = os.getpid(), None
            self._subs.add(sub)
            if self.signals and not self._closed and (
                    self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="hubstore-watcher",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._cond:
            self._subs.discard(sub)

    def _wake(self, channel: str | None = None, payload: str | None = None) -> None:
        with self._cond:
            subs = [s for s in self._subs if s.matches(channel, payload)]
        for sub in subs:
            try:
                sub.fire()
            except Exception:  # a waiter whose event loop closed
                log.debug("wake-up of %r failed", sub, exc_info=True)

    def _idle(self) -> bool:
        """Wait while no one subscribes; True when the thread should end."""
        with self._cond:
            if self._subs:
                return self._closed
            self._cond.wait_for(lambda: self._subs or self._closed, IDLE_EXIT_S)
            if not self._subs or self._closed:
                self._thread = None
                return True
            return False

    def close(self) -> None:
        with self._cond:
            self._closed = True
            subs = list(self._subs)
            self._cond.notify_all()
        for sub in subs:
            sub.fire()

    def _run(self) -> None:
        try:
            if self.is_sqlite:
                self._run_sqlite()
            else:
                self._run_postgresql()
        except Exception:
            log.exception("hubstore change watcher stopped")
            with self._cond:
                self._thread = None
            self._wake()

    # --- SQLite --------------------------------------------------------------------

    def _run_sqlite(self) -> None:
        path = sqlite_path(self.url)
        assert path is not None
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False)
        try:
            last = conn.execute("PRAGMA data_version").fetchone()[0]
            interval = SQLITE_MIN_INTERVAL_S
            while True:
                if self._idle():
                    return
                time.sleep(interval)
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != last:
                    last, interval = version, SQLITE_MIN_INTERVAL_S
                    self._wake()
                else:
                    interval = min(interval * 1.5, SQLITE_MAX_INTERVAL_S)
        finally:
            conn.close()

    # --- PostgreSQL ----------------------------------------------------------------

    def _connect_params(self) -> tuple[dict[str, Any], float]:
        """psycopg.connect's arguments for the LISTEN connection (its URL read as
        SQLAlchemy reads it, multi-host URLs included, with the settings of every
        hubstore connection), and the bound of its calls."""
        target = self.listen_url
        url = (make_url(target) if isinstance(target, str | URL) else self.url).set(
            drivername="postgresql+psycopg")
        _, params = url.get_dialect()().create_connect_args(url)
        for option in HUBSTORE_OPTIONS:
            params.pop(option, None)
        bound = call_timeout_in(url)
        return (pg_connections.libpq_settings(url, params),
                pg_connections.CALL_TIMEOUT_S if bound is None else bound)

    def _run_postgresql(self) -> None:
        import psycopg

        backoff = 0.1
        while True:
            if self._idle():
                return
            try:
                params, bound = self._connect_params()
                with pg_connections.connect({**params, "autocommit": True}, bound) as conn:
                    conn.execute(f"LISTEN {ASSIGNS}")
                    conn.execute(f"LISTEN {MESSAGES}")
                    backoff = 0.1
                    self._wake()  # (re)connected: whatever was sent meanwhile is unheard
                    while True:
                        if self._idle():
                            return
                        for note in conn.notifies(timeout=PG_WAIT_S):
                            self._wake(note.channel, note.payload)
            except psycopg.Error as exc:
                log.warning("hubstore listener connection lost (%s); reconnecting", exc)
                self._wake()
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
