"""Who claimed a job, and a timeout that counts the run only: two columns of hubstore's
own on assign_jobs.

- ``claimed_by`` (NULL: never claimed): the latest claim's claimer, the id a worker gives
  its claims, else the claiming process's ``host:pid``; shown by ``hubstore jobs`` and
  the console, so that an operator knows which process holds a running job.
- ``timeout_from`` ('create' by default, the reference's meaning): 'claim' makes
  ``timeout_ms`` a run timeout. Such a job has no deadline while it is queued (time in
  the queue never spends a retry), and each claim sets its deadline to the claim's time
  plus ``timeout_ms``; a retry queues it again without one.

The reference's files stay readable and writable by the reference: it names its columns
in every INSERT (the new ones take NULL and 'create': its own meaning) and its getters
return the new columns beside the others (docs/compatibility.md). SQLite adds both in
place and drops them in place (SQLite 3.35 or newer). The downgrade refuses, and changes
nothing, while a queued or running job times its run from its claim: below 0020 its next
retry would count its deadline from then, time queued included. Let such jobs finish
(or cancel them) first; finished jobs lose nothing that matters.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("assign_jobs", sa.Column("timeout_from", sa.Text(),
                                           server_default=sa.text("'create'"), nullable=False))
    op.add_column("assign_jobs", sa.Column("claimed_by", sa.Text(), nullable=True))


def downgrade() -> None:
    live = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM assign_jobs WHERE status IN ('queued', 'running') AND "
        "timeout_from = 'claim'")).scalar_one()
    if live:
        raise RuntimeError(
            f"cannot downgrade below 0020: {live} queued or running assign job(s) time "
            "their run from the claim (timeout_from 'claim'); let them finish, or cancel "
            "them, first")
    op.drop_column("assign_jobs", "claimed_by")
    op.drop_column("assign_jobs", "timeout_from")
