"""The migration runtime: env.py's body, the locked connection and transaction, the search
path and the call bound a run has.

Every run takes a lock first (SQLite: the write lock of BEGIN IMMEDIATE; PostgreSQL: a
transaction-level advisory lock), then decides, adopts and migrates in that one
transaction. Two processes that start at once therefore migrate once, and a run that
fails (UnknownSchema included) leaves the database exactly as it was. The revision a run
reports having found (:class:`MigrationReport`) is read under the lock too, so the second
of two runs reports what the first one left. SQLite runs with
foreign keys off, set outside the transaction, so that a table rebuild cannot
cascade-delete child rows; the journal mode is only switched to WAL after success.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, NamedTuple

import alembic.context
import alembic.op
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hubstore.engine import (
    BEGIN_MODE,
    ENV_URL,
    create_hub_engine,
    ensure_sqlite_file,
    resolve_url,
    sqlite_path,
)
from hubstore.migrations.adoption import _adopt
from hubstore.migrations.config import _require_postgresql, alembic_config, checked_options
from hubstore.migrations.filters import include_object, render_item
from hubstore.migrations.versions import DEFAULT_VERSION_TABLE, _settle, look
from hubstore.models import metadata
from hubstore.pg_connections import MAINTENANCE_CALL_TIMEOUT_S, calls_bounded_by_at_least
from hubstore.urls import call_timeout_in

ADVISORY_LOCK_KEY = 0x6875_6273_746F_7265 & 0x7FFF_FFFF_FFFF_FFFF  # "hubstore"
MIGRATION_BUSY_TIMEOUT_MS = 120_000
#: The Config attribute where an online run leaves its :class:`MigrationReport`.
REPORT = "hubstore_report"
#: Alembic commands that only look: a version_table given to them moves no row.
LOOKING_COMMANDS = frozenset({"check", "current", "history", "revision", "show", "heads"})


def _require_sqlite_file(url: URL) -> None:
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise FileNotFoundError(f"there is no SQLite database at {path}")


def _inspecting_engine(url: URL) -> Engine:
    """An engine that looks without changing anything.

    A SQLite file is opened with ``mode=rw``: never created, and no pragma is run. Not
    ``mode=ro``: a read-only connection to a WAL file leaves -wal and -shm files behind,
    which a read-write one removes when it closes.
    """
    path = sqlite_path(url)
    if path is None:
        return create_hub_engine(url, poolclass=NullPool,
                                 call_timeout_s=MAINTENANCE_CALL_TIMEOUT_S)
    uri = f"{path.absolute().as_uri()}?mode=rw"
    return create_engine("sqlite://", poolclass=NullPool,
                         creator=lambda: sqlite3.connect(uri, uri=True))


def env_url(context: EnvironmentContext) -> URL:
    """The URL of an Alembic run: given by hubstore, else -x url=, else $HUBSTORE_URL,
    else alembic.ini's sqlalchemy.url, else the embedded default."""
    config = context.config
    given = config.attributes.get("hubstore_url")
    if isinstance(given, URL):
        return given  # (resolved by alembic_config)
    candidates = (context.get_x_argument(as_dictionary=True).get("url"),
                  os.environ.get(ENV_URL), config.get_main_option("sqlalchemy.url"))
    return resolve_url(next((c for c in candidates if c), None))


def env_options(context: EnvironmentContext) -> tuple[str | None, str | None]:
    """The version table and schema of an Alembic run: given by hubstore, else
    ``-x version_table=...`` and ``-x schema=...`` (checked)."""
    attributes = context.config.attributes
    given = context.get_x_argument(as_dictionary=True)
    return checked_options(
        attributes.get("hubstore_version_table") or given.get("version_table") or None,
        attributes.get("hubstore_schema") or given.get("schema") or None)


@contextmanager
def locked_connection(url: URL, *, create: bool = True) -> Iterator[Connection]:
    """A connection in a transaction that holds the migration lock.

    ``create`` makes a missing SQLite file (mode 0600); without it a missing file is an
    error. SQLite's foreign keys are off for the whole connection (the pragma does
    nothing inside a transaction), and the file only becomes WAL after a commit.
    """
    if create:
        ensure_sqlite_file(url)
    else:
        _require_sqlite_file(url)
    engine = create_hub_engine(url, wal=False, foreign_keys=False, poolclass=NullPool,
                               busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS,
                               call_timeout_s=MAINTENANCE_CALL_TIMEOUT_S)
    sqlite = url.get_backend_name() == "sqlite"
    try:
        with engine.connect() as conn:
            if sqlite:
                conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
            with conn.begin():
                if not sqlite:
                    _advisory_lock(conn)
                yield conn
            if sqlite:  # outside the transaction: pysqlite's own BEGIN is off
                raw = conn.connection.driver_connection
                assert raw is not None
                raw.execute("PRAGMA journal_mode = WAL")
    finally:
        engine.dispose()


def _advisory_lock(conn: Connection) -> None:
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})


@contextmanager
def _search_path(conn: Connection, schema: str | None, *, create: bool) -> Iterator[None]:
    """PostgreSQL: ``schema`` as the search path of the transaction on ``conn`` (made
    first when ``create``), and the search path it had back on a clean exit (an error
    leaves it to the rollback, which undoes a transaction-local setting anyway)."""
    if schema is None:
        yield
        return
    quoted = f'"{schema}"'  # a checked lower-case name (checked_options)
    if create:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
    before = conn.execute(text("SELECT current_setting('search_path')")).scalar_one()
    conn.execute(text("SELECT set_config('search_path', :path, true)"), {"path": quoted})
    yield
    conn.execute(text("SELECT set_config('search_path', :path, true)"), {"path": before})


def run_env(context: EnvironmentContext) -> None:
    """The body of alembic/env.py."""
    version_table, schema = env_options(context)
    if context.is_offline_mode():
        _run_offline(context, version_table, schema)
        return
    config = context.config
    given = config.attributes.get("connection")
    if isinstance(given, Engine):
        with given.connect() as conn:
            _run_on(context, conn)
            conn.commit()
        return
    if given is not None:
        _run_on(context, given)
        return
    url = env_url(context)
    _require_postgresql(url, schema)
    adopt = bool(config.attributes.get("hubstore_adopt")) or _cli_command(config) == "upgrade"
    with locked_connection(url, create=adopt) as conn, _search_path(conn, schema, create=adopt):
        _settle_and_migrate(context, conn, version_table, adopt=adopt)


def _run_offline(context: EnvironmentContext, version_table: str | None,
                 schema: str | None) -> None:
    """``--sql``: the script for the table given (else alembic_version: without a
    database, where the revision is kept cannot be looked up), in ``schema``."""
    url = env_url(context)
    _require_postgresql(url, schema)
    context.configure(url=url.render_as_string(hide_password=False),
                      target_metadata=metadata, literal_binds=True, render_as_batch=True,
                      version_table=version_table or DEFAULT_VERSION_TABLE)
    with context.begin_transaction():
        if schema is not None:
            context.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            context.execute(f'SET LOCAL search_path TO "{schema}"')
        context.run_migrations()


def _run_on(context: EnvironmentContext, conn: Connection) -> None:
    """Migrate on a connection (or engine) the caller handed over in
    ``config.attributes["connection"]`` (the Alembic cookbook's way, and pytest-alembic's,
    and :func:`upgrade` given a Connection). Its URL is the caller's; an open transaction
    is joined (the caller commits), else the migrations run in one of their own. A legacy
    database is adopted only when hubstore asked for it."""
    version_table, schema = env_options(context)
    adopt = bool(context.config.attributes.get("hubstore_adopt"))
    with _transaction_on(conn), _search_path(conn, schema, create=adopt):
        _settle_and_migrate(context, conn, version_table, adopt=adopt)


@contextmanager
def _transaction_on(conn: Connection) -> Iterator[None]:
    """A transaction on a caller's connection that holds the migration lock: the open one,
    else one of hubstore's, committed on a clean exit.

    SQLite: a transaction hubstore begins is BEGIN IMMEDIATE (pysqlite would leave the DDL
    outside any transaction), with foreign keys off around it and back on afterwards (a
    table rebuild must not cascade-delete child rows). A transaction the caller already
    has cannot have them switched off: with them on, the run is refused.
    """
    sqlite = conn.dialect.name == "sqlite"
    raw: Any = conn.connection.driver_connection if sqlite else None
    foreign_keys = sqlite and raw.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    if conn.in_transaction():
        if foreign_keys:
            raise RuntimeError(
                "hubstore's migrations need SQLite's foreign keys off (a table rebuild would "
                "delete child rows), and this connection has them on inside an open "
                "transaction: hand over the connection before its transaction begins "
                "(nothing was changed)")
        if not sqlite:
            _advisory_lock(conn)
        yield
        return
    if foreign_keys:
        raw.execute("PRAGMA foreign_keys = OFF")
    try:
        with conn.begin():
            if sqlite and not raw.in_transaction:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            if not sqlite:
                _advisory_lock(conn)
            yield
    finally:
        if foreign_keys:
            raw.execute("PRAGMA foreign_keys = ON")


class MigrationReport(NamedTuple):
    """What a run found under the migration lock, and where it left the database: the
    revision before (None: none), the revision a triflux file was adopted as (None: none
    was), and the revision after."""

    before: str | None
    adopted: str | None
    after: str | None


def _settle_and_migrate(context: EnvironmentContext, conn: Connection,
                        version_table: str | None, *, adopt: bool) -> None:
    """Under the lock: settle where the revision is kept, adopt a legacy database (when
    upgrading), run the migrations. On SQLite, a run that leaves rows without their
    parent row fails (and is rolled back); rows a legacy file already left dangling are
    its own business. Skipped on the usual path: opening at head. What the run found
    and left is put in the Config's attributes (:data:`REPORT`)."""
    script = ScriptDirectory.from_config(context.config)
    table = _settle(conn, script, version_table,
                    moving=_cli_command(context.config) not in LOOKING_COMMANDS)
    before = _revision_in(conn, table)
    at_head = _adopt(conn, script, table) if adopt else False
    stamped = _revision_in(conn, table) if adopt else before
    dangling = None if conn.dialect.name != "sqlite" or at_head else _dangling_rows(conn)
    applied: list[str] = []
    _migrate(context, conn, version_table=table,
             on_version_apply=lambda step, **_: applied.append(step.up_revision_id or ""))
    if dangling is not None and applied:
        new = _dangling_rows(conn) - dangling
        if new:
            raise RuntimeError("a migration left rows without their parent row (rolled "
                               f"back): {sorted(new)[:10]}")
    context.config.attributes[REPORT] = MigrationReport(
        before, None if stamped == before else stamped, _revision_in(conn, table))


def _revision_in(conn: Connection, table: str) -> str | None:
    """The revision that the version table ``table`` holds (None: none, or no table)."""
    rows = look(conn, table).rows.get(table, ())
    return rows[0] if rows else None


def _migrate(context: EnvironmentContext, conn: Connection, **options: Any) -> None:
    """Run the migrations on ``conn``, with the options every online run shares (batch
    mode on SQLite; the comparison rules autogenerate and drift checks use)."""
    context.configure(
        connection=conn, target_metadata=metadata, include_object=include_object,
        render_as_batch=conn.dialect.name == "sqlite", compare_type=True,
        render_item=render_item, **options)
    with context.begin_transaction():
        context.run_migrations()


def _run_on_connection(command: Callable[[Config, str], Any], conn: Connection,
                       revision: str, version_table: str | None, schema: str | None, *,
                       adopt: bool) -> MigrationReport:
    """An Alembic command on a caller's connection, through hubstore's env.py; what it
    found and left.

    Called from an application's env.py, that env.py's own ``alembic.context`` (and an
    ``alembic.op`` in use) stay usable afterwards: Alembic points those modules at the
    running environment and clears them when it ends, so they are pointed back.
    """
    _require_postgresql(conn.engine.url, schema)
    config = alembic_config(version_table=version_table, schema=schema)
    config.attributes["connection"] = conn
    config.attributes["hubstore_adopt"] = adopt
    outer = [getattr(module, "_proxy", None) for module in (alembic.context, alembic.op)]
    try:
        with _maintenance_bound(conn):
            command(config, revision)
        report: MigrationReport = config.attributes[REPORT]
        return report
    finally:
        for proxy in outer:
            if proxy is not None:
                proxy._install_proxy()


def _maintenance_bound(conn: Connection) -> AbstractContextManager[None]:
    """A store's connection (HubStore.open with auto_migrate) migrates with calls bounded
    by at least MAINTENANCE_CALL_TIMEOUT_S, unless its URL sets ``?call_timeout=``."""
    if conn.dialect.name != "postgresql" or call_timeout_in(conn.engine.url) is not None:
        return nullcontext()
    return calls_bounded_by_at_least(conn.connection.driver_connection,
                                     MAINTENANCE_CALL_TIMEOUT_S)


def _dangling_rows(conn: Connection) -> set[tuple[Any, ...]]:
    """SQLite's foreign key violations: (table, rowid, parent table, key number)."""
    return {tuple(row) for row in conn.exec_driver_sql("PRAGMA foreign_key_check")}


def _cli_command(config: Config) -> str | None:
    cmd = getattr(getattr(config, "cmd_opts", None), "cmd", None)
    if not cmd:
        return None
    fn = cmd[0] if isinstance(cmd, tuple) else cmd
    return getattr(fn, "__name__", None)
