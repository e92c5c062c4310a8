"""What the console reads on a big hub, without scanning: dead letters newest first, and
the queued and running assign jobs of each worker.

- ``ix_dead_letters_failed`` (failed_at_ms DESC, message_id DESC): ``get_dead_letters``
  (and the reference's ``getDL``) read the newest dead letters from it instead of sorting
  the table. Dead letters are written when a message fails, not on any job write.
- ``assign_worker_counts`` (worker_agent, queued, running): each worker's queued and
  running jobs, kept by triggers on assign_jobs whoever moves a job (hubstore, the
  reference store, raw SQL), as 0003, 0004 and 0010 keep the hub's counters. A worker
  with no queued or running job has no row. What they count is
  ``hubstore.figures.WORKER_COUNTS`` (this file holds a copy, as migrations must;
  tests/test_figures.py checks they agree), and ``hubstore db check`` compares them.

  SQLite (one writer at a time): row triggers update the worker's row. A job that stays
  with its worker and moves between queued and running (a claim, a put-back) is one
  UPDATE; one that becomes queued or running (a new job, a retry) is one UPSERT; one
  that stops being either (finished, cancelled, deleted) is an UPDATE and the DELETE of
  a row left at zero. Moves that change neither the status nor the worker (a progress
  report, a touch, the reference's whole-row UPDATE) fire nothing.

  PostgreSQL: writers in many processes must not queue on a worker's row (nor deadlock
  on two of them), so the triggers only INSERT into ``assign_worker_count_deltas``, as
  0004 does for the hub's counters: statement triggers with transition tables for
  inserts and deletes (a batch is one delta per worker); for an UPDATE, revision 0010's
  row trigger on a status change also appends the worker's delta (a claim or a finish
  is one delta row), and fires when the worker changes too. Readers add the deltas to
  the counts; the fold of the hub's counters (services/stats.py) folds them too, under
  the same advisory lock, and drops the rows left at zero.

  What they cost the job lanes is measured by ``benchmarks/bench_store.py --claim
  --claim-lanes no-worker-counts`` (the same runs with these triggers taken away).

The reference's files stay readable and writable by the reference: a new index, a new
table, and triggers that keep it.

Downgrade: the triggers, the tables and the index are dropped; no job changes (the
counts are derived from the jobs, and counted again on the next upgrade).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Which rows the counts count (hubstore/figures.py states it; this is its copy).
WORKER_COUNTS = ("SELECT worker_agent, "
                 "sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END) AS queued, "
                 "sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running "
                 "FROM assign_jobs WHERE status IN ('queued', 'running') "
                 "GROUP BY worker_agent")
_ACTIVE = "IN ('queued', 'running')"

# SQLite: a job becoming queued or running under a worker, or stopping being either.
_ENTER = """INSERT INTO assign_worker_counts (worker_agent, queued, running)
        VALUES (NEW.worker_agent, NEW.status = 'queued', NEW.status = 'running')
        ON CONFLICT (worker_agent) DO UPDATE SET queued = queued + excluded.queued,
                                                 running = running + excluded.running;"""
_LEAVE = """UPDATE assign_worker_counts SET queued = queued - (OLD.status = 'queued'),
                                            running = running - (OLD.status = 'running')
         WHERE worker_agent = OLD.worker_agent;
        DELETE FROM assign_worker_counts
         WHERE worker_agent = OLD.worker_agent AND queued = 0 AND running = 0;"""
_STAYS = f"OLD.worker_agent = NEW.worker_agent AND OLD.status {_ACTIVE} " \
         f"AND NEW.status {_ACTIVE}"
SQLITE_TRIGGERS = {
    "trg_assign_worker_counts_insert": f"""AFTER INSERT ON assign_jobs
    WHEN NEW.status {_ACTIVE} BEGIN
        {_ENTER}
    END""",
    "trg_assign_worker_counts_delete": f"""AFTER DELETE ON assign_jobs
    WHEN OLD.status {_ACTIVE} BEGIN
        {_LEAVE}
    END""",
    "trg_assign_worker_counts_move": f"""AFTER UPDATE OF status, worker_agent ON assign_jobs
    WHEN {_STAYS} AND OLD.status <> NEW.status BEGIN
        UPDATE assign_worker_counts
           SET queued = queued + (NEW.status = 'queued') - (OLD.status = 'queued'),
               running = running + (NEW.status = 'running') - (OLD.status = 'running')
         WHERE worker_agent = NEW.worker_agent;
    END""",
    "trg_assign_worker_counts_leave": f"""AFTER UPDATE OF status, worker_agent ON assign_jobs
    WHEN OLD.status {_ACTIVE} AND NOT ({_STAYS}) BEGIN
        {_LEAVE}
    END""",
    "trg_assign_worker_counts_enter": f"""AFTER UPDATE OF status, worker_agent ON assign_jobs
    WHEN NEW.status {_ACTIVE} AND NOT ({_STAYS}) BEGIN
        {_ENTER}
    END""",
}


def _grouped(relation: str, sign: str) -> str:
    return ("INSERT INTO assign_worker_count_deltas (worker_agent, queued, running) "
            f"SELECT worker_agent, {sign}count(*) FILTER (WHERE status = 'queued'), "
            f"{sign}count(*) FILTER (WHERE status = 'running') FROM {relation} "
            f"WHERE status {_ACTIVE} GROUP BY worker_agent;")


#: PostgreSQL, inserts and deletes: statement triggers, one delta per worker a batch.
PG_FUNCTION = f"""
CREATE FUNCTION hub_count_assign_workers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {_grouped("new_rows", "")}
    ELSE
        {_grouped("old_rows", "-")}
    END IF;
    RETURN NULL;
END
$$"""
PG_TRIGGERS = {
    "trg_assign_worker_counts_insert":
        "AFTER INSERT ON assign_jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
        "EXECUTE FUNCTION hub_count_assign_workers()",
    "trg_assign_worker_counts_delete":
        "AFTER DELETE ON assign_jobs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
        "EXECUTE FUNCTION hub_count_assign_workers()",
}
#: PostgreSQL, updates: revision 0010's row trigger on a status change, which appends the
#: hub's two deltas, also appends the worker's (and fires when the worker changes). A
#: trigger of its own would cost each claim and each finish a second trigger call:
#: measured in the server (a PL/pgSQL loop of 3,000 jobs, each claimed and finished by
#: one-row UPDATEs, 7 runs; the median per UPDATE): 42.0 us without the worker counts,
#: 54.5 us with a trigger of their own, 46.6 us folded into 0010's.
STATUS_TRIGGER = "trg_hub_assign_jobs_update"
STATUS_FUNCTION = """
CREATE OR REPLACE FUNCTION hub_count_assign_job_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IS DISTINCT FROM NEW.status THEN
        INSERT INTO hub_counter_deltas (name, delta)
        VALUES ('assign_' || NEW.status, 1), ('assign_' || OLD.status, -1);
    END IF;
    IF OLD.status IN ('queued', 'running') OR NEW.status IN ('queued', 'running') THEN
        IF OLD.worker_agent = NEW.worker_agent THEN
            INSERT INTO assign_worker_count_deltas (worker_agent, queued, running)
            VALUES (NEW.worker_agent,
                    (NEW.status = 'queued')::int - (OLD.status = 'queued')::int,
                    (NEW.status = 'running')::int - (OLD.status = 'running')::int);
        ELSE
            INSERT INTO assign_worker_count_deltas (worker_agent, queued, running)
            VALUES (OLD.worker_agent, -(OLD.status = 'queued')::int,
                    -(OLD.status = 'running')::int),
                   (NEW.worker_agent, (NEW.status = 'queued')::int,
                    (NEW.status = 'running')::int);
        END IF;
    END IF;
    RETURN NULL;
END
$$"""
STATUS_WHEN = ("OLD.status IS DISTINCT FROM NEW.status "
               "OR OLD.worker_agent IS DISTINCT FROM NEW.worker_agent")
#: Revision 0010's function and condition, which the downgrade puts back.
STATUS_FUNCTION_0010 = """
CREATE OR REPLACE FUNCTION hub_count_assign_job_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hub_counter_deltas (name, delta)
    VALUES ('assign_' || NEW.status, 1), ('assign_' || OLD.status, -1);
    RETURN NULL;
END
$$"""
STATUS_WHEN_0010 = "OLD.status IS DISTINCT FROM NEW.status"


def _status_trigger(when: str) -> None:
    op.execute(f"DROP TRIGGER {STATUS_TRIGGER} ON assign_jobs")
    op.execute(f"CREATE TRIGGER {STATUS_TRIGGER} AFTER UPDATE ON assign_jobs FOR EACH ROW "
               f"WHEN ({when}) EXECUTE FUNCTION hub_count_assign_job_status()")


def upgrade() -> None:
    op.create_index("ix_dead_letters_failed", "dead_letters",
                    [sa.text("failed_at_ms DESC"), sa.text("message_id DESC")])
    op.create_table(
        "assign_worker_counts",
        sa.Column("worker_agent", sa.Text(), nullable=False),
        sa.Column("queued", sa.BigInteger(), nullable=False),
        sa.Column("running", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("worker_agent", name=op.f("pk_assign_worker_counts")),
    )
    if op.get_bind().dialect.name == "sqlite":  # (one writer: nothing slips between)
        for name, body in SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")
    else:
        op.create_table(
            "assign_worker_count_deltas",
            sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
            sa.Column("worker_agent", sa.Text(), nullable=False),
            sa.Column("queued", sa.BigInteger(), nullable=False),
            sa.Column("running", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("id", name=op.f("pk_assign_worker_count_deltas")),
        )
        # No job moves between the count and the triggers (the rest of the transaction).
        op.execute("LOCK TABLE assign_jobs IN SHARE MODE")
        op.execute(PG_FUNCTION)
        for name, body in PG_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")
        op.execute(STATUS_FUNCTION)
        _status_trigger(STATUS_WHEN)
    op.execute("INSERT INTO assign_worker_counts (worker_agent, queued, running) "
               f"{WORKER_COUNTS}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    else:
        _status_trigger(STATUS_WHEN_0010)
        op.execute(STATUS_FUNCTION_0010)
        for name in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER {name} ON assign_jobs")
        op.execute("DROP FUNCTION hub_count_assign_workers()")
        op.drop_table("assign_worker_count_deltas")
    op.drop_table("assign_worker_counts")
    op.drop_index("ix_dead_letters_failed", table_name="dead_letters")
