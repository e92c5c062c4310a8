"""Running the Alembic migrations: upgrade, downgrade, current, and adopting legacy files.

Every run takes a lock first (SQLite: the write lock of BEGIN IMMEDIATE; PostgreSQL: a
transaction-level advisory lock), then decides, adopts and migrates in that one
transaction. Two processes that start at once therefore migrate once, and a run that
fails (UnknownSchema included) leaves the database exactly as it was. SQLite runs with
foreign keys off, set outside the transaction, so that a table rebuild cannot
cascade-delete child rows; the journal mode is only switched to WAL after success.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import alembic.command
from alembic.autogenerate.api import AutogenContext
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.dialects.postgresql import JSON, JSONB
from sqlalchemy.engine import URL, Inspector
from sqlalchemy.pool import NullPool

from hubstore.engine import (
    BEGIN_MODE,
    ENV_URL,
    create_hub_engine,
    ensure_sqlite_file,
    resolve_url,
    sqlite_path,
)
from hubstore.errors import SchemaNotCurrent, UnknownSchema
from hubstore.jsontype import JSONText
from hubstore.models import metadata

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
#: Objects that revisions 0003 to 0009 own on one dialect only; the models do not describe them.
MIGRATION_OWNED = frozenset({
    "hub_counters", "hub_counter_deltas", "reflexion_entries_fts", "reflexion_entries_fts_data",
    "reflexion_entries_fts_idx", "reflexion_entries_fts_content",
    "reflexion_entries_fts_docsize", "reflexion_entries_fts_config",
    "ix_reflexion_pattern_trgm", "alembic_version", "sqlite_sequence",
    "ix_reflexion_project_slug",  # 0005: an expression index written per dialect
    "queue_at_insert",  # 0009: a column of message_log on SQLite only
})
ADVISORY_LOCK_KEY = 0x6875_6273_746F_7265 & 0x7FFF_FFFF_FFFF_FFFF  # "hubstore"
MIGRATION_BUSY_TIMEOUT_MS = 120_000


def script_location() -> str:
    """The migration scripts: inside the installed package, else the checkout's alembic/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise RuntimeError(f"hubstore's migration scripts are missing (looked beside {here})")


def alembic_config(url: URL | str | None = None) -> Config:
    """An Alembic Config for hubstore's scripts (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", script_location())
    if url is not None:
        config.attributes["hubstore_url"] = resolve_url(url)
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


def upgrade(url: URL | str | None = None, revision: str = "head") -> None:
    """Migrate up to ``revision``, adopting a legacy triflux database first."""
    if revision == "head" and current(url) == head():
        return  # the usual start: nothing to lock, load or run
    config = alembic_config(url)
    config.attributes["hubstore_adopt"] = True
    alembic.command.upgrade(config, revision)


def downgrade(url: URL | str | None, revision: str) -> None:
    """Migrate down to ``revision`` ("base" removes every hub table). A missing SQLite
    file raises FileNotFoundError (it is not created)."""
    alembic.command.downgrade(alembic_config(url), revision)


def current(url: URL | str | None = None) -> str | None:
    """The database's revision, or None when it has none. Reads only, creates nothing."""
    return revision_at(resolve_url(url))


def revision_at(resolved: URL) -> str | None:
    """:func:`current` for a URL that :func:`hubstore.urls.resolve_url` already checked."""
    path = sqlite_path(resolved)
    if path is not None:
        return _sqlite_revision(path) if path.exists() else None
    engine = _inspecting_engine(resolved)
    try:
        with engine.connect() as conn:
            return read_revision(conn)
    finally:
        engine.dispose()


def read_revision(conn: Connection) -> str | None:
    """The revision in ``alembic_version`` (on the connection's search path), or None.

    Read with a plain SELECT, not Alembic's MigrationContext, which logs at INFO: opening
    a store at head logs nothing above DEBUG.
    """
    if not inspect(conn).has_table("alembic_version"):
        return None
    heads = [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]
    return heads[0] if heads else None


def _sqlite_revision(path: Path) -> str | None:
    """The revision of a SQLite file, read without creating it or running any pragma.

    ``mode=rw``, not ``mode=ro``: a read-only connection to a WAL file leaves -wal and
    -shm files behind, which a read-write one removes when it closes.
    """
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True)
    try:
        found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                           "AND name = 'alembic_version'").fetchone()
        if found is None:
            return None
        row = db.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])
    finally:
        db.close()


def require_current(url: URL | str | None = None, *, at: str | bool | None = False) -> None:
    """Raise SchemaNotCurrent unless the database is at head. Creates and changes nothing.

    ``at``: the revision already read (else it is read here).
    """
    resolved = resolve_url(url)
    if at is False:
        at = current(resolved)
    want = head()
    if at == want:
        return
    assert not isinstance(at, bool)
    shown = resolved.render_as_string(hide_password=True)
    if at is not None and not is_known(at):
        raise SchemaNotCurrent(
            f"the database {shown} is at revision {at}, which this hubstore (head {want}) "
            "does not know: a newer hubstore migrated it. Use that version of hubstore.")
    state = ("has no hubstore revision (a new database, or a triflux one not adopted yet)"
             if at is None else f"is at revision {at}")
    raise SchemaNotCurrent(
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
        return create_hub_engine(url, poolclass=NullPool)
    uri = f"{path.absolute().as_uri()}?mode=rw"
    return create_engine("sqlite://", poolclass=NullPool,
                         creator=lambda: sqlite3.connect(uri, uri=True))


def env_url(context: EnvironmentContext) -> URL:
    """The URL of an Alembic run: given by hubstore, else -x url=, else $HUBSTORE_URL,
    else alembic.ini's sqlalchemy.url, else the embedded default."""
    config = context.config
    given = config.attributes.get("hubstore_url")
    if given is not None:
        return resolve_url(given)
    candidates = (context.get_x_argument(as_dictionary=True).get("url"),
                  os.environ.get(ENV_URL), config.get_main_option("sqlalchemy.url"))
    return resolve_url(next((c for c in candidates if c), None))


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
                               busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS)
    sqlite = url.get_backend_name() == "sqlite"
    try:
        with engine.connect() as conn:
            if sqlite:
                conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
            with conn.begin():
                if not sqlite:
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": ADVISORY_LOCK_KEY})
                yield conn
            if sqlite:  # outside the transaction: pysqlite's own BEGIN is off
                raw = conn.connection.driver_connection
                assert raw is not None
                raw.execute("PRAGMA journal_mode = WAL")
    finally:
        engine.dispose()


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


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Autogenerate: hubstore's JSON column type, imported by the revision that uses it."""
    if type_ == "type" and isinstance(obj, JSONText):
        autogen_context.imports.add("from hubstore.jsontype import JSONText")
        return f"JSONText({obj.fallback!r})"
    return False  # Alembic's own rendering


def run_env(context: EnvironmentContext) -> None:
    """The body of alembic/env.py."""
    if context.is_offline_mode():
        context.configure(url=env_url(context).render_as_string(hide_password=False),
                          target_metadata=metadata, literal_binds=True,
                          render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
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
    adopt = bool(config.attributes.get("hubstore_adopt")) or _cli_command(config) == "upgrade"
    sqlite = url.get_backend_name() == "sqlite"
    applied: list[str] = []
    with locked_connection(url, create=adopt) as conn:
        script = ScriptDirectory.from_config(config)
        at_head = _adopt(conn, script) if adopt else False
        # Rows a legacy file already left dangling are its own business; a migration that
        # leaves new ones is rolled back. Skipped on the usual path: opening at head.
        dangling = None if not sqlite or at_head else _dangling_rows(conn)
        _migrate(context, conn, transaction_per_migration=False,
                 on_version_apply=lambda step, **_: applied.append(step.up_revision_id or ""))
        if dangling is not None and applied:
            new = _dangling_rows(conn) - dangling
            if new:
                raise RuntimeError("a migration left rows without their parent row (rolled "
                                   f"back): {sorted(new)[:10]}")


def _run_on(context: EnvironmentContext, conn: Connection) -> None:
    """Migrate on a connection (or engine) the caller handed over in
    ``config.attributes["connection"]`` (the Alembic cookbook's way, and pytest-alembic's):
    its URL, transaction and locking are the caller's. A legacy database is adopted only
    when hubstore asked for it."""
    if context.config.attributes.get("hubstore_adopt"):
        _adopt(conn, ScriptDirectory.from_config(context.config))
    _migrate(context, conn)


def _migrate(context: EnvironmentContext, conn: Connection, **options: Any) -> None:
    """Run the migrations on ``conn``, with the options every online run shares (batch
    mode on SQLite; the comparison rules autogenerate and drift checks use)."""
    context.configure(
        connection=conn, target_metadata=metadata, include_object=include_object,
        render_as_batch=conn.dialect.name == "sqlite", compare_type=True,
        render_item=render_item, **options)
    with context.begin_transaction():
        context.run_migrations()


def _adopt(conn: Connection, script: ScriptDirectory) -> bool:
    """Stamp a legacy triflux database with the revision of its layout, under the lock.
    Returns whether the database is at head already.

    A revision this hubstore does not know (a newer hubstore's, or another application's
    Alembic sharing the database) is refused before anything is written.
    """
    heads = MigrationContext.configure(conn).get_current_heads()
    unknown = [h for h in heads if not is_known(h, script)]
    if unknown:
        raise UnknownSchema(
            f"the database's alembic_version holds {', '.join(unknown)}, which is not a "
            "hubstore revision: a newer hubstore migrated it, or another application's "
            "Alembic uses this database (give hubstore a database or schema of its own); "
            "nothing was changed")
    if heads:
        return set(heads) == set(script.get_heads())
    revision = legacy_revision(conn)
    if revision is not None:
        MigrationContext.configure(conn).stamp(script, revision)
    return False


def _dangling_rows(conn: Connection) -> set[tuple[Any, ...]]:
    """SQLite's foreign key violations: (table, rowid, parent table, key number)."""
    return {tuple(row) for row in conn.exec_driver_sql("PRAGMA foreign_key_check")}


def _cli_command(config: Config) -> str | None:
    cmd = getattr(getattr(config, "cmd_opts", None), "cmd", None)
    if not cmd:
        return None
    fn = cmd[0] if isinstance(cmd, tuple) else cmd
    return getattr(fn, "__name__", None)
