"""A leaner message insert on SQLite: message_log without AUTOINCREMENT.

Every message insert (audit_log) pays for hubstore's triggers in WAL pages and CPU
(benchmarks/HISTORY.md weighs them with a raw sqlite3 loop of audit_log's INSERT).
``message_log.seq`` becomes a plain ``INTEGER PRIMARY KEY`` (the rowid): AUTOINCREMENT
made SQLite look up and rewrite message_log's ``sqlite_sequence`` row on every insert,
one more page in each commit (15.0 -> 14.1 pages per insert at 20,000 rows).

AUTOINCREMENT was there so that a seq is never handed out twice: a plain rowid is
max(seq) + 1, so deleting the newest log rows would hand their seqs out again, and a
feed cursor past them would skip the messages written next. That guarantee now comes
from the only code that deletes log rows, the trim after prune
(hubstore.services.retention): it never deletes the newest log row, which stays as the
high-water mark even when its message is gone (feeds join the log to messages, so such
a row is never handed out). A database whose newest log rows 0007's trim already
deleted gets a high-water row (message_id '') at sqlite_sequence's value, so the
cursors handed out before the upgrade stay valid too.

The table is rebuilt in batch mode (every row and seq kept) and its sqlite_sequence
entry removed; the downgrade rebuilds it with AUTOINCREMENT and sets sqlite_sequence to
max(seq). PostgreSQL's seq comes from a sequence, which never goes back: nothing
changes there.

Not done, measured: the counter trigger on messages insert as one UPDATE
(``name IN ('messages', CASE ... END)``, or an OR) instead of two writes the same page
and costs more instructions (about 288,000 per insert against 259,000 under callgrind:
SQLite builds an ephemeral table for a non-constant IN list), so 0003's two UPDATEs
stay.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The message_log trigger of revision 0007 (dropped while its table is rebuilt).
LOG_TRIGGER = ("CREATE TRIGGER trg_hub_message_log AFTER INSERT ON messages BEGIN "
               "INSERT INTO message_log (message_id) VALUES (NEW.id); END")


def _sqlite() -> bool:
    return str(op.get_context().dialect.name) == "sqlite"


def log_table(*, autoincrement: bool) -> sa.Table:
    """message_log as it is before the rebuild: batch mode copies it from this instead
    of reflecting it, so that offline (``--sql``) runs write the same SQL as online ones."""
    return sa.Table("message_log", sa.MetaData(),
                    sa.Column("seq", sa.Integer(), primary_key=True, nullable=False),
                    sa.Column("message_id", sa.Text(), nullable=False),
                    sqlite_autoincrement=autoincrement)


def _rebuild(*, autoincrement: bool) -> None:
    """message_log rebuilt with or without AUTOINCREMENT (rows and seqs copied), and its
    trigger, which names the table, created again."""
    op.execute("DROP TRIGGER IF EXISTS trg_hub_message_log")
    with op.batch_alter_table("message_log", recreate="always",
                              copy_from=log_table(autoincrement=not autoincrement),
                              table_kwargs={"sqlite_autoincrement": autoincrement}):
        pass
    op.execute("DELETE FROM sqlite_sequence WHERE name = 'message_log'")
    if autoincrement:
        op.execute("INSERT INTO sqlite_sequence (name, seq) "
                   "SELECT 'message_log', seq FROM message_log ORDER BY seq DESC LIMIT 1")
    op.execute(LOG_TRIGGER)


def upgrade() -> None:
    if not _sqlite():
        return
    # The high-water mark of a log whose newest rows 0007's trim deleted: without it the
    # next seq would be max(seq) + 1, at or below a cursor taken before that trim.
    op.execute("INSERT INTO message_log (seq, message_id) "
               "SELECT s.seq, '' FROM sqlite_sequence s WHERE s.name = 'message_log' "
               "AND s.seq > (SELECT coalesce(max(seq), 0) FROM message_log)")
    _rebuild(autoincrement=False)


def downgrade() -> None:
    if not _sqlite():
        return
    _rebuild(autoincrement=True)
