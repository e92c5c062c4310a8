"""Engines per dialect: SQLite (embedded default) and PostgreSQL (psycopg 3).

URL handling lives in :mod:`hubstore.urls` (re-exported here), SQLite's connection
set-up and BEGIN path in :mod:`hubstore.sqlite`.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, create_engine, event
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
        engine = create_engine(url, pool_pre_ping=True, json_serializer=_json_serializer,
                               json_deserializer=json.loads, connect_args=connect_args,
                               **kwargs)
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
