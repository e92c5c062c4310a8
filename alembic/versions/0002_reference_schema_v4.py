"""The reference's schema version 4: reflexion_entries.type and adaptive_state_json.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

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
    with op.batch_alter_table("reflexion_entries") as batch:
        batch.drop_column("adaptive_state_json")
        batch.drop_column("type")
    op.execute("UPDATE _meta SET value = '3' WHERE key = 'schema_version'")
