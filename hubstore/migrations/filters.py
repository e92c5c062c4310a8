"""Autogenerate filters: what comparisons leave out (hubstore's and an application's), and
how hubstore's JSON type renders in a revision."""

from __future__ import annotations

from typing import Any, Literal

from alembic.autogenerate.api import AutogenContext
from alembic.runtime.environment import NameFilterParentNames, NameFilterType

from hubstore.jsontype import JSONText
from hubstore.migrations.versions import DEFAULT_VERSION_TABLE, HUB_VERSION_TABLE
from hubstore.models import metadata

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
    "ix_assign_jobs_active_deadline",  # 0021: PostgreSQL's index of active deadlines
})


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
    "ix_assign_jobs_scheduled", "ix_assign_jobs_active_deadline"})


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
