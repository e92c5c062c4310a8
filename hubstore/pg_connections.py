"""How hubstore connects to PostgreSQL: the settings every connection gets, and a bound
on each call that a frozen server cannot stretch.

Every PostgreSQL connection hubstore makes (the store's pool, ``hubstore db check``, the
migrations, the change watcher's LISTEN connection) gets :data:`LIBPQ_DEFAULTS`: a
connect timeout, TCP keepalives and ``tcp_user_timeout``. A setting the URL's query
gives wins (``?connect_timeout=3``), and so does one an application passes in
``connect_args``.

Those settings notice a server whose machine or network went away. They cannot notice a
server that is frozen (SIGSTOP, a stuck VM, a debugger) while its kernel still answers:
the kernel ACKs every packet and every keepalive probe, and ``statement_timeout`` is
enforced by the frozen server itself. So each call to the server (a statement, COMMIT,
ROLLBACK) is bounded on the client too: a connection records when its current wait on
the server began (a clock read: under a microsecond per call), and one watchdog
thread per process shuts down the socket of a connection whose wait outlasted its bound
(``call_timeout``, :data:`CALL_TIMEOUT_S` by default). libpq then sees the connection
closed, the call fails with DatabaseUnavailable ("no answer ... within 30 s"), the pool
drops the connection, and the next call connects afresh. The watchdog sleeps until the
earliest moment a call could overrun, so an idle process wakes it once per bound.

A call that legitimately takes longer than the bound (a lock held by a long
transaction elsewhere, a huge statement) fails the same way: raise the bound for such
work (``HubStore.open(url, call_timeout_s=...)``, ``?call_timeout=...``, or 0 for no
bound). Unless the URL says otherwise, the migrations and ``hubstore db check`` allow
:data:`MAINTENANCE_CALL_TIMEOUT_S`.
"""

from __future__ import annotations

import functools
import inspect
import socket
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from time import monotonic
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL

from hubstore import forks

if TYPE_CHECKING:
    import psycopg

#: Seconds a PostgreSQL connection attempt may take, per host (libpq's connect_timeout).
CONNECT_TIMEOUT_S = 10
#: TCP keepalives: the first probe after this many idle seconds, then one every
#: KEEPALIVES_INTERVAL_S, and the connection is dead after KEEPALIVES_COUNT unanswered.
KEEPALIVES_IDLE_S = 10
KEEPALIVES_INTERVAL_S = 5
KEEPALIVES_COUNT = 3
#: Milliseconds that sent data may stay unacknowledged before the kernel gives the
#: connection up (a network that drops packets): the keepalives' own span.
TCP_USER_TIMEOUT_MS = (KEEPALIVES_IDLE_S + KEEPALIVES_INTERVAL_S * KEEPALIVES_COUNT) * 1000
#: The libpq settings every hubstore connection gets unless the URL (or connect_args)
#: says otherwise.
LIBPQ_DEFAULTS: Mapping[str, int] = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "keepalives": 1,
    "keepalives_idle": KEEPALIVES_IDLE_S,
    "keepalives_interval": KEEPALIVES_INTERVAL_S,
    "keepalives_count": KEEPALIVES_COUNT,
    "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
}
#: Seconds one call may wait on the server before the watchdog ends its connection.
CALL_TIMEOUT_S = 30.0
#: The bound of the migrations' and ``hubstore db check``'s calls, unless the URL says
#: otherwise (an index built on a large table, a wait for another process's migration).
MAINTENANCE_CALL_TIMEOUT_S = 600.0


def libpq_settings(url: URL, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``given`` (an application's connect_args) with LIBPQ_DEFAULTS added where neither
    it nor the URL's query sets them (``tcp_user_timeout`` only where libpq has it)."""
    settings = dict(given or {})
    for name, value in LIBPQ_DEFAULTS.items():
        if name not in url.query and name not in settings and (
                name != "tcp_user_timeout" or _libpq_version() >= 120000):
            settings[name] = value
    return settings


@functools.cache
def _libpq_version() -> int:
    import psycopg

    return int(psycopg.pq.version())


class HostOrder:
    """The order a multi-host URL's servers are tried in: the one that took the last
    connection first. libpq tries them as written, and a first host that is frozen (not
    refusing, just silent) costs every new connection the whole connect timeout."""

    def __init__(self) -> None:
        self._last: tuple[str, str] | None = None

    def apply(self, params: dict[str, Any]) -> None:
        """Put the last good host first in ``params`` (psycopg's connect arguments)."""
        last = self._last
        host, port = str(params.get("host") or ""), str(params.get("port") or "")
        if last is None or "," not in host or "hostaddr" in params:
            return
        hosts = host.split(",")
        ports = port.split(",") if port else [""]
        if len(ports) == 1:  # (one port, or none: the same for every host)
            ports *= len(hosts)
        if len(ports) != len(hosts):
            return  # (libpq refuses it)
        pairs = list(zip(hosts, ports, strict=True))
        if last not in pairs or pairs[0] == last:
            return
        pairs.remove(last)
        pairs.insert(0, last)
        params["host"] = ",".join(h for h, _ in pairs)
        if port:
            params["port"] = ",".join(p for _, p in pairs)

    def remember(self, conn: psycopg.Connection[Any]) -> None:
        """Note the host ``conn`` is connected to."""
        info = conn.info
        self._last = (str(info.host), str(info.port))


def connect(params: Mapping[str, Any], bound_s: float) -> psycopg.Connection[Any]:
    """A psycopg connection with ``params`` (psycopg.connect's keyword arguments) whose
    calls are bounded by ``bound_s`` seconds (0: not bounded)."""
    return connect_bounded(bound_s, **params)


def connect_bounded(bound_s: float, *args: Any, **params: Any) -> psycopg.Connection[Any]:
    """:func:`new_connection`, its calls bounded by ``bound_s`` from its first one (an
    engine's dialect connects with it: the first connection's dialect initialisation
    is bounded too)."""
    conn = new_connection(*args, **params)
    bound_calls(conn, bound_s)
    return conn


def new_connection(*args: Any, **params: Any) -> psycopg.Connection[Any]:
    """psycopg.connect, making an instance of :func:`bounded_class` (an engine's
    dialect connects with it: hubstore.engine). Made as such, not turned into one
    afterwards: an instance whose class is changed loses CPython's fast attribute
    access, which cost psycopg's calls more than the bound itself."""
    import psycopg

    made: psycopg.Connection[Any] = bounded_class(psycopg.Connection).connect(*args, **params)
    return made


def bound_calls(conn: Any, bound_s: float) -> None:
    """Bound each call of the psycopg connection ``conn`` by ``bound_s`` seconds from now
    on (0: no bound), and make a lost connection's error name its server.

    A connection :func:`new_connection` made is an instance of :func:`bounded_class`,
    whose ``wait`` (where psycopg waits for the server: every statement, COMMIT and
    ROLLBACK) records when each wait began; another one is turned into one."""
    if not getattr(conn, "hubstore_bounded", False):
        conn.__class__ = bounded_class(conn.__class__)
    conn.hubstore_bound = bound_s
    if bound_s:
        WATCHDOG.watch(conn)


@functools.cache
def bounded_class(base: type[Any]) -> type[Any]:
    """``base`` (psycopg's Connection, or a subclass) with each wait on the server
    recorded for the watchdog: a clock read and two attribute writes, a few hundred
    nanoseconds of a store call whose client side costs hundreds of microseconds. A lost
    connection's error names the server it was lost from (``hubstore_server``); the
    watchdog's own is NoAnswer."""
    base_wait = base.wait

    class BoundedConnection(base):  # type: ignore[misc]
        hubstore_bounded = True
        #: The bound (0: none), the start of the wait under way (0.0: none) and of the
        #: one the watchdog ended, and the socket (see Watchdog).
        hubstore_bound = hubstore_since = hubstore_ended = 0.0
        hubstore_fd = -1

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            self.hubstore_since = since = monotonic()
            try:
                return base_wait(self, gen, *args, **kwargs)
            except Exception as exc:
                lost = _lost_in(self, exc, since)
                if lost is None:
                    raise
                raise lost from exc
            finally:
                self.hubstore_since = 0.0

    if list(inspect.signature(base_wait).parameters) == ["self", "gen", "interval", "timeout"]:
        interval, timeout = base_wait.__defaults__

        def wait(self: Any, gen: Any, interval: Any = interval, timeout: Any = timeout) -> Any:
            # psycopg 3.3's signature, spelled out: half the cost of passing *args on
            self.hubstore_since = since = monotonic()
            try:
                return base_wait(self, gen, interval, timeout)
            except Exception as exc:
                lost = _lost_in(self, exc, since)
                if lost is None:
                    raise
                raise lost from exc
            finally:
                self.hubstore_since = 0.0

        BoundedConnection.wait = wait  # type: ignore[method-assign]
    return BoundedConnection


def _lost_in(conn: Any, exc: Exception, since: float) -> Exception | None:
    """For ``exc`` raised by a wait on ``conn`` begun at ``since``: None to raise it as
    it is (the connection is not lost, or ``exc`` now names the server), or NoAnswer
    when the watchdog ended this very call."""
    if not getattr(conn, "broken", False):
        return None
    server = server_of(conn)
    if conn.hubstore_ended != since:
        exc.hubstore_server = server  # type: ignore[attr-defined]
        return None
    lost = no_answer()(f"no answer within {conn.hubstore_bound:g} s (call_timeout), so "
                       "hubstore closed the connection")
    lost.hubstore_server = server  # type: ignore[attr-defined]
    return lost


@contextmanager
def calls_bounded_by_at_least(conn: Any, bound_s: float) -> Iterator[None]:
    """Within the block, ``conn``'s calls are bounded by at least ``bound_s`` seconds
    (for a migration run on a store's connection); its own bound afterwards. A
    connection without a bound, or not hubstore's, is left as it is."""
    before = getattr(conn, "hubstore_bound", 0.0)
    if not before or before >= bound_s:
        yield
        return
    bound_calls(conn, bound_s)
    try:
        yield
    finally:
        bound_calls(conn, before)  # (wakes the watchdog: it may sleep for the longer one)


def server_of(conn: Any) -> str | None:
    """``HOST:PORT`` of the server ``conn`` is connected to (None when unknown)."""
    try:
        info = conn.info
        return f"{info.host}:{info.port}"
    except Exception:  # a connection closed meanwhile
        return None


@functools.cache
def no_answer() -> type[psycopg.OperationalError]:
    """The error of a call the watchdog ended: a psycopg OperationalError, so that
    SQLAlchemy handles it as any lost connection (made on first use: psycopg is
    imported only for PostgreSQL URLs)."""
    import psycopg

    class NoAnswer(psycopg.OperationalError):
        """The server did not answer a call within its bound; the watchdog closed the
        connection."""

    return NoAnswer


class Watchdog:
    """The thread that ends calls overrunning their bound (see the module's docstring).

    Started by the first bounded connection of a process (again in a forked child), it
    ends once no bounded connection is left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: weakref.WeakSet[Any] = weakref.WeakSet()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._fork = forks.generation()
        #: How many calls the watchdog ended (for tests and diagnostics).
        self.ended = 0

    def watch(self, conn: Any) -> None:
        """Bound ``conn``'s calls by its ``hubstore_bound``."""
        conn.hubstore_fd = conn.pgconn.socket
        with self._lock:
            if self._fork != forks.generation():  # a forked child: the thread is not ours
                self._fork, self._thread = forks.generation(), None
                self._conns = weakref.WeakSet()
            self._conns.add(conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hubstore-watchdog",
                                                daemon=True)
                self._thread.start()
        self._wake.set()  # (a bound shorter than the one it sleeps for)

    def _run(self) -> None:
        while True:
            with self._lock:
                conns = list(self._conns)
                if not conns:
                    self._thread = None
                    return
            self._wake.clear()
            now = monotonic()
            wake_at = now + 60.0
            for conn in conns:
                bound = conn.hubstore_bound
                if not bound:
                    continue
                since = conn.hubstore_since
                if not since:  # idle: a call starting now ends no sooner than this
                    wake_at = min(wake_at, now + bound)
                elif since + bound <= now:
                    self._end(conn, since)
                else:
                    wake_at = min(wake_at, since + bound)
            del conns, conn
            self._wake.wait(max(wake_at - monotonic(), 0.001))

    def _end(self, conn: Any, since: float) -> None:
        """Shut down the socket of ``conn``, whose call begun at ``since`` overran: the
        thread waiting in libpq sees the connection closed. Skipped when that call
        ended meanwhile (its connection may be another's by now)."""
        fd = conn.hubstore_fd
        if fd < 0 or conn.hubstore_since != since:
            return
        conn.hubstore_ended = since
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            return
        try:
            if conn.hubstore_since == since:
                sock.shutdown(socket.SHUT_RDWR)
                self.ended += 1
        except OSError:
            pass
        finally:
            sock.detach()  # the descriptor stays libpq's


#: The process's watchdog.
WATCHDOG = Watchdog()
