"""Assign limits: a key's finished jobs counted on rows of their own, so that finishing
jobs never wait for the row that claims lock.

Revision 0014 kept each limit's running count on the limit's row: every claim locks that
row to decide, and its trigger updated the same row on every finish, so the claims and
the finishes of one key ran one at a time, each waiting for the other's commit.

- ``assign_limit_releases`` (key, stripe, released, released_at_ms): how many of the
  key's jobs stopped running, and when the latest did, over a few rows per key (8 on
  PostgreSQL, picked by the id of the transaction that ends the job: one row per
  transaction, concurrent ones mostly on different rows; 1 on SQLite). Rows go with
  their limit (ON DELETE CASCADE); ``set_assign_limit`` makes them.
- ``assign_limits.running`` becomes ``started``: how many of the key's jobs started
  running. The running count is ``started`` less the key's releases. A claim reads
  ``started`` under the row's lock and the releases as its statement's snapshot saw
  them (never more than there were), so the room it reckons is never more than there is.
- ``assign_limits.released_at_ms`` moves to the release rows (a job started in the room
  a release left is stamped no earlier than it).
- The triggers of 0014 (same names, same firing) count starts on the limit's row and
  releases on a release row, and, on PostgreSQL, still notify waiting claimers.

Upgrade: each limit keeps its count (``started`` = its running count, its releases 0)
and its latest release time. Downgrade: each limit's running count is ``started`` less
its releases, its latest release time the latest of its rows; 0014's triggers come back.
The reference's files stay readable and writable by the reference (hubstore's own
tables only). SQLite renames and drops the columns in place (ALTER TABLE, SQLite 3.35 or
newer), its limit triggers dropped first and made again after.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: PostgreSQL: release rows per key (hubstore.dialects.postgresql.release_stripes).
PG_STRIPES = 8

_WAS_RUNNING = "OLD.status = 'running' AND OLD.limit_key IS NOT NULL"
_IS_RUNNING = "NEW.status = 'running' AND NEW.limit_key IS NOT NULL"
_SQLITE_RELEASE = """UPDATE assign_limit_releases SET released = released + 1,
       released_at_ms = max(coalesce(released_at_ms, {at}), {at})
     WHERE key = OLD.limit_key AND stripe = 0 AND {when};"""
_SQLITE_TAKE = """UPDATE assign_limits SET started = started + 1,
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
    IF now_running THEN
        UPDATE assign_limits SET started = started + 1,
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


def _revision_0014() -> ModuleType:
    """Revision 0014's module: its triggers are what a downgrade puts back."""
    path = Path(__file__).with_name("0014_assign_quotas.py")
    spec = importlib.util.spec_from_file_location("hubstore_revision_0014", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drop_sqlite_triggers() -> None:
    """SQLite: drop the limit triggers before assign_limits is rebuilt (a table rename
    checks every trigger that names it)."""
    if op.get_bind().dialect.name == "sqlite":
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")


def _make_triggers(sqlite: dict[str, str], pg_function: str) -> None:
    """The limit triggers with these bodies (same names, same firing)."""
    if op.get_bind().dialect.name == "sqlite":
        for name, body in sqlite.items():
            op.execute(f"CREATE TRIGGER {name} {body}")
    else:
        op.execute(pg_function.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))


def upgrade() -> None:
    stripes = 1 if op.get_bind().dialect.name == "sqlite" else PG_STRIPES
    _drop_sqlite_triggers()
    op.create_table(
        "assign_limit_releases",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("stripe", sa.Integer(), nullable=False),
        sa.Column("released", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("released_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["key"], ["assign_limits.key"], ondelete="CASCADE",
                                name=op.f("fk_assign_limit_releases_key_assign_limits")),
        sa.PrimaryKeyConstraint("key", "stripe", name=op.f("pk_assign_limit_releases")),
    )
    # Every limit's rows; the first keeps its latest release time.
    op.execute(
        "INSERT INTO assign_limit_releases (key, stripe, released, released_at_ms) "
        "SELECT l.key, s.stripe, 0, CASE WHEN s.stripe = 0 THEN l.released_at_ms END "
        f"FROM assign_limits AS l CROSS JOIN ({_stripes(stripes)}) AS s")
    with op.batch_alter_table("assign_limits", recreate="never") as batch:
        batch.alter_column("running", new_column_name="started",
                           existing_type=sa.BigInteger(), existing_nullable=False,
                           existing_server_default=sa.text("0"))
        batch.drop_column("released_at_ms")
    _make_triggers(SQLITE_TRIGGERS, PG_FUNCTION)


def _stripes(count: int) -> str:
    """A SELECT of the stripe numbers 0 .. count - 1 (column ``stripe``)."""
    return " UNION ALL ".join(f"SELECT {n} AS stripe" for n in range(count))


def downgrade() -> None:
    _drop_sqlite_triggers()
    with op.batch_alter_table("assign_limits", recreate="never") as batch:
        batch.add_column(sa.Column("released_at_ms", sa.BigInteger(), nullable=True))
        batch.alter_column("started", new_column_name="running",
                           existing_type=sa.BigInteger(), existing_nullable=False,
                           existing_server_default=sa.text("0"))
    op.execute(
        "UPDATE assign_limits SET "
        "running = running - coalesce((SELECT sum(r.released) FROM assign_limit_releases "
        "AS r WHERE r.key = assign_limits.key), 0), "
        "released_at_ms = (SELECT max(r.released_at_ms) FROM assign_limit_releases AS r "
        "WHERE r.key = assign_limits.key)")
    before = _revision_0014()
    _make_triggers(before.SQLITE_TRIGGERS, before.PG_FUNCTION)
    op.drop_table("assign_limit_releases")
