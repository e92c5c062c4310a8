"""Commit-ordered message log (message feeds) and wake-up signals (waiting for work).

A feed must hand out every committed message exactly once in commit order. Message ids
(UUIDv7) and created_at_ms are chosen before commit, so two writers can commit out of
id order and a cursor "id > last" would skip a message. ``message_log`` gives each
message a position in commit order, written by a trigger, whoever inserts the message
(the reference store included):

- SQLite: an AFTER INSERT trigger appends (seq, message_id). Writers hold the one
  database write lock from BEGIN IMMEDIATE to COMMIT, so seq, taken under that lock, is
  in commit order; one transaction's rows are consecutive, in write order.
  ``INTEGER PRIMARY KEY AUTOINCREMENT`` never hands out a seq again, even after the
  highest row is deleted (messages' own rowid could go backwards then, and VACUUM may
  renumber the rowids of a table without an INTEGER PRIMARY KEY).
- PostgreSQL: writers run concurrently, so seq is stamped at commit time: a DEFERRABLE
  INITIALLY DEFERRED constraint trigger (per message row, fired in insert order at
  COMMIT) takes a transaction-level advisory lock, then nextval(). PostgreSQL releases
  a transaction's locks only after its commit is visible to new snapshots, so the
  next stamping transaction starts only once the previous one is visible: seq order is
  commit (visibility) order, and a reader that sees seq N sees every committed seq
  below N. A rolled-back transaction's log rows vanish with it (a gap in seq, never a
  row). xid- or snapshot-based orders (pg_current_xact_id, pg_snapshot_xmin) were not
  chosen: xid order is not commit order, and one long transaction anywhere would hold
  every feed back. The cost: message-writing commits queue on one lock for the
  duration of their commit (a few hundred microseconds with the WAL flush).
  The same trigger sends ``pg_notify('hubstore_messages', ...)``; assign_jobs rows that
  become queued send ``pg_notify('hubstore_assigns', md5(worker_agent))``. NOTIFY is
  delivered at commit, never for a rolled-back transaction.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: pg_advisory_xact_lock key of the commit-order stamp ("hubfeed").
FEED_LOCK_KEY = 0x6875_6266_6565_64

PG_FUNCTIONS = {
    "hub_message_log_stamp": f"""
CREATE FUNCTION hub_message_log_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({FEED_LOCK_KEY});
    INSERT INTO message_log (seq, message_id) VALUES (nextval('message_log_seq'), NEW.id);
    PERFORM pg_notify('hubstore_messages',
        CASE WHEN substr(NEW.to_agent, 1, 6) = 'topic:' THEN 't' || md5(NEW.topic)
             ELSE 'a' || md5(NEW.to_agent) END);
    RETURN NULL;
END
$$""",
    "hub_assign_queued_notify": """
CREATE FUNCTION hub_assign_queued_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hubstore_assigns', md5(NEW.worker_agent));
    RETURN NULL;
END
$$""",
}


def _dialect() -> str:
    return str(op.get_bind().dialect.name)


def upgrade() -> None:
    if _dialect() == "sqlite":
        op.create_table(
            "message_log",
            sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("message_id", sa.Text(), nullable=False),
            sa.PrimaryKeyConstraint("seq", name="pk_message_log"),
            sqlite_autoincrement=True,
        )
        op.execute("CREATE TRIGGER trg_hub_message_log AFTER INSERT ON messages BEGIN "
                   "INSERT INTO message_log (message_id) VALUES (NEW.id); END")
        return
    op.execute("CREATE SEQUENCE message_log_seq AS bigint CACHE 1")
    op.create_table(
        "message_log",
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_message_log"),
    )
    for sql in PG_FUNCTIONS.values():
        op.execute(sql)
    op.execute("CREATE CONSTRAINT TRIGGER trg_hub_message_log AFTER INSERT ON messages "
               "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
               "EXECUTE FUNCTION hub_message_log_stamp()")
    op.execute("CREATE TRIGGER trg_hub_assign_queued AFTER INSERT OR UPDATE OF status "
               "ON assign_jobs FOR EACH ROW WHEN (NEW.status = 'queued') "
               "EXECUTE FUNCTION hub_assign_queued_notify()")


def downgrade() -> None:
    if _dialect() == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS trg_hub_message_log")
        op.drop_table("message_log")
        return
    op.execute("DROP TRIGGER IF EXISTS trg_hub_assign_queued ON assign_jobs")
    op.execute("DROP TRIGGER IF EXISTS trg_hub_message_log ON messages")
    for name in PG_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_table("message_log")
    op.execute("DROP SEQUENCE IF EXISTS message_log_seq")
