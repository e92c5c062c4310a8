"""An index for list_reflexion(project_slug=...): adaptive_state_json's project_slug.

An expression index on the JSON path ``project_slug`` of ``adaptive_state_json``, written
per dialect (so the models do not describe it; see hubstore.migrations.MIGRATION_OWNED):

- SQLite: a B-tree on the slug when it is a JSON string (else NULL). The CASE keeps
  json_extract away from text that is not JSON (a legacy row must not make writes fail)
  and from arrays and objects, which json_extract would return as JSON text.
- PostgreSQL: a hash index on ``adaptive_state_json -> 'project_slug'`` (jsonb equality
  with a jsonb string is exact; a hash index has no row-size limit, so a long slug can
  still be stored).

The queries in hubstore/services/reflexion.py repeat these expressions exactly, so the
planners use the index (tests/store/test_reflexion_list.py checks the plans).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "ix_reflexion_project_slug"
SQLITE_EXPRESSION = (
    "CASE WHEN json_valid(adaptive_state_json) THEN "
    "CASE json_type(adaptive_state_json, '$.project_slug') "
    "WHEN 'text' THEN json_extract(adaptive_state_json, '$.project_slug') END END")
POSTGRESQL_EXPRESSION = "adaptive_state_json -> 'project_slug'"


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute(f"CREATE INDEX {NAME} ON reflexion_entries (({SQLITE_EXPRESSION}))")
    else:
        op.execute(f"CREATE INDEX {NAME} ON reflexion_entries USING hash "
                   f"(({POSTGRESQL_EXPRESSION}))")


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {NAME}")
