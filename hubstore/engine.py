"""Engines per dialect: SQLite (embedded default) and PostgreSQL (psycopg 3).

URL handling lives in :mod:`hubstore.urls` (re-exported here), SQLite's connection
set-up and BEGIN path in :mod:`hubstore.sqlite`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hubstore import sqlite
from hubstore.jsontype import dumps
from hubstore.sqlite import BEGIN_MODE, BUSY_TIMEOUT_MS
from hubstore.urls import (
    ENV_URL,
    PGBOUNCER_OPTION,
    behind_pgbouncer,
    default_url,
    ensure_sqlite_file,
    resolve_url,
    sqlite_path,
)

#: Seconds a PostgreSQL connection attempt may take, unless the URL says otherwise
#: (``?connect_timeout=N``).
CONNECT_TIMEOUT_S = 10

__all__ = [
    "BEGIN_MODE", "BUSY_TIMEOUT_MS", "CONNECT_TIMEOUT_S", "ENV_URL", "create_hub_engine",
    "default_url", "ensure_sqlite_file", "resolve_url", "sqlite_path",
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
                      busy_timeout_ms: int = BUSY_TIMEOUT_MS, **kwargs: Any) -> Engine:
    """An engine configured for the hub.

    ``wal`` and ``foreign_keys`` exist for the migration runner: it must not switch
    the journal mode before it has decided a legacy file is its own, and it rebuilds
    tables with foreign keys off so that no child row is cascade-deleted.
    """
    if url.get_backend_name() == "postgresql":
        connect_args = dict(kwargs.pop("connect_args", {}))
        if "connect_timeout" not in url.query:
            connect_args.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        pooled = behind_pgbouncer(url)
        if pooled:  # no server-side prepared statements: each transaction may change server
            connect_args.setdefault("prepare_threshold", None)
        ping_idle = "pool_pre_ping" not in kwargs
        engine = create_engine(url, json_serializer=_json_serializer,
                               json_deserializer=json.loads, connect_args=connect_args,
                               **kwargs)
        if ping_idle:
            _ping_when_idle(engine)
        if pooled:
            # The engine keeps ?pgbouncer=true in its URL (the store's waiters read it),
            # but libpq does not know the option.
            @event.listens_for(engine, "do_connect")
            def _drop_option(_dialect: Any, _record: Any, _cargs: Any,
                             cparams: dict[str, Any]) -> None:
                cparams.pop(PGBOUNCER_OPTION, None)

        return engine
    # Each thread keeps its own connections (hubstore.connections), so a bounded pool
    # would cap the number of threads; a SQLite connection is only a file handle. They
    # may be closed from another thread (a store's close(), a finished thread's cleanup).
    kwargs.setdefault("poolclass", NullPool)
    connect_args = {"check_same_thread": False, **kwargs.pop("connect_args", {})}
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    sqlite.configure_engine(engine, wal=wal, foreign_keys=foreign_keys,
                            busy_timeout_ms=busy_timeout_ms)
    return engine
