"""Assign limits: a limit's running room split in shares, so that claims of one key run
side by side instead of one at a time.

Revision 0016 kept each limit's start count on the limit's row, which every claim of
the key locked until its commit: the claims of one key ran one at a time, each waiting
for the one before to commit (its WAL flush), even far from the limit.

- ``assign_limit_shares`` (key, share, budget, started): the limit's ``max_running``
  split in budgets (None: no such bound), each share counting the jobs started in it.
  A claim locks one share with room (PostgreSQL: skipping shares other claims hold).
  A share's running count is ``started`` less the releases of the release rows whose
  stripe falls to it (stripe modulo ``shares``); a claim never lets it pass the
  share's budget, so the shares together never pass ``max_running``. Rows go with
  their limit (ON DELETE CASCADE).
- ``assign_limits.shares``: how many shares the limit has (rows 0 .. shares - 1);
  ``assign_limits.started`` moves to the shares.
- ``assign_jobs.limit_share``: the share a claim started the job in (NULL for every
  other start, which counts on share 0, and for the reference's rows).
- The triggers of 0016 (same names, same firing) count a start on its job's share, and
  on the limit's row only its start time, only for a limit with a rate.

Upgrade: each limit gets one share (its budget ``max_running``, its start count the
limit's); ``set_assign_limit`` splits it when it is next set. Downgrade: each limit's
start count is the sum of its shares'; 0016's triggers come back. The reference's files
stay readable and writable by the reference (hubstore's own tables and a nullable
column). SQLite adds and drops the columns in place (ALTER TABLE, SQLite 3.35 or newer),
its limit triggers dropped first and made again after.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WAS_RUNNING = "OLD.status = 'running' AND OLD.limit_key IS NOT NULL"
_IS_RUNNING = "NEW.status = 'running' AND NEW.limit_key IS NOT NULL"
_SQLITE_RELEASE = """UPDATE assign_limit_releases SET released = released + 1,
       released_at_ms = max(coalesce(released_at_ms, {at}), {at})
     WHERE key = OLD.limit_key AND stripe = 0 AND {when};"""
# A start counts on its job's share (share 0 when it names none the limit has), and its
# time on the limit's row when the limit has a rate.
_SQLITE_TAKE = """UPDATE assign_limit_shares SET started = started + 1
     WHERE key = NEW.limit_key AND share = (
           SELECT CASE WHEN NEW.limit_share < l.shares THEN NEW.limit_share ELSE 0 END
             FROM assign_limits AS l WHERE l.key = NEW.limit_key) AND {when};
    UPDATE assign_limits SET starts_json = (
           SELECT json_group_array(t) FROM (
               SELECT value AS t FROM json_each(assign_limits.starts_json)
                WHERE value > NEW.updated_at_ms - 2 * assign_limits.per_ms
               UNION ALL SELECT NEW.updated_at_ms))
     WHERE key = NEW.limit_key AND per_ms IS NOT NULL AND {when};"""
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
CREATE OR REPLACE FUNCTION hub_assign_limits() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was boolean := TG_OP <> 'INSERT' AND OLD.status = 'running' AND OLD.limit_key IS NOT NULL;
    now_running boolean := TG_OP <> 'DELETE' AND NEW.status = 'running'
                           AND NEW.limit_key IS NOT NULL;
BEGIN
    IF was AND now_running AND NEW.limit_key = OLD.limit_key THEN
        RETURN NULL;  -- still running under the same key (a progress report)
    END IF;
    IF was THEN
        UPDATE assign_limit_releases SET released = released + 1,
               released_at_ms = greatest(released_at_ms, CASE TG_OP WHEN 'DELETE'
                                         THEN OLD.updated_at_ms ELSE NEW.updated_at_ms END)
         WHERE key = OLD.limit_key AND stripe = txid_current() % 8;
        IF FOUND THEN
            PERFORM pg_notify('hubstore_assigns', 'l' || md5(OLD.limit_key));
        END IF;
    END IF;
    IF now_running AND (TG_OP = 'INSERT' OR NEW.limit_share IS NULL) THEN
        -- a start outside the claims that count their own (those name their share)
        UPDATE assign_limit_shares SET started = started + 1
         WHERE key = NEW.limit_key AND share = 0;
        UPDATE assign_limits SET starts_json = (
                   SELECT coalesce(jsonb_agg(t ORDER BY t), '[]'::jsonb) FROM (
                       SELECT t FROM (
                           SELECT (e)::bigint AS t FROM jsonb_array_elements(starts_json) AS e
                           UNION ALL SELECT NEW.updated_at_ms) AS every_start
                        ORDER BY t DESC LIMIT max_starts) AS newest)
         WHERE key = NEW.limit_key AND max_starts IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$"""


#: PostgreSQL: the limit triggers' firing. A claim that names the share it started a job
#: in has counted the start itself (services/claims.py): no trigger runs for it.
PG_UPDATE_TRIGGER = "trg_assign_limits_update"
PG_UPDATE_WHEN = ("AFTER UPDATE OF status, limit_key ON assign_jobs FOR EACH ROW "
                  "WHEN ((OLD.status = 'running' AND OLD.limit_key IS NOT NULL) "
                  "OR (NEW.status = 'running' AND NEW.limit_key IS NOT NULL "
                  "AND NEW.limit_share IS NULL))")
#: PostgreSQL: a job that stops running (or changes key) forgets its share, so that only
#: the claim that starts it names one (a job's later start outside claims is counted).
PG_FORGET_FUNCTION = """
CREATE FUNCTION hub_assign_limit_share_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.limit_share := NULL;
    RETURN NEW;
END
$$"""
PG_FORGET_TRIGGER = "trg_assign_limit_share_forget"
PG_FORGET_WHEN = ("BEFORE UPDATE OF status, limit_key ON assign_jobs FOR EACH ROW "
                  "WHEN (OLD.limit_share IS NOT NULL AND NEW.limit_share IS NOT NULL AND "
                  "(NEW.status <> 'running' OR NEW.limit_key IS DISTINCT FROM OLD.limit_key))")


def _revision(number: str, name: str) -> ModuleType:
    """An earlier revision's module (a downgrade puts its triggers back)."""
    path = Path(__file__).with_name(f"{number}_{name}.py")
    spec = importlib.util.spec_from_file_location(f"hubstore_revision_{number}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _revision_0016() -> ModuleType:
    """Revision 0016's module: its triggers are what a downgrade puts back, and its
    helpers drop and make the limit triggers (same names, same firing)."""
    return _revision("0016", "assign_limit_releases")


def upgrade() -> None:
    before = _revision_0016()
    before._drop_sqlite_triggers()
    op.create_table(
        "assign_limit_shares",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("share", sa.Integer(), nullable=False),
        sa.Column("budget", sa.BigInteger(), nullable=True),
        sa.Column("started", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["key"], ["assign_limits.key"], ondelete="CASCADE",
                                name=op.f("fk_assign_limit_shares_key_assign_limits")),
        sa.PrimaryKeyConstraint("key", "share", name=op.f("pk_assign_limit_shares")),
    )
    op.execute("INSERT INTO assign_limit_shares (key, share, budget, started) "
               "SELECT key, 0, max_running, started FROM assign_limits")
    with op.batch_alter_table("assign_limits", recreate="never") as batch:
        batch.add_column(sa.Column("shares", sa.Integer(), server_default=sa.text("1"),
                                   nullable=False))
        batch.drop_column("started")
    with op.batch_alter_table("assign_jobs", recreate="never") as batch:
        batch.add_column(sa.Column("limit_share", sa.Integer(), nullable=True))
    before._make_triggers(SQLITE_TRIGGERS, PG_FUNCTION)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {PG_UPDATE_TRIGGER} ON assign_jobs")
        op.execute(f"CREATE TRIGGER {PG_UPDATE_TRIGGER} {PG_UPDATE_WHEN} "
                   "EXECUTE FUNCTION hub_assign_limits()")
        op.execute(PG_FORGET_FUNCTION)
        op.execute(f"CREATE TRIGGER {PG_FORGET_TRIGGER} {PG_FORGET_WHEN} "
                   "EXECUTE FUNCTION hub_assign_limit_share_forget()")


def downgrade() -> None:
    before = _revision_0016()
    before._drop_sqlite_triggers()
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {PG_FORGET_TRIGGER} ON assign_jobs")
        op.execute("DROP FUNCTION hub_assign_limit_share_forget()")
        op.execute(f"DROP TRIGGER {PG_UPDATE_TRIGGER} ON assign_jobs")
        firing = _revision("0014", "assign_quotas").PG_TRIGGERS[PG_UPDATE_TRIGGER]
        op.execute(f"CREATE TRIGGER {PG_UPDATE_TRIGGER} {firing} "
                   "EXECUTE FUNCTION hub_assign_limits()")
    with op.batch_alter_table("assign_limits", recreate="never") as batch:
        batch.add_column(sa.Column("started", sa.BigInteger(), server_default=sa.text("0"),
                                   nullable=False))
    op.execute(
        "UPDATE assign_limits SET started = coalesce((SELECT sum(s.started) FROM "
        "assign_limit_shares AS s WHERE s.key = assign_limits.key), 0)")
    with op.batch_alter_table("assign_limits", recreate="never") as batch:
        batch.drop_column("shares")
    with op.batch_alter_table("assign_jobs", recreate="never") as batch:
        batch.drop_column("limit_share")
    op.drop_table("assign_limit_shares")
    before._make_triggers(before.SQLITE_TRIGGERS, before.PG_FUNCTION)
