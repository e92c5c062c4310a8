"""Message inserts counted in message_log on SQLite: one WAL page fewer per insert.

The figures' message counters (revision 0003) were bumped by a trigger on every message
insert: two UPDATEs of hub_counters, whose page every insert then wrote (one of the 14
WAL pages of an audit_log at 100,000 rows). The insert already writes its message_log row
(revisions 0007, 0008), on a page written anyway: that row now says which queue counter
the insert adds to (``queue_at_insert``: 0 none, 1 normal, 2 urgent), and the counters
are

    hub_counters + the message_log rows with seq > hub_counters['message_log_folded']

Every FOLD_EVERY-th log row (seq % FOLD_EVERY = 0) a trigger folds the pending rows into
hub_counters and moves 'message_log_folded' up to its seq, so the page is written once
per FOLD_EVERY inserts and a figures read adds at most about FOLD_EVERY rows (a rowid
range). Updates and deletes of messages still change hub_counters directly: the sums
stay exact whatever happens to a message before its insert is folded, as long as its
log row stays, so the prune's log trim keeps the rows not folded yet
(hubstore.services.retention).

The downgrade folds what is pending, drops the column and the fold trigger, and puts
back revision 0003's insert trigger. PostgreSQL counts with its deltas (0004): nothing
changes there.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: A fold every this many message inserts (the most log rows a figures read adds up).
FOLD_EVERY = 64
FOLDED = "message_log_folded"
COLUMN = "queue_at_insert"

_QUEUE = ("CASE WHEN NEW.priority >= 7 THEN 'messages_queued_urgent' "
          "ELSE 'messages_queued_normal' END")
#: Revision 0003's insert trigger (restored by the downgrade).
COUNTER_TRIGGER_0003 = f"""CREATE TRIGGER trg_hub_messages_insert AFTER INSERT ON messages BEGIN
        UPDATE hub_counters SET value = value + 1 WHERE 1 AND name = 'messages';
        UPDATE hub_counters SET value = value + 1 WHERE NEW.status = 'queued' AND name = {_QUEUE};
    END"""
LOG_TRIGGER_0008 = ("CREATE TRIGGER trg_hub_message_log AFTER INSERT ON messages BEGIN "
                    "INSERT INTO message_log (message_id) VALUES (NEW.id); END")
LOG_TRIGGER = (
    "CREATE TRIGGER trg_hub_message_log AFTER INSERT ON messages BEGIN "
    f"INSERT INTO message_log (message_id, {COLUMN}) VALUES (NEW.id, "
    "CASE WHEN NEW.status = 'queued' THEN CASE WHEN NEW.priority >= 7 THEN 2 ELSE 1 END "
    "ELSE 0 END); END")


def _pending_into_counters(upto: str) -> str:
    """The UPDATE that adds the log rows after the folded seq, up to ``upto``, to the
    message counters."""
    return (
        "UPDATE hub_counters SET value = value + (SELECT CASE hub_counters.name "
        "WHEN 'messages' THEN count(*) "
        f"WHEN 'messages_queued_normal' THEN coalesce(sum({COLUMN} = 1), 0) "
        f"ELSE coalesce(sum({COLUMN} = 2), 0) END FROM message_log "
        f"WHERE seq > (SELECT value FROM hub_counters WHERE name = '{FOLDED}') "
        f"AND seq <= {upto}) "
        "WHERE name IN ('messages', 'messages_queued_normal', 'messages_queued_urgent')")


FOLD_TRIGGER = (
    "CREATE TRIGGER trg_hub_message_log_fold AFTER INSERT ON message_log "
    f"WHEN NEW.seq % {FOLD_EVERY} = 0 BEGIN "
    f"{_pending_into_counters('NEW.seq')}; "
    f"UPDATE hub_counters SET value = NEW.seq WHERE name = '{FOLDED}'; END")


def _sqlite() -> bool:
    return str(op.get_context().dialect.name) == "sqlite"


def upgrade() -> None:
    if not _sqlite():
        return
    op.add_column("message_log", sa.Column(COLUMN, sa.Integer(), nullable=False,
                                           server_default=sa.text("0")))
    # Every row so far is counted in hub_counters already (0003's trigger).
    op.execute(f"INSERT INTO hub_counters (name, value) "
               f"SELECT '{FOLDED}', coalesce(max(seq), 0) FROM message_log")
    op.execute("DROP TRIGGER IF EXISTS trg_hub_messages_insert")
    op.execute("DROP TRIGGER IF EXISTS trg_hub_message_log")
    op.execute(LOG_TRIGGER)
    op.execute(FOLD_TRIGGER)


def downgrade() -> None:
    if not _sqlite():
        return
    op.execute(_pending_into_counters("(SELECT max(seq) FROM message_log)"))
    op.execute(f"DELETE FROM hub_counters WHERE name = '{FOLDED}'")
    op.execute("DROP TRIGGER IF EXISTS trg_hub_message_log_fold")
    op.execute("DROP TRIGGER IF EXISTS trg_hub_message_log")
    # A rebuild keeps every row and seq (and works where SQLite has no DROP COLUMN);
    # copied from a Table, not reflected, so that an offline run writes it too.
    table = sa.Table("message_log", sa.MetaData(),
                     sa.Column("seq", sa.Integer(), primary_key=True, nullable=False),
                     sa.Column("message_id", sa.Text(), nullable=False),
                     sa.Column(COLUMN, sa.Integer(), nullable=False,
                               server_default=sa.text("0")))
    with op.batch_alter_table("message_log", recreate="always", copy_from=table) as batch:
        batch.drop_column(COLUMN)
    op.execute(LOG_TRIGGER_0008)
    op.execute(COUNTER_TRIGGER_0003)
