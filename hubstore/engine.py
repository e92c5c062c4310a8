"""Engines per dialect: SQLite (embedded default) and PostgreSQL (psycopg 3).

URL handling lives in :mod:`hubstore.urls` (re-exported here), SQLite's connection
set-up and BEGIN path in :mod:`hubstore.sqlite_setup`, PostgreSQL's connect settings and the
bound on each call in :mod:`hubstore.pg_connections`.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hubstore import pg_connections, sqlite_setup
from hubstore.jsontype import dumps
from hubstore.pg_connections import CALL_TIMEOUT_S, CONNECT_TIMEOUT_S
from hubstore.sqlite_setup import BEGIN_MODE, BUSY_TIMEOUT_MS
from hubstore.urls import (
    ENV_URL,
    HUBSTORE_OPTIONS,
    behind_pgbouncer,
    call_timeout_in,
    checked_call_timeout,
    default_url,
    ensure_sqlite_file,
    resolve_url,
    sqlite_path,
)

__all__ = [
    "BEGIN_MODE", "BUSY_TIMEOUT_MS", "CALL_TIMEOUT_S", "CONNECT_TIMEOUT_S", "ENV_URL",
    "create_hub_engine", "default_url", "ensure_sqlite_file", "resolve_url", "sqlite_path",
]


def _json_serializer(value: Any) -> str:
    return dumps(value)


#: A pooled PostgreSQL connection that sat idle in the pool longer than this is pinged
#: before it is handed out (a dead one is replaced, unseen by the caller).
IDLE_PING_S = 1.0
_IDLE_SINCE = "hubstore_idle_since"


def _ping_when_idle(engine: Engine) -> None:
    """Pre-ping only the connections that were idle for IDLE_PING_S or more.

    SQLAlchemy's ``pool_pre_ping`` costs a round trip before every unit of work; a
    connection in steady use has just proved itself alive. One lost while in use (or
    within the idle threshold) fails that call with DatabaseUnavailable, and SQLAlchemy
    invalidates the pool's older connections, so the next call gets a fresh one.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since < IDLE_PING_S:
            return  # just connected, or in steady use
        try:  # in autocommit, so that the ping leaves no transaction open
            before, dbapi_conn.autocommit = dbapi_conn.autocommit, True
            try:
                dbapi_conn.execute("SELECT 1")
            finally:
                dbapi_conn.autocommit = before
        except Exception as exc:  # the pool connects afresh and retries the checkout
            raise sa_exc.DisconnectionError(f"idle connection lost: {exc}") from exc


def create_hub_engine(url: URL, *, wal: bool = True, foreign_keys: bool = True,
                      busy_timeout_ms: int = BUSY_TIMEOUT_MS,
                      call_timeout_s: float | None = CALL_TIMEOUT_S, **kwargs: Any) -> Engine:
    """An engine configured for the hub.

    ``wal`` and ``foreign_keys`` exist for the migration runner: it must not switch
    the journal mode before it has decided a legacy file is its own, and it rebuilds
    tables with foreign keys off so that no child row is cascade-deleted.

    PostgreSQL: every connection gets hubstore's libpq settings (connect timeout,
    keepalives, tcp_user_timeout: :mod:`hubstore.pg_connections`) where the URL and
    ``connect_args`` do not set them, and each call to the server is bounded by
    ``?call_timeout=`` in the URL, else ``call_timeout_s`` seconds (0 or None: no
    bound).
    """
    # Statement parameters stay out of SQLAlchemy's log and errors: they may hold a
    # secret (a credential answer), and -vv logs every statement.
    kwargs.setdefault("hide_parameters", True)
    if url.get_backend_name() == "postgresql":
        from_url = call_timeout_in(url)
        bound = from_url if from_url is not None else checked_call_timeout(
            call_timeout_s, "call_timeout_s")
        connect_args = pg_connections.libpq_settings(url, kwargs.pop("connect_args", None))
        pooled = behind_pgbouncer(url)
        if pooled:  # no server-side prepared statements: each transaction may change server
            connect_args.setdefault("prepare_threshold", None)
        ping_idle = "pool_pre_ping" not in kwargs
        engine = create_engine(url, json_serializer=_json_serializer,
                               json_deserializer=json.loads, connect_args=connect_args,
                               **kwargs)
        if ping_idle:
            _ping_when_idle(engine)
        # Connections made as pg_connections' class (after the do_connect listeners,
        # an application's included, as the dialect's own connect would be), their
        # calls bounded from the start: SQLAlchemy's first-connect queries (the
        # dialect's initialisation) run before the "connect" listeners.
        engine.dialect.connect = functools.partial(  # type: ignore[method-assign,assignment]
            pg_connections.connect_bounded, bound)
        hosts = pg_connections.HostOrder()

        # The engine keeps hubstore's options in its URL (the store's waiters read
        # ?pgbouncer=), but libpq does not know them.
        @event.listens_for(engine, "do_connect")
        def _connect(_dialect: Any, _record: Any, _cargs: list[Any],
                     cparams: dict[str, Any]) -> None:
            for option in HUBSTORE_OPTIONS:
                cparams.pop(option, None)
            hosts.apply(cparams)

        @event.listens_for(engine, "connect")
        def _connected(dbapi_conn: Any, _record: Any) -> None:
            hosts.remember(dbapi_conn)

        return engine
    # Each thread keeps its own connections (hubstore.connections), so a bounded pool
    # would cap the number of threads; a SQLite connection is only a file handle. They
    # may be closed from another thread (a store's close(), a finished thread's cleanup).
    kwargs.setdefault("poolclass", NullPool)
    connect_args = {"check_same_thread": False, **kwargs.pop("connect_args", {})}
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    sqlite_setup.configure_engine(engine, wal=wal, foreign_keys=foreign_keys,
                            busy_timeout_ms=busy_timeout_ms)
    return engine
