"""Adopting legacy triflux files: recognising their layout and stamping its revision."""

from __future__ import annotations

import functools

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text
from sqlalchemy.dialects.postgresql import JSON, JSONB
from sqlalchemy.engine import Inspector

from hubstore.errors import UnknownSchema
from hubstore.jsontype import JSONText
from hubstore.migrations.config import is_known
from hubstore.migrations.versions import DEFAULT_VERSION_TABLE, look
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
#: Tables that only hubstore's revisions make (0003, 0004): found beside the hub tables
#: without a hubstore revision, the database is no triflux file but a hubstore one whose
#: revision is elsewhere (a newer hubstore's, or a version table of another name).
HUBSTORE_MADE = frozenset({"hub_counters", "hub_counter_deltas"})


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
