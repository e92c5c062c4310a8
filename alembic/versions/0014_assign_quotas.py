"""Provider quotas, unique jobs and periodic jobs: hubstore's own tables and columns.

- ``assign_limits``: one row per quota key (max_running; max_starts per per_ms), with
  the key's running count and recent start times. Triggers on assign_jobs keep both,
  whoever moves a job (hubstore, the reference store, raw SQL): a job of the key that
  becomes running counts +1 and records its start (its updated_at_ms); one that stops
  running counts -1 (and, on PostgreSQL, sends ``pg_notify('hubstore_assigns',
  'l' || md5(key))`` so that waiting claimers whose jobs the limit held look again).
  Claims read the key's row to decide (services/claims.py). ``released_at_ms`` is the
  latest time one of the key's jobs stopped running: a job started in the room it left
  is stamped no earlier (its started_at_ms and updated_at_ms), so the stamps show no
  more than max_running running at any instant, in the order the database decided.
  PostgreSQL keeps the start times sorted, the ``max_starts`` newest (a claim reads the
  one that decides by its place, under the row's lock); SQLite keeps those of the last
  two windows (its claims run under the database write lock and count them).
- ``assign_jobs.limit_key`` and ``assign_jobs.unique_key`` (NULL for the reference's
  rows and writes: it names its columns): the job's quota, and a key that no other
  queued or running job holds (a partial unique index, ``ux_assign_jobs_unique_key``).
  ``ix_assign_jobs_limit_key`` (limit_key, started_at_ms), on limited jobs only, lets
  ``set_assign_limit`` count a key's jobs without reading the others.
- ``assign_schedules``: periodic jobs, one row per schedule with its next tick.

The reference's files stay readable and writable by the reference: new tables, two
nullable columns, and triggers that do nothing for jobs without a limit key.

Downgrade: refused (nothing changed) while a queued or running job has a limit key or a
unique key: below 0014 the limit would no longer hold, or a second job with the key
could be queued. Finished jobs lose their keys; limits and schedules are dropped.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "unique_key IS NOT NULL AND status IN ('queued', 'running')"
LIMITED = "limit_key IS NOT NULL"


def _json() -> sa.types.TypeEngine[Any]:
    return sa.Text().with_variant(postgresql.JSONB(), "postgresql")


#: SQLite: the key's running count and start times, kept by row triggers. A job that is
#: running under a key, before or after the row's change, counts once: the old one's
#: key loses it unless the new row is running under the same key, and the other way.
_WAS_RUNNING = "OLD.status = 'running' AND OLD.limit_key IS NOT NULL"
_IS_RUNNING = "NEW.status = 'running' AND NEW.limit_key IS NOT NULL"
_SQLITE_RELEASE = """UPDATE assign_limits SET running = running - 1,
       released_at_ms = max(coalesce(released_at_ms, {at}), {at})
     WHERE key = OLD.limit_key AND {when};"""
_SQLITE_TAKE = """UPDATE assign_limits SET running = running + 1,
       starts_json = CASE WHEN per_ms IS NULL THEN '[]' ELSE (
           SELECT json_group_array(t) FROM (
               SELECT value AS t FROM json_each(assign_limits.starts_json)
                WHERE value > NEW.updated_at_ms - 2 * assign_limits.per_ms
               UNION ALL SELECT NEW.updated_at_ms)) END
     WHERE key = NEW.limit_key AND {when};"""
SQLITE_TRIGGERS = {
    "trg_assign_limits_insert": f"""AFTER INSERT ON assign_jobs WHEN {_IS_RUNNING} BEGIN
        {_SQLITE_TAKE.format(when="1")}
    END""",
    "trg_assign_limits_delete": f"""AFTER DELETE ON assign_jobs WHEN {_WAS_RUNNING} BEGIN
        {_SQLITE_RELEASE.format(when="1", at="OLD.updated_at_ms")}
    END""",
    "trg_assign_limits_update": f"""AFTER UPDATE OF status, limit_key ON assign_jobs
    WHEN ({_WAS_RUNNING}) OR ({_IS_RUNNING}) BEGIN
        {_SQLITE_RELEASE.format(at="NEW.updated_at_ms", when=(
            f"{_WAS_RUNNING} AND NOT ({_IS_RUNNING} AND NEW.limit_key = OLD.limit_key)"))}
        {_SQLITE_TAKE.format(when=f"{_IS_RUNNING} AND NOT ({_WAS_RUNNING} AND "
                                  "NEW.limit_key = OLD.limit_key)")}
    END""",
}

PG_FUNCTION = """
CREATE FUNCTION hub_assign_limits() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was boolean := TG_OP <> 'INSERT' AND OLD.status = 'running' AND OLD.limit_key IS NOT NULL;
    now_running boolean := TG_OP <> 'DELETE' AND NEW.status = 'running'
                           AND NEW.limit_key IS NOT NULL;
BEGIN
    IF was AND now_running AND NEW.limit_key = OLD.limit_key THEN
        RETURN NULL;  -- still running under the same key (a progress report)
    END IF;
    IF was THEN
        UPDATE assign_limits SET running = running - 1,
               released_at_ms = greatest(released_at_ms, CASE TG_OP WHEN 'DELETE'
                                         THEN OLD.updated_at_ms ELSE NEW.updated_at_ms END)
         WHERE key = OLD.limit_key;
        IF FOUND THEN
            PERFORM pg_notify('hubstore_assigns', 'l' || md5(OLD.limit_key));
        END IF;
    END IF;
    IF now_running THEN
        UPDATE assign_limits SET running = running + 1,
               starts_json = CASE WHEN max_starts IS NULL THEN '[]'::jsonb ELSE (
                   SELECT coalesce(jsonb_agg(t ORDER BY t), '[]'::jsonb) FROM (
                       SELECT t FROM (
                           SELECT (e)::bigint AS t FROM jsonb_array_elements(starts_json) AS e
                           UNION ALL SELECT NEW.updated_at_ms) AS every_start
                        ORDER BY t DESC LIMIT max_starts) AS newest) END
         WHERE key = NEW.limit_key;
    END IF;
    RETURN NULL;
END
$$"""
PG_TRIGGERS = {
    "trg_assign_limits_insert": "AFTER INSERT ON assign_jobs FOR EACH ROW "
                                "WHEN (NEW.status = 'running' AND NEW.limit_key IS NOT NULL)",
    "trg_assign_limits_delete": "AFTER DELETE ON assign_jobs FOR EACH ROW "
                                "WHEN (OLD.status = 'running' AND OLD.limit_key IS NOT NULL)",
    "trg_assign_limits_update": (
        "AFTER UPDATE OF status, limit_key ON assign_jobs FOR EACH ROW "
        "WHEN ((OLD.status = 'running' AND OLD.limit_key IS NOT NULL) "
        "OR (NEW.status = 'running' AND NEW.limit_key IS NOT NULL))"),
}


def upgrade() -> None:
    op.add_column("assign_jobs", sa.Column("limit_key", sa.Text(), nullable=True))
    op.add_column("assign_jobs", sa.Column("unique_key", sa.Text(), nullable=True))
    op.create_index("ux_assign_jobs_unique_key", "assign_jobs", ["unique_key"], unique=True,
                    sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))
    op.create_index("ix_assign_jobs_limit_key", "assign_jobs", ["limit_key", "started_at_ms"],
                    sqlite_where=sa.text(LIMITED), postgresql_where=sa.text(LIMITED))
    op.create_table(
        "assign_limits",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("max_running", sa.BigInteger(), nullable=True),
        sa.Column("max_starts", sa.BigInteger(), nullable=True),
        sa.Column("per_ms", sa.BigInteger(), nullable=True),
        sa.Column("running", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("starts_json", _json(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("released_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_assign_limits")),
        sa.CheckConstraint("max_running IS NULL OR max_running >= 1",
                           name=op.f("ck_assign_limits_max_running")),
        sa.CheckConstraint("(max_starts IS NULL) = (per_ms IS NULL)",
                           name=op.f("ck_assign_limits_rate")),
        sa.CheckConstraint("max_starts IS NULL OR (max_starts >= 1 AND per_ms >= 1)",
                           name=op.f("ck_assign_limits_rate_positive")),
    )
    op.create_table(
        "assign_schedules",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=True),
        sa.Column("every_ms", sa.BigInteger(), nullable=True),
        sa.Column("supervisor_agent", sa.Text(), nullable=False),
        sa.Column("worker_agent", sa.Text(), nullable=False),
        sa.Column("job_json", _json(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("next_due_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_due_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_job_id", sa.Text(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_assign_schedules")),
        sa.CheckConstraint("(cron IS NULL) <> (every_ms IS NULL)",
                           name=op.f("ck_assign_schedules_one_rule")),
        sa.CheckConstraint("every_ms IS NULL OR every_ms >= 1000",
                           name=op.f("ck_assign_schedules_every_ms")),
    )
    op.create_index("ix_assign_schedules_due", "assign_schedules", ["next_due_ms"])
    if op.get_bind().dialect.name == "sqlite":
        for name, body in SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")
    else:
        op.execute(PG_FUNCTION)
        for name, when in PG_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} EXECUTE FUNCTION hub_assign_limits()")


def downgrade() -> None:
    if not op.get_context().as_sql:
        live = op.get_bind().execute(sa.text(
            "SELECT count(*) FROM assign_jobs WHERE status IN ('queued', 'running') AND "
            "(limit_key IS NOT NULL OR unique_key IS NOT NULL)")).scalar_one()
        if live:
            raise RuntimeError(
                f"cannot downgrade below 0014: {live} queued or running assign job(s) have "
                "a limit key or a unique key to keep; let them finish first")
    if op.get_bind().dialect.name == "sqlite":
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    else:
        for name in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER {name} ON assign_jobs")
        op.execute("DROP FUNCTION hub_assign_limits()")
    op.drop_index("ix_assign_schedules_due", table_name="assign_schedules")
    op.drop_table("assign_schedules")
    op.drop_table("assign_limits")
    op.drop_index("ix_assign_jobs_limit_key", table_name="assign_jobs")
    op.drop_index("ux_assign_jobs_unique_key", table_name="assign_jobs")
    op.drop_column("assign_jobs", "unique_key")
    op.drop_column("assign_jobs", "limit_key")
