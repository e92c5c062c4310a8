"""The reference's schema version 4: reflexion_entries.type and adaptive_state_json.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlite3
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild), exactly what the reference does.
    op.add_column("reflexion_entries", sa.Column(
        "type", sa.Text(), server_default=sa.text("'reflexion'"), nullable=False))
    op.add_column("reflexion_entries", sa.Column(
        "adaptive_state_json", sa.Text().with_variant(postgresql.JSONB(), "postgresql"),
        server_default=sa.text("'{}'"), nullable=False))
    op.execute("UPDATE _meta SET value = '4' WHERE key = 'schema_version'")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info < (3, 35):
        _rebuild_without_v4_columns()
    else:
        # Native DROP COLUMN (SQLite 3.35+): the table keeps its exact DDL and indexes.
        op.drop_column("reflexion_entries", "adaptive_state_json")
        op.drop_column("reflexion_entries", "type")
    op.execute("UPDATE _meta SET value = '3' WHERE key = 'schema_version'")


def _rebuild_without_v4_columns() -> None:
    """Older SQLite: a batch rebuild (the runner has foreign keys off). Reflection loses
    the DESC of idx_reflexion_confidence, so that index is made again as 0001 made it."""
    with op.batch_alter_table("reflexion_entries") as batch:
        batch.drop_column("adaptive_state_json")
        batch.drop_column("type")
    op.drop_index("idx_reflexion_confidence", table_name="reflexion_entries")
    op.create_index("idx_reflexion_confidence", "reflexion_entries", [sa.text("confidence DESC")])
