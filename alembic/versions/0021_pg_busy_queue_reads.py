"""PostgreSQL: the earliest deadline read from an index of its own, however stale the
table's statistics; the deadline index without finished jobs.

A queue's table changes faster than autovacuum analyzes it: after a burst of jobs (or in
a new database's first minute) the planner still believes a status holds a few rows.
The earliest deadline of a queued or running job, which every claim's rescue look and
every waiting claimer reads (``services/assigns/rescue.py``), was then planned as a
bitmap of the status index's queued and running ranges, every row fetched and sorted
(about 2,000 rows a look with 2,000 jobs queued), rather than a walk of the reference's
(deadline_ms, status) index. In the peers benchmark's limited lane (2,000 jobs, 4
workers, a limit of 2 at once), whose workers wait for room and look each time, that was
226 to 450 tuples read per job, where the claim itself reads about 30.

``ix_assign_jobs_active_deadline`` (deadline_ms) holds exactly the rows the look asks
for (a deadline, status queued or running), so its first entry is the answer whatever
the statistics say; the timeout sweep's due jobs are a range of it too. A job writes an
entry to it when it is queued and when a claim makes it running; a finished job (no
deadline) none.

To pay for that entry, the reference's ``idx_assign_jobs_deadline`` (deadline_ms, status)
keeps only the rows with a deadline on PostgreSQL: a finished job has none (hubstore
clears it), so finishing a job writes no entry there. What reads it (a list's
``active_before_ms``) asks for a deadline anyway. Per job: one index entry more to
enqueue, none more to claim and finish.

SQLite keeps the reference's index and has no new one (the reference's files stay as
they are; SQLite plans by its indexes' shapes, not by row counts). Downgrade: the new
index dropped, the reference's index whole again.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The rows the earliest-deadline look asks for, in the form its statement writes them.
ACTIVE_DEADLINE = "deadline_ms IS NOT NULL AND (status = 'queued' OR status = 'running')"


def _deadline_index(where: str | None) -> None:
    op.drop_index("idx_assign_jobs_deadline", table_name="assign_jobs")
    op.create_index("idx_assign_jobs_deadline", "assign_jobs", ["deadline_ms", "status"],
                    postgresql_where=None if where is None else sa.text(where))


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index("ix_assign_jobs_active_deadline", "assign_jobs", ["deadline_ms"],
                    postgresql_where=sa.text(ACTIVE_DEADLINE))
    _deadline_index("deadline_ms IS NOT NULL")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _deadline_index(None)
    op.drop_index("ix_assign_jobs_active_deadline", table_name="assign_jobs")
