"""PostgreSQL: an assign job's status change counted by a row trigger, not a transition table.

Revision 0004 counts assign jobs per status with statement-level triggers whose transition
tables feed an aggregate (old rows -1, new rows +1, grouped by name, the zero sums
dropped) into hub_counter_deltas. A claim and a finish are one-row UPDATEs: each paid for
two transition tables, the aggregate query and its plan in the trigger, and an UPDATE that
left the status alone (a progress report, a deadline moved) paid for all of it to insert
nothing. Measured in the server (a PL/pgSQL loop of 3,000 one-row status UPDATEs, 5
runs): 26 to 43 us per UPDATE without the trigger, 40 to 93 us with 0004's, 36 to 65 us
with this one.

The UPDATE trigger becomes a row trigger ``WHEN (OLD.status IS DISTINCT FROM NEW.status)``
(checked by the server before any PL/pgSQL runs) that inserts the job's two deltas,
still only INSERTs into hub_counter_deltas, so no writer locks a shared row. The INSERT
and DELETE triggers stay statement-level (bulk writes insert one delta per status). A
multi-row UPDATE now inserts two deltas per changed row instead of one per status; the
sums, and so the figures, are the same. No row changes; the downgrade puts back the
statement-level UPDATE trigger.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ROW_FUNCTION = """
CREATE FUNCTION hub_count_assign_job_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hub_counter_deltas (name, delta)
    VALUES ('assign_' || NEW.status, 1), ('assign_' || OLD.status, -1);
    RETURN NULL;
END
$$"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_ROW_FUNCTION)
    op.execute("DROP TRIGGER trg_hub_assign_jobs_update ON assign_jobs")
    op.execute(
        "CREATE TRIGGER trg_hub_assign_jobs_update AFTER UPDATE ON assign_jobs "
        "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) "
        "EXECUTE FUNCTION hub_count_assign_job_status()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER trg_hub_assign_jobs_update ON assign_jobs")
    op.execute(
        "CREATE TRIGGER trg_hub_assign_jobs_update AFTER UPDATE ON assign_jobs "
        "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION hub_count_assign_jobs()")
    op.execute("DROP FUNCTION hub_count_assign_job_status()")
