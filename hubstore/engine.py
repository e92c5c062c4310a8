"""Database URLs and engines: SQLite (embedded default) and PostgreSQL (psycopg 3).

SQLite engines turn off pysqlite's own transaction handling and emit BEGIN themselves, so
that a writing unit of work starts with BEGIN IMMEDIATE (it takes the write lock up
front and waits out busy_timeout instead of failing with SQLITE_BUSY half-way).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from platformdirs import user_data_dir
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from hubstore.errors import ValidationError
from hubstore.jsontype import dumps

ENV_URL = "HUBSTORE_URL"
BUSY_TIMEOUT_MS = 5000
#: Execution option naming how a SQLite transaction begins ("DEFERRED" or "IMMEDIATE").
BEGIN_MODE = "hubstore_begin"


def default_url() -> str:
    """The embedded default: a SQLite file in the user's data directory."""
    return f"sqlite:///{Path(user_data_dir('hubstore')) / 'hub.db'}"


def resolve_url(url: str | URL | None = None) -> URL:
    """The given URL, else $HUBSTORE_URL, else the embedded default."""
    raw = url if url is not None else os.environ.get(ENV_URL) or default_url()
    parsed = make_url(raw)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValidationError(
            f"hubstore supports sqlite:/// and postgresql+psycopg:// URLs, not {parsed.drivername}")
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for an in-memory database."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def ensure_sqlite_file(url: URL) -> None:
    """Create a missing SQLite file with mode 0600, and its folders with mode 0700."""
    path = sqlite_path(url)
    if path is None or path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


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
        return create_engine(url, pool_pre_ping=True, json_serializer=_json_serializer,
                             json_deserializer=json.loads, **kwargs)
    # Each thread keeps its own connection (hubstore.connections), so a bounded pool
    # would cap the number of threads; a SQLite connection is only a file handle.
    kwargs.setdefault("poolclass", NullPool)
    engine = create_engine(url, **kwargs)
    _configure_sqlite(engine, wal=wal, foreign_keys=foreign_keys, busy_timeout_ms=busy_timeout_ms)
    return engine


def _configure_sqlite(engine: Engine, *, wal: bool, foreign_keys: bool,
                      busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if wal:
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        driver = conn.connection.driver_connection
        if driver.in_transaction:  # a unit of work began on the driver: join it
            return
        immediate = conn.get_execution_options().get(BEGIN_MODE) == "IMMEDIATE"
        driver.execute("BEGIN IMMEDIATE" if immediate else "BEGIN DEFERRED")
