"""PostgreSQL claims that pass full limit keys without reading their jobs.

A claim whose worker's queued jobs all had a full key read every one of them through
the claim index before it found none (652 tuples per job one at a time in the peers
benchmark's limited lane, 1,908 ten per claim). On PostgreSQL the queued jobs are now
indexed in two halves, each job in exactly one of them (so a job writes as many index
entries as before):

- ``ix_assign_jobs_claim`` (worker_agent, priority DESC, created_at_ms, job_id) keeps
  only the queued jobs without a limit key;
- ``ix_assign_jobs_claim_keyed`` (worker_agent, limit_key, priority DESC,
  created_at_ms, job_id) holds the queued jobs with one: a claim finds the worker's
  keys one look each and reads the next jobs of the keys with room only.

A third, ``ix_assign_jobs_scheduled`` (worker_agent, not_before_ms) over the queued jobs
with a start time (only those write an entry to it), tells a waiting claimer when its
next scheduled job is due without reading every queued job of its worker.

SQLite keeps its claim index as it was (its claim runs under the write lock and the
reference's files stay as they are). Downgrade: the claim index of revision 0012 again.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLAIM_COLUMNS: list[str | sa.TextClause] = [
    "worker_agent", sa.text("priority DESC"), "created_at_ms", "job_id"]
KEYED_COLUMNS: list[str | sa.TextClause] = [
    "worker_agent", "limit_key", sa.text("priority DESC"), "created_at_ms", "job_id"]
QUEUED = "status = 'queued'"
FREE = "status = 'queued' AND limit_key IS NULL"
KEYED = "status = 'queued' AND limit_key IS NOT NULL"
SCHEDULED = "status = 'queued' AND not_before_ms IS NOT NULL"


def _claim_index(where: str) -> None:
    op.drop_index("ix_assign_jobs_claim", table_name="assign_jobs")
    op.create_index("ix_assign_jobs_claim", "assign_jobs", CLAIM_COLUMNS,
                    postgresql_where=sa.text(where))


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index("ix_assign_jobs_claim_keyed", "assign_jobs", KEYED_COLUMNS,
                    postgresql_where=sa.text(KEYED))
    op.create_index("ix_assign_jobs_scheduled", "assign_jobs",
                    ["worker_agent", "not_before_ms"], postgresql_where=sa.text(SCHEDULED))
    _claim_index(FREE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _claim_index(QUEUED)
    op.drop_index("ix_assign_jobs_scheduled", table_name="assign_jobs")
    op.drop_index("ix_assign_jobs_claim_keyed", table_name="assign_jobs")
