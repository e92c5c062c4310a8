"""64-bit counters on PostgreSQL: the columns the reference can fill with large numbers.

The reference (SQLite) stores any integer up to 64 bits in these columns; on PostgreSQL
they were INTEGER (32 bits), so ``register_agent(pid=2**31)`` or
``create_assign(max_retries=2**31)`` failed there only. They become BIGINT, so that both
dialects take the same values (hubstore refuses integers outside 64 bits on both).
SQLite's INTEGER is 64-bit already: nothing changes there.

The downgrade narrows them back to INTEGER; it refuses (and changes nothing) when a row
holds a value that INTEGER cannot, rather than lose or alter it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: table -> the columns made 64-bit.
COLUMNS: dict[str, tuple[str, ...]] = {
    "agents": ("pid",),
    "message_inbox": ("attempts",),
    "assign_jobs": ("attempt", "retry_count", "max_retries"),
    "pipeline_state": ("fix_attempt", "fix_max", "ralph_iteration", "ralph_max"),
    "reflexion_entries": ("hit_count", "success_count"),
}
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    bind = op.get_bind()
    for table, columns in COLUMNS.items():
        for column in columns:
            too_big = bind.execute(sa.text(
                f"SELECT count(*) FROM {table} WHERE {column} NOT BETWEEN :low AND :high"),
                {"low": INT32_MIN, "high": INT32_MAX}).scalar_one()
            if too_big:
                raise RuntimeError(
                    f"cannot downgrade below 0006: {too_big} row(s) of {table}.{column} "
                    "hold values outside 32 bits")
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=sa.Integer(), existing_type=sa.BigInteger())
