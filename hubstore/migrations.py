"""Running the Alembic migrations: upgrade, downgrade, current, and adopting legacy files.

Every run takes a lock first (SQLite: the write lock of BEGIN IMMEDIATE; PostgreSQL: a
transaction-level advisory lock), then decides, adopts and migrates in that one
transaction. Two processes that start at once therefore migrate once, and a run that
fails (UnknownSchema included) leaves the database exactly as it was. SQLite runs with
foreign keys off, set outside the transaction, so that a table rebuild cannot
cascade-delete child rows; the journal mode is only switched to WAL after success.

hubstore's revision lives in ``alembic_version`` (Alembic's default, and every hubstore
database made before the option existed), or in a version table of its own
(``hubstore_alembic_version``), so that an application's Alembic history can keep
``alembic_version`` in the same database. Reading finds it in either; see
:func:`locate_revision` for the rules, and docs/migrations.md.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Literal, NamedTuple, ParamSpec, TypeVar

import alembic.command
import alembic.context
import alembic.op
from alembic.autogenerate.api import AutogenContext
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext, NameFilterParentNames, NameFilterType
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.dialects.postgresql import JSON, JSONB
from sqlalchemy.engine import URL, Inspector
from sqlalchemy.pool import NullPool

from hubstore.db_errors import translate
from hubstore.engine import (
    BEGIN_MODE,
    ENV_URL,
    create_hub_engine,
    ensure_sqlite_file,
    resolve_url,
    sqlite_path,
)
from hubstore.errors import (
    HubStoreError,
    SchemaNotCurrent,
    UnknownSchema,
    ValidationError,
    describe,
)
from hubstore.jsontype import JSONText
from hubstore.models import metadata
from hubstore.pg_connections import MAINTENANCE_CALL_TIMEOUT_S, calls_bounded_by_at_least
from hubstore.urls import call_timeout_in

HUB_TABLES = frozenset({
    "agents", "messages", "message_inbox", "human_requests", "dead_letters", "assign_jobs",
    "pipeline_state", "reflexion_entries",
})
#: The reference's version table. Found without the hub tables, it is a partial hub (or
#: another application's table of that name): refused, like any partial hub.
META_TABLE = "_meta"
#: Legacy `_meta.schema_version` -> the revision that has exactly that layout.
LEGACY_REVISIONS = {"3": "0001", "4": "0002"}
V4_COLUMNS = frozenset({"type", "adaptive_state_json"})
#: Tables that only hubstore's revisions make (0003, 0004): found beside the hub tables
#: without a hubstore revision, the database is no triflux file but a hubstore one whose
#: revision is elsewhere (a newer hubstore's, or a version table of another name).
HUBSTORE_MADE = frozenset({"hub_counters", "hub_counter_deltas"})
#: Alembic's version table: hubstore's default, and where every hubstore database made
#: before ``version_table=`` existed keeps its revision.
DEFAULT_VERSION_TABLE = "alembic_version"
#: hubstore's own version table, beside an application whose Alembic keeps alembic_version.
HUB_VERSION_TABLE = "hubstore_alembic_version"
#: Objects that revisions 0003 to 0009 own on one dialect only, and the counters they and
#: 0015 keep with triggers (services/stats.py reads them); the models do not describe them.
MIGRATION_OWNED = frozenset({
    "hub_counters", "hub_counter_deltas", "assign_worker_counts", "assign_worker_count_deltas",
    "reflexion_entries_fts", "reflexion_entries_fts_data",
    "reflexion_entries_fts_idx", "reflexion_entries_fts_content",
    "reflexion_entries_fts_docsize", "reflexion_entries_fts_config",
    "ix_reflexion_pattern_trgm", DEFAULT_VERSION_TABLE, HUB_VERSION_TABLE, "sqlite_sequence",
    "ix_reflexion_project_slug",  # 0005: an expression index written per dialect
    "queue_at_insert",  # 0009: a column of message_log on SQLite only
    "ix_assign_jobs_claim_keyed",  # 0019: PostgreSQL's claim index of keyed jobs
    "ix_assign_jobs_scheduled",  # 0019: PostgreSQL's index of scheduled queued jobs
})
ADVISORY_LOCK_KEY = 0x6875_6273_746F_7265 & 0x7FFF_FFFF_FFFF_FFFF  # "hubstore"
MIGRATION_BUSY_TIMEOUT_MS = 120_000
#: Alembic commands that only look: a version_table given to them moves no row.
LOOKING_COMMANDS = frozenset({"check", "current", "history", "revision", "show", "heads"})
#: A version table or schema name: lower case, so that it reads the same quoted or not.
_SQL_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def hub_errors(function: Callable[_P, _T]) -> Callable[_P, _T]:
    """``function`` raising a database's failures as HubStoreError, as HubStore.open
    does (DatabaseUnavailable for a server that cannot be reached or a database that
    does not exist), with the driver's error as ``__cause__``. Other errors (Alembic's
    CommandError for an unknown revision, a missing SQLite file's FileNotFoundError)
    are left as they are."""

    @functools.wraps(function)
    def translated(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return function(*args, **kwargs)
        except HubStoreError:
            raise
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            raise error from exc

    return translated


def script_location() -> str:
    """The migration scripts: inside the installed package, else the checkout's alembic/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise RuntimeError(f"hubstore's migration scripts are missing (looked beside {here})")


def alembic_config(url: URL | str | None = None, *, version_table: str | None = None,
                   schema: str | None = None) -> Config:
    """An Alembic Config for hubstore's scripts (no alembic.ini needed).

    ``version_table`` and ``schema``: as for :func:`upgrade` (checked here).
    """
    return _config(None if url is None else resolve_url(url), version_table, schema)


def _config(resolved: URL | None, version_table: str | None, schema: str | None) -> Config:
    """:func:`alembic_config` for a URL resolve_url already checked."""
    version_table, schema = checked_options(version_table, schema)
    config = Config()
    config.set_main_option("script_location", script_location())
    if resolved is not None:
        _require_postgresql(resolved, schema)
        config.attributes["hubstore_url"] = resolved
    if version_table is not None:
        config.attributes["hubstore_version_table"] = version_table
    if schema is not None:
        config.attributes["hubstore_schema"] = schema
    return config


@functools.cache
def script_directory() -> ScriptDirectory:
    """hubstore's revisions (loaded once: every HubStore.open asks for the head)."""
    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """The head revision."""
    revision = script_directory().get_current_head()
    assert revision is not None
    return revision


def is_known(revision: str, script: ScriptDirectory | None = None) -> bool:
    """Whether ``revision`` is one of this hubstore's revisions."""
    try:
        return (script or script_directory()).get_revision(revision) is not None
    except CommandError:
        return False


def checked_options(version_table: str | None, schema: str | None
                    ) -> tuple[str | None, str | None]:
    """``version_table`` and ``schema`` as given, refused with ValidationError unless each
    is None or a lower-case SQL name (letters, digits and _, at most 63 characters)."""
    for what, value in (("version_table", version_table), ("schema", schema)):
        if value is not None and (not isinstance(value, str) or not _SQL_NAME.fullmatch(value)):
            raise ValidationError(
                f"{what} must be a lower-case SQL name (a-z, 0-9 and _, not starting with a "
                f"digit, at most 63 characters), not {describe(value)}")
    return version_table, schema


def _require_postgresql(url: URL, schema: str | None) -> None:
    if schema is not None and url.get_backend_name() != "postgresql":
        raise ValidationError(
            f"schema={schema!r} is for PostgreSQL; a SQLite file has no schemas (give "
            "hubstore a file of its own, or leave schema out)")


@hub_errors
def upgrade(url: URL | str | Connection | None = None, revision: str = "head", *,
            version_table: str | None = None, schema: str | None = None) -> None:
    """Migrate up to ``revision``, adopting a legacy triflux database first.

    ``url`` may be a Connection (an application's env.py runs hubstore's migrations on
    its own connection): its transaction is joined when one is open, else hubstore's
    migrations run in one of their own, committed on return.

    ``version_table``: the table that keeps hubstore's revision. None finds it: where a
    revision of this hubstore already is, else ``hubstore_alembic_version`` when that
    table exists or when ``alembic_version`` holds another application's revision, else
    ``alembic_version``. Given, hubstore's revision is kept there, and moved there from
    the other table in the same transaction when it was kept elsewhere.
    ``schema`` (PostgreSQL): hubstore's tables, and its version table, live in that
    schema (created when missing); the migrations run with it as their search_path.

    A new SQLite file's missing folders are made only inside an existing, writable
    folder, never at the top of the file system (DatabaseUnavailable). A server that
    cannot be reached, or a database that does not exist, raises DatabaseUnavailable.
    """
    version_table, schema = checked_options(version_table, schema)
    if revision == "head":
        found = current_version(url, version_table=version_table, schema=schema)
        if found.revision == head() and version_table in (None, found.table):
            return  # the usual start: nothing to lock, load or run
    if isinstance(url, Connection):
        _run_on_connection(alembic.command.upgrade, url, revision, version_table, schema,
                           adopt=True)
        return
    run_upgrade(resolve_url(url), revision, version_table=version_table, schema=schema)


@hub_errors
def run_upgrade(resolved: URL, revision: str = "head", *, version_table: str | None = None,
                schema: str | None = None) -> None:
    """:func:`upgrade` of a URL :func:`hubstore.urls.resolve_url` checked, with checked
    options, run without looking first (HubStore.open has just looked)."""
    config = _config(resolved, version_table, schema)
    config.attributes["hubstore_adopt"] = True
    alembic.command.upgrade(config, revision)


@hub_errors
def downgrade(url: URL | str | Connection | None, revision: str, *,
              version_table: str | None = None, schema: str | None = None) -> None:
    """Migrate down to ``revision`` ("base" removes every hub table). A missing SQLite
    file raises FileNotFoundError (it is not created). ``url`` (a Connection too),
    ``version_table`` and ``schema``: as for :func:`upgrade`."""
    version_table, schema = checked_options(version_table, schema)
    if isinstance(url, Connection):
        _run_on_connection(alembic.command.downgrade, url, revision, version_table, schema,
                           adopt=False)
        return
    alembic.command.downgrade(alembic_config(url, version_table=version_table, schema=schema),
                              revision)


@hub_errors
def current(url: URL | str | Connection | None = None, *, version_table: str | None = None,
            schema: str | None = None) -> str | None:
    """The database's hubstore revision, or None when it has none. Reads only, creates
    nothing. The revision is looked for where :func:`locate_revision` says, and also in
    ``version_table`` when given; ``schema``: as for :func:`upgrade`."""
    return current_version(url, version_table=version_table, schema=schema).revision


class Located(NamedTuple):
    """Where hubstore's revision is kept: the version table (None: no table holds one),
    and the revision (None: none yet)."""

    table: str | None
    revision: str | None


@hub_errors
def current_version(url: URL | str | Connection | None = None, *,
                    version_table: str | None = None, schema: str | None = None) -> Located:
    """:func:`current` with the version table that holds the revision."""
    version_table, schema = checked_options(version_table, schema)
    if isinstance(url, Connection):
        return _locate_on(url, version_table, schema)
    resolved = resolve_url(url)
    _require_postgresql(resolved, schema)
    return _locate_at(resolved, version_table, schema)


def _locate_on(conn: Connection, version_table: str | None, schema: str | None) -> Located:
    """Where a caller's connection keeps hubstore's revision. A transaction the look had
    to begin is ended again, so that the caller's next ``begin()`` (Alembic's too) is a
    transaction of its own, not a join."""
    _require_postgresql(conn.engine.url, schema)
    began = not conn.in_transaction()
    try:
        with _search_path(conn, schema, create=False):
            return locate_revision(conn, version_table)
    finally:
        if began:
            conn.rollback()


@hub_errors
def revision_at(resolved: URL, *, version_table: str | None = None,
                schema: str | None = None) -> str | None:
    """:func:`current` for a URL that :func:`hubstore.urls.resolve_url` already checked."""
    return _locate_at(resolved, version_table, schema).revision


def _locate_at(resolved: URL, version_table: str | None, schema: str | None) -> Located:
    path = sqlite_path(resolved)
    if path is not None:
        return _sqlite_located(path, version_table) if path.exists() else Located(None, None)
    engine = _inspecting_engine(resolved)
    try:
        with engine.connect() as conn, _search_path(conn, schema, create=False):
            return locate_revision(conn, version_table)
    finally:
        engine.dispose()


def read_revision(conn: Connection, version_table: str | None = None) -> str | None:
    """The revision of the database on ``conn`` (on its search path), or None.

    Read with plain SELECTs, not Alembic's MigrationContext, which logs at INFO: opening
    a store at head logs nothing above DEBUG.
    """
    return locate_revision(conn, version_table).revision


def _candidates(version_table: str | None) -> tuple[str, ...]:
    """The version tables to look in: the given one, then hubstore's own, then Alembic's."""
    names = (version_table, HUB_VERSION_TABLE, DEFAULT_VERSION_TABLE)
    return tuple(dict.fromkeys(n for n in names if n is not None))


class VersionTables(NamedTuple):
    """What a look at a database found: each candidate version table that exists, with
    its rows, and whether the hub's tables are there (``agents`` stands for them)."""

    rows: Mapping[str, Sequence[str]]
    hub_tables: bool

    def holders(self, known: Callable[[str], bool]) -> list[str]:
        """The tables that hold a revision of this hubstore: every row a known revision.
        ``alembic_version`` is shared with other applications, so there a known-looking
        revision counts only beside the hub tables, and only while no version table of
        hubstore's own holds a row: hubstore never keeps its revision in two tables, so
        beside one, ``alembic_version`` is the application's (its "0003" is not ours)."""
        own = any(rows for t, rows in self.rows.items() if t != DEFAULT_VERSION_TABLE)
        return [t for t, rows in self.rows.items()
                if rows and all(known(r) for r in rows)
                and (t != DEFAULT_VERSION_TABLE or (self.hub_tables and not own))]

    def foreign(self, table: str, known: Callable[[str], bool]) -> Sequence[str]:
        """The rows of ``table`` when they are not a revision of this hubstore."""
        rows = self.rows.get(table, ())
        return () if not rows or table in self.holders(known) else rows


def look(conn: Connection, version_table: str | None = None) -> VersionTables:
    """The candidate version tables of the database on ``conn`` (see :func:`_candidates`),
    in one catalog query and a SELECT for each one that exists. Reads only."""
    names = _candidates(version_table)
    if conn.dialect.name == "sqlite":
        marks = ", ".join("?" * (len(names) + 1))
        found = {row[0] for row in conn.exec_driver_sql(
            f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
            (*names, "agents"))}
    else:
        found = set(conn.execute(text(
            "SELECT n FROM unnest(CAST(:names AS text[])) AS n "
            "WHERE to_regclass(quote_ident(n)) IS NOT NULL"),
            {"names": [*names, "agents"]}).scalars())
    quote = conn.dialect.identifier_preparer.quote
    rows = {t: [str(r) for r in conn.execute(text(f"SELECT version_num FROM {quote(t)}"))
                .scalars()]
            for t in names if t in found}
    return VersionTables(rows, "agents" in found)


def _sqlite_look(path: Path, version_table: str | None) -> VersionTables:
    """:func:`look` on a SQLite file, without creating it or running any pragma.

    ``mode=rw``, not ``mode=ro``: a read-only connection to a WAL file leaves -wal and
    -shm files behind, which a read-write one removes when it closes.
    """
    names = _candidates(version_table)
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True)
    try:
        marks = ", ".join("?" * (len(names) + 1))
        found = {row[0] for row in db.execute(
            f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
            (*names, "agents"))}
        rows = {t: [str(r[0]) for r in db.execute(f'SELECT version_num FROM "{t}"')]
                for t in names if t in found}
        return VersionTables(rows, "agents" in found)
    finally:
        db.close()


def _sqlite_located(path: Path, version_table: str | None) -> Located:
    return _located(_sqlite_look(path, version_table), version_table)


def locate_revision(conn: Connection, version_table: str | None = None) -> Located:
    """Where the database on ``conn`` keeps hubstore's revision. Reads only.

    - The table whose rows are all revisions of this hubstore (``alembic_version`` only
      beside the hub tables, and only while no version table of hubstore's own holds a
      row: beside one, it is an application's). Two such tables: UnknownSchema.
    - Else hubstore's own table (``version_table``, then ``hubstore_alembic_version``)
      when it exists: empty (None), or a revision this hubstore does not know (a newer
      hubstore's, which :func:`require_current` names).
    - Else ``alembic_version`` with a revision unknown here beside the hub tables: most
      likely a newer hubstore's, returned for the same reason.
    - Else (None, None): no revision of hubstore's; an ``alembic_version`` without the hub
      tables belongs to another application.
    """
    return _located(look(conn, version_table), version_table)


def _located(found: VersionTables, version_table: str | None) -> Located:
    holders = found.holders(is_known)
    if len(holders) > 1:
        raise UnknownSchema(_twice(holders, found))
    if holders:
        return Located(holders[0], found.rows[holders[0]][0])
    for table in _candidates(version_table):
        if table != DEFAULT_VERSION_TABLE and table in found.rows:
            rows = found.rows[table]
            return Located(table, rows[0] if rows else None)
    rows = found.rows.get(DEFAULT_VERSION_TABLE, ())
    if rows and found.hub_tables:
        return Located(DEFAULT_VERSION_TABLE, rows[0])
    return Located(None, None)


def _twice(holders: Sequence[str], found: VersionTables) -> str:
    held = "; ".join(f"{t} holds {', '.join(found.rows[t])}" for t in holders)
    return (f"hubstore's revision is kept in more than one version table ({held}); "
            "hubstore will not guess which is right: delete the stale table's row, or "
            "drop it (nothing was changed)")


@hub_errors
def require_current(url: URL | str | None = None, *, at: str | bool | None = False,
                    version_table: str | None = None, schema: str | None = None) -> None:
    """Raise SchemaNotCurrent unless the database is at head. Creates and changes nothing.

    ``at``: the revision already read (else it is read here).
    """
    resolved = resolve_url(url)
    if at is False:
        at = current(resolved, version_table=version_table, schema=schema)
    assert not isinstance(at, bool)
    if at != head():
        raise not_current(resolved, at)


def not_current(resolved: URL, at: str | None) -> SchemaNotCurrent:
    """The error for the database at ``resolved`` at revision ``at``, not at head."""
    want = head()
    shown = resolved.render_as_string(hide_password=True)
    if at is not None and not is_known(at):
        return SchemaNotCurrent(
            f"the database {shown} is at revision {at}, which this hubstore (head {want}) "
            "does not know: a newer hubstore migrated it. Use that version of hubstore.")
    state = ("has no hubstore revision (a new database, or a triflux one not adopted yet)"
             if at is None else f"is at revision {at}")
    return SchemaNotCurrent(
        f"the database {shown} {state}, not {want} (head). Migrate it with "
        f"`hubstore db upgrade --url '{shown}'`, or open it with "
        "HubStore.open(url, auto_migrate=True).")


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


def legacy_revision(conn: Connection) -> str | None:
    """For a database without a hubstore revision: the revision to stamp, or None for
    one with no hub tables. Anything unrecognised raises UnknownSchema. Reads only."""
    inspector = inspect(conn)
    tables = set(inspector.get_table_names())
    present = (HUB_TABLES | {META_TABLE}) & tables
    if not present:
        return None
    missing = HUB_TABLES - tables
    if missing:
        raise UnknownSchema(
            f"the database has some of the hub's tables ({', '.join(sorted(present))}) but "
            f"not {', '.join(sorted(missing))}; hubstore will not guess how to adopt it "
            "(nothing was changed)")
    made = HUBSTORE_MADE & tables
    if made:
        raise UnknownSchema(
            f"the database has the hub tables and {', '.join(sorted(made))}, which only "
            "hubstore's migrations make, but no revision of this hubstore: a newer hubstore "
            "migrated it, or its revision is kept in a version table of another name (pass "
            "that version_table); hubstore will not guess (nothing was changed)")
    version = None
    if META_TABLE in tables:
        version = conn.execute(
            text("SELECT value FROM _meta WHERE key = 'schema_version'")).scalar()
    columns = {c["name"] for c in inspector.get_columns("reflexion_entries")}
    has_v4 = columns >= V4_COLUMNS
    if not ((version == "3" and not V4_COLUMNS & columns) or (version == "4" and has_v4)):
        raise UnknownSchema(
            f"the database has the hub tables but schema_version {version!r} with reflexion "
            f"columns {sorted(V4_COLUMNS & columns)}; hubstore adopts triflux versions 3 and "
            "4 only (nothing was changed)")
    not_json = _text_json_columns(inspector) if conn.dialect.name != "sqlite" else []
    if not_json:
        raise UnknownSchema(
            f"the JSON columns {', '.join(not_json)} are not JSON/JSONB, which hubstore "
            "reads and writes on PostgreSQL; convert them (ALTER TABLE ... ALTER COLUMN "
            "... TYPE jsonb USING ...::jsonb) and upgrade again (nothing was changed)")
    return LEGACY_REVISIONS[version]


def _text_json_columns(inspector: Inspector) -> list[str]:
    """The models' JSON columns that a legacy PostgreSQL database holds as something else."""
    wrong = []
    for name in sorted(HUB_TABLES):
        json_columns = {c.name for c in metadata.tables[name].columns
                        if isinstance(c.type, JSONText)}
        wrong += [f"{name}.{c['name']}" for c in inspector.get_columns(name)
                  if c["name"] in json_columns and not isinstance(c["type"], JSON | JSONB)]
    return wrong


def include_object(obj: Any, name: str | None, type_: str, reflected: bool,
                   compare_to: Any) -> bool:
    """Leave other applications' tables, and migration-owned objects, out of comparisons."""
    if name in MIGRATION_OWNED:
        return False
    # a reflected table the models do not know is not ours (hubstore may share a database)
    return not (type_ == "table" and reflected and compare_to is None)


#: Every table hubstore's migrations make: the models' and the migration-owned ones.
HUBSTORE_TABLES = frozenset(metadata.tables) | (MIGRATION_OWNED - {
    DEFAULT_VERSION_TABLE, "sqlite_sequence", "ix_reflexion_pattern_trgm",
    "ix_reflexion_project_slug", "queue_at_insert", "ix_assign_jobs_claim_keyed",
    "ix_assign_jobs_scheduled"})


def include_app_name(name: str | None, type_: NameFilterType,
                     parent_names: NameFilterParentNames) -> bool:
    """For an application's own env.py in a database hubstore shares: an ``include_name``
    that keeps autogenerate from reflecting hubstore's tables at all (see
    :func:`include_app_object`, which filters what is compared)."""
    return not (type_ == "table" and name in HUBSTORE_TABLES)


def include_app_object(obj: Any, name: str | None, type_: str, reflected: bool,
                       compare_to: Any) -> bool:
    """For an application's own env.py in a database hubstore shares: an
    ``include_object`` that leaves hubstore's tables (with their indexes and
    constraints) and ``hubstore_alembic_version`` out of the application's autogenerate
    and ``alembic check``, on both sides: the database's tables are not offered for
    dropping, and a stand-in the application declares for a foreign key to a hub table
    (``Table("agents", metadata, Column("agent_id", Text, primary_key=True))``) is not
    offered for creating."""
    table = obj.table.name if type_ in {"column", "index", "unique_constraint",
                                        "foreign_key_constraint"} else name
    return table not in HUBSTORE_TABLES


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Autogenerate: hubstore's JSON column type, imported by the revision that uses it."""
    if type_ == "type" and isinstance(obj, JSONText):
        autogen_context.imports.add("from hubstore.jsontype import JSONText")
        return f"JSONText({obj.fallback!r})"
    return False  # Alembic's own rendering


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


def _settle_and_migrate(context: EnvironmentContext, conn: Connection,
                        version_table: str | None, *, adopt: bool) -> None:
    """Under the lock: settle where the revision is kept, adopt a legacy database (when
    upgrading), run the migrations. On SQLite, a run that leaves rows without their
    parent row fails (and is rolled back); rows a legacy file already left dangling are
    its own business. Skipped on the usual path: opening at head."""
    script = ScriptDirectory.from_config(context.config)
    table = _settle(conn, script, version_table,
                    moving=_cli_command(context.config) not in LOOKING_COMMANDS)
    at_head = _adopt(conn, script, table) if adopt else False
    dangling = None if conn.dialect.name != "sqlite" or at_head else _dangling_rows(conn)
    applied: list[str] = []
    _migrate(context, conn, version_table=table,
             on_version_apply=lambda step, **_: applied.append(step.up_revision_id or ""))
    if dangling is not None and applied:
        new = _dangling_rows(conn) - dangling
        if new:
            raise RuntimeError("a migration left rows without their parent row (rolled "
                               f"back): {sorted(new)[:10]}")


def _migrate(context: EnvironmentContext, conn: Connection, **options: Any) -> None:
    """Run the migrations on ``conn``, with the options every online run shares (batch
    mode on SQLite; the comparison rules autogenerate and drift checks use)."""
    context.configure(
        connection=conn, target_metadata=metadata, include_object=include_object,
        render_as_batch=conn.dialect.name == "sqlite", compare_type=True,
        render_item=render_item, **options)
    with context.begin_transaction():
        context.run_migrations()


def _settle(conn: Connection, script: ScriptDirectory, wanted: str | None, *,
            moving: bool) -> str:
    """The version table this run keeps hubstore's revision in, under the lock.

    ``wanted`` None: where a revision of this hubstore is; else hubstore_alembic_version
    when it exists (empty, or a newer hubstore's revision, which _adopt refuses) or when
    alembic_version holds another application's revision; else alembic_version.
    ``wanted`` given: that table; a revision kept in the other table is moved there when
    ``moving`` (and the emptied table, hubstore's alone, dropped). A wanted table that
    holds someone else's revision is refused.
    """
    found = look(conn, wanted)
    known = functools.partial(is_known, script=script)
    holders = found.holders(known)
    if len(holders) > 1:
        raise UnknownSchema(_twice(holders, found))
    held = holders[0] if holders else None
    if wanted is None:
        if held is not None:
            return held
        if HUB_VERSION_TABLE in found.rows or found.rows.get(DEFAULT_VERSION_TABLE):
            return HUB_VERSION_TABLE
        return DEFAULT_VERSION_TABLE
    foreign = found.foreign(wanted, known)
    if foreign:
        raise UnknownSchema(
            f"the version table {wanted} holds {', '.join(foreign)}, which is not a "
            "revision of this hubstore: another application's Alembic keeps its revision "
            "there (give hubstore a version_table of its own) or a newer hubstore migrated "
            "the database; nothing was changed")
    if held is None or held == wanted:
        return wanted
    if not moving:
        return held
    revisions = found.rows[held]
    context = MigrationContext.configure(conn, opts={"version_table": wanted})
    for revision in revisions:
        context.stamp(script, revision)
    conn.exec_driver_sql(f"DROP TABLE {conn.dialect.identifier_preparer.quote(held)}")
    log.info("hubstore's revision %s moved from %s to %s", ", ".join(revisions), held, wanted)
    return wanted


def _adopt(conn: Connection, script: ScriptDirectory,
           version_table: str = DEFAULT_VERSION_TABLE) -> bool:
    """Stamp a legacy triflux database with the revision of its layout, under the lock.
    Returns whether the database is at head already.

    A revision this hubstore does not know (a newer hubstore's) is refused before
    anything is written.
    """
    context = MigrationContext.configure(conn, opts={"version_table": version_table})
    heads = context.get_current_heads()
    unknown = [h for h in heads if not is_known(h, script)]
    if unknown:
        raise UnknownSchema(
            f"the database's {version_table} holds {', '.join(unknown)}, which is not a "
            "revision of this hubstore: a newer hubstore migrated it (use that version of "
            "hubstore); nothing was changed")
    if heads:
        return set(heads) == set(script.get_heads())
    try:
        revision = legacy_revision(conn)
    except UnknownSchema as exc:
        others = look(conn).foreign(DEFAULT_VERSION_TABLE, functools.partial(
            is_known, script=script))
        if version_table == DEFAULT_VERSION_TABLE or not others:
            raise
        raise UnknownSchema(f"alembic_version holds {', '.join(others)}, which is not a "
                            f"revision of this hubstore, and {exc}") from None
    if revision is not None:
        context.stamp(script, revision)
    return False


def _run_on_connection(command: Callable[[Config, str], Any], conn: Connection,
                       revision: str, version_table: str | None, schema: str | None, *,
                       adopt: bool) -> None:
    """An Alembic command on a caller's connection, through hubstore's env.py.

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
