"""PostgreSQL figures without table scans: counters fed by append-only deltas.

SQLite keeps exact counters with row triggers (0003): it has one writer at a time.
On PostgreSQL, writers in many processes updating shared counter rows would queue on
those rows and could deadlock on them. Here statement-level triggers (with transition
tables) only INSERT into hub_counter_deltas: no writer locks a shared row. A reader
sums hub_counters plus the pending deltas; from time to time one reader folds the
deltas into hub_counters under an advisory lock (hubstore.services.stats).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BUCKET = ("CASE WHEN priority >= 7 THEN 'messages_queued_urgent' "
           "ELSE 'messages_queued_normal' END")
_STATUSES = ("queued", "running", "succeeded", "failed", "timed_out")

#: Per table: the (counter name, SQL filter) each row counts towards.
_COUNTS = {
    "messages": [("'messages'", "true"), (_BUCKET, "status = 'queued'")],
    "dead_letters": [("'dead_letters'", "true")],
    "assign_jobs": [("'assign_' || status", "true")],
}
_INITIAL = {
    "messages": "SELECT count(*) FROM messages",
    "messages_queued_urgent":
        "SELECT count(*) FROM messages WHERE status = 'queued' AND priority >= 7",
    "messages_queued_normal":
        "SELECT count(*) FROM messages WHERE status = 'queued' AND priority < 7",
    "dead_letters": "SELECT count(*) FROM dead_letters",
    **{f"assign_{s}": f"SELECT count(*) FROM assign_jobs WHERE status = '{s}'"
       for s in _STATUSES},
}


def _rows(table: str, relation: str, sign: str) -> str:
    return " UNION ALL ".join(
        f"SELECT {name} AS name, {sign}1 AS delta FROM {relation} WHERE {where}"
        for name, where in _COUNTS[table])


def _function(table: str) -> str:
    def insert(source: str) -> str:
        return ("INSERT INTO hub_counter_deltas (name, delta) "
                f"SELECT name, sum(delta) FROM ({source}) AS d "
                "GROUP BY name HAVING sum(delta) <> 0;")

    return f"""
CREATE FUNCTION hub_count_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {insert(_rows(table, "new_rows", "+"))}
    ELSIF TG_OP = 'DELETE' THEN
        {insert(_rows(table, "old_rows", "-"))}
    ELSE
        {insert(_rows(table, "new_rows", "+") + " UNION ALL " + _rows(table, "old_rows", "-"))}
    END IF;
    RETURN NULL;
END
$$"""


_TRIGGERS = {
    "INSERT": "REFERENCING NEW TABLE AS new_rows",
    "DELETE": "REFERENCING OLD TABLE AS old_rows",
    "UPDATE": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_table(
        "hub_counters",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "hub_counter_deltas",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
    )
    # Lock the counted tables while the counters start, so no write slips between.
    op.execute("LOCK TABLE messages, dead_letters, assign_jobs IN SHARE MODE")
    for name, count in _INITIAL.items():
        op.execute(f"INSERT INTO hub_counters (name, value) SELECT '{name}', ({count})")
    for table in _COUNTS:
        op.execute(_function(table))
        for event, referencing in _TRIGGERS.items():
            op.execute(
                f"CREATE TRIGGER trg_hub_{table}_{event.lower()} AFTER {event} ON {table} "
                f"{referencing} FOR EACH STATEMENT EXECUTE FUNCTION hub_count_{table}()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in _COUNTS:
        for event in _TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS trg_hub_{table}_{event.lower()} ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS hub_count_{table}()")
    op.drop_table("hub_counter_deltas")
    op.drop_table("hub_counters")
