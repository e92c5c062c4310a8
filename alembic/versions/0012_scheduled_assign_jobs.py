"""Scheduled assign jobs and retry back-off: two columns of hubstore's own on assign_jobs.

- ``not_before_ms`` (NULL: at once): a job is not claimed before this time. A job made
  with ``not_before_ms`` waits for it; a retry with back-off waits ``retry_backoff_ms``
  times two to the power of the retries it already had (capped at 24 hours).
- ``retry_backoff_ms`` (0: none): the first retry's delay.

The reference's files stay readable and writable by the reference: it names its columns
in every INSERT (the new ones take NULL and 0, a job due at once without back-off) and
its getters read the columns they know; its ``CREATE TABLE IF NOT EXISTS`` leaves the
table as it is. to_dict() leaves both out, as the reference's getters do.

SQLite adds both columns in place (no table rebuild), and drops them in place (SQLite
3.35+; an older one rebuilds the table in batch mode, keeping every row, and makes the
DESC indexes reflection loses again as 0001 made them). The downgrade refuses, and changes nothing,
while a queued or running job still has a schedule to keep (a start time, or a back-off
with retries left): below 0012 it would be claimed early, or retried at once. Finished
jobs lose nothing that matters; a job still due later must be let run (or its
not_before_ms cleared) first.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

import sqlite3
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("assign_jobs", sa.Column("not_before_ms", sa.BigInteger(), nullable=True))
    op.add_column("assign_jobs", sa.Column("retry_backoff_ms", sa.BigInteger(),
                                           server_default=sa.text("0"), nullable=False))


def downgrade() -> None:
    pending = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM assign_jobs WHERE status IN ('queued', 'running') AND "
        "(not_before_ms IS NOT NULL OR (retry_backoff_ms > 0 AND retry_count < max_retries))"
    )).scalar_one()
    if pending:
        raise RuntimeError(
            f"cannot downgrade below 0012: {pending} queued or running assign job(s) have "
            "a start time or a retry back-off to keep; let them finish, or clear "
            "not_before_ms and retry_backoff_ms, first")
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info < (3, 35):
        _rebuild_without_schedule()
    else:  # native DROP COLUMN: the table keeps its exact DDL and indexes
        op.drop_column("assign_jobs", "retry_backoff_ms")
        op.drop_column("assign_jobs", "not_before_ms")


#: assign_jobs' indexes with a DESC column, as 0001 made them (batch reflection loses DESC).
_DESC_INDEXES = {
    "idx_assign_jobs_status": ("status", "updated_at_ms DESC"),
    "idx_assign_jobs_supervisor": ("supervisor_agent", "updated_at_ms DESC"),
    "idx_assign_jobs_worker": ("worker_agent", "updated_at_ms DESC"),
}


def _rebuild_without_schedule() -> None:
    """Older SQLite: a batch rebuild (the runner has foreign keys off)."""
    with op.batch_alter_table("assign_jobs") as batch:
        batch.drop_column("retry_backoff_ms")
        batch.drop_column("not_before_ms")
    for name, columns in _DESC_INDEXES.items():
        op.drop_index(name, table_name="assign_jobs")
        op.create_index(name, "assign_jobs", [sa.text(c) for c in columns])
    op.drop_index("ix_assign_jobs_claim", table_name="assign_jobs")  # (0003's, as made)
    op.create_index("ix_assign_jobs_claim", "assign_jobs",
                    ["worker_agent", sa.text("priority DESC"), "created_at_ms", "job_id"],
                    sqlite_where=sa.text("status = 'queued'"))
