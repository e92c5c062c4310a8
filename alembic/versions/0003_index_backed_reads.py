"""Index-backed polling, figures, claiming and pattern search.

- Polling: one index range per branch (to_agent; topic for messages sent to a topic).
- Figures (SQLite): hub_counters, kept exact by triggers on every insert, update and
  delete, whoever writes the row (the reference store too), so no call counts a table.
- Expiry, delivery stats, claiming: partial indexes (every index on messages costs each
  audit-log insert a page write, so the figures use counters, not more indexes).
- Pattern search: an FTS5 trigram index on SQLite, pg_trgm on PostgreSQL, each only
  where the database offers it (the plain LIKE query is the fallback).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOPIC_FEED = "substr(to_agent, 1, 6) = 'topic:'"
QUEUED = "status = 'queued'"
ACKED = "status = 'acked'"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

COUNTERS = {
    "messages": "SELECT count(*) FROM messages",
    "messages_queued_urgent":
        "SELECT count(*) FROM messages WHERE status = 'queued' AND priority >= 7",
    "messages_queued_normal":
        "SELECT count(*) FROM messages WHERE status = 'queued' AND priority < 7",
    "dead_letters": "SELECT count(*) FROM dead_letters",
    **{f"assign_{s}": f"SELECT count(*) FROM assign_jobs WHERE status = '{s}'"
       for s in ("queued", "running", "succeeded", "failed", "timed_out")},
}

_QUEUE = ("CASE WHEN {row}.priority >= 7 THEN 'messages_queued_urgent' "
          "ELSE 'messages_queued_normal' END")


def _bump(delta: str, name: str, when: str = "1") -> str:
    return f"UPDATE hub_counters SET value = value {delta} WHERE {when} AND name = {name};"


SQLITE_TRIGGERS = {
    "trg_hub_messages_insert": f"""AFTER INSERT ON messages BEGIN
        {_bump("+ 1", "'messages'")}
        {_bump("+ 1", _QUEUE.format(row="NEW"), "NEW.status = 'queued'")}
    END""",
    "trg_hub_messages_delete": f"""AFTER DELETE ON messages BEGIN
        {_bump("- 1", "'messages'")}
        {_bump("- 1", _QUEUE.format(row="OLD"), "OLD.status = 'queued'")}
    END""",
    "trg_hub_messages_update": f"""AFTER UPDATE OF status, priority ON messages BEGIN
        {_bump("- 1", _QUEUE.format(row="OLD"), "OLD.status = 'queued'")}
        {_bump("+ 1", _QUEUE.format(row="NEW"), "NEW.status = 'queued'")}
    END""",
    # INSERT OR REPLACE (the reference's way) deletes the old row without firing delete
    # triggers, so the row it is about to replace is taken off first.
    "trg_hub_dead_letters_before_insert": """BEFORE INSERT ON dead_letters BEGIN
        UPDATE hub_counters SET value = value -
            (SELECT count(*) FROM dead_letters WHERE message_id = NEW.message_id)
        WHERE name = 'dead_letters';
    END""",
    "trg_hub_dead_letters_insert": f"""AFTER INSERT ON dead_letters BEGIN
        {_bump("+ 1", "'dead_letters'")}
    END""",
    "trg_hub_dead_letters_delete": f"""AFTER DELETE ON dead_letters BEGIN
        {_bump("- 1", "'dead_letters'")}
    END""",
    "trg_hub_assign_jobs_insert": f"""AFTER INSERT ON assign_jobs BEGIN
        {_bump("+ 1", "'assign_' || NEW.status")}
    END""",
    "trg_hub_assign_jobs_delete": f"""AFTER DELETE ON assign_jobs BEGIN
        {_bump("- 1", "'assign_' || OLD.status")}
    END""",
    "trg_hub_assign_jobs_update": f"""AFTER UPDATE OF status ON assign_jobs BEGIN
        {_bump("- 1", "'assign_' || OLD.status")}
        {_bump("+ 1", "'assign_' || NEW.status")}
    END""",
}

FTS_TRIGGERS = {
    "trg_reflexion_fts_insert": """AFTER INSERT ON reflexion_entries BEGIN
        INSERT INTO reflexion_entries_fts (rowid, error_pattern)
        VALUES (NEW.rowid, NEW.error_pattern);
    END""",
    "trg_reflexion_fts_delete": """AFTER DELETE ON reflexion_entries BEGIN
        INSERT INTO reflexion_entries_fts (reflexion_entries_fts, rowid, error_pattern)
        VALUES ('delete', OLD.rowid, OLD.error_pattern);
    END""",
    "trg_reflexion_fts_update": """AFTER UPDATE OF error_pattern ON reflexion_entries BEGIN
        INSERT INTO reflexion_entries_fts (reflexion_entries_fts, rowid, error_pattern)
        VALUES ('delete', OLD.rowid, OLD.error_pattern);
        INSERT INTO reflexion_entries_fts (rowid, error_pattern)
        VALUES (NEW.rowid, NEW.error_pattern);
    END""",
}


def _dialect() -> str:
    return op.get_bind().dialect.name


def upgrade() -> None:
    op.create_index("ix_messages_to_agent_created", "messages",
                    ["to_agent", "created_at_ms", "id"])
    op.create_index("ix_messages_topic_feed", "messages", ["topic", "created_at_ms", "id"],
                    sqlite_where=sa.text(TOPIC_FEED), postgresql_where=sa.text(TOPIC_FEED))
    op.create_index("ix_messages_queued_expires", "messages", ["expires_at_ms"],
                    sqlite_where=sa.text(QUEUED), postgresql_where=sa.text(QUEUED))
    op.create_index("ix_messages_acked_created", "messages", ["created_at_ms"],
                    sqlite_where=sa.text(ACKED), postgresql_where=sa.text(ACKED))
    op.create_index("ix_assign_jobs_claim", "assign_jobs",
                    ["worker_agent", sa.text("priority DESC"), "created_at_ms", "job_id"],
                    sqlite_where=sa.text(QUEUED), postgresql_where=sa.text(QUEUED))
    if _dialect() == "sqlite":
        _sqlite_counters()
        _sqlite_fts()
    else:
        _postgresql_trigram()


def _sqlite_counters() -> None:
    op.create_table(
        "hub_counters",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    for name, count in COUNTERS.items():
        op.execute(f"INSERT INTO hub_counters (name, value) SELECT '{name}', ({count})")
    for name, body in SQLITE_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")


def _optional(sql: str, error: type[Exception]) -> bool:
    """Run ``sql`` in a savepoint if the database can; offline (``--sql``), emit it."""
    if op.get_context().as_sql:
        op.execute(sql)
        return True
    bind = op.get_bind()
    try:
        with bind.begin_nested():
            bind.exec_driver_sql(sql)
    except error:
        return False
    return True


def _sqlite_fts() -> None:
    if not _optional("CREATE VIRTUAL TABLE reflexion_entries_fts USING fts5("
                     "error_pattern, content='reflexion_entries', content_rowid='rowid', "
                     "tokenize='trigram')", sa.exc.OperationalError):
        return  # no FTS5 trigram tokenizer in this SQLite: the LIKE scan serves alone
    for name, body in FTS_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")
    op.execute("INSERT INTO reflexion_entries_fts (reflexion_entries_fts) VALUES ('rebuild')")


def _postgresql_trigram() -> None:
    if not _optional("CREATE EXTENSION IF NOT EXISTS pg_trgm", sa.exc.DBAPIError):
        return  # pg_trgm not available to this role: the plain scan serves alone
    op.execute(
        "CREATE INDEX ix_reflexion_pattern_trgm ON reflexion_entries USING gin "
        f"(translate(error_pattern, '{UPPER}', '{UPPER.lower()}') {_trgm_opclass()})")


def _trgm_opclass() -> str:
    """``gin_trgm_ops`` qualified by pg_trgm's schema: the extension is database-wide and
    may live in a schema (``public``, say) outside hubstore's search path."""
    if op.get_context().as_sql:
        return "gin_trgm_ops"  # offline: the schema cannot be looked up
    bind = op.get_bind()
    schema = bind.execute(sa.text(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_trgm'")).scalar_one()
    return f"{bind.dialect.identifier_preparer.quote_schema(schema)}.gin_trgm_ops"


def downgrade() -> None:
    if _dialect() == "sqlite":
        for name in (*FTS_TRIGGERS, *SQLITE_TRIGGERS):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS reflexion_entries_fts")
        op.drop_table("hub_counters")
    else:
        op.execute("DROP INDEX IF EXISTS ix_reflexion_pattern_trgm")
    for name, table in (("ix_assign_jobs_claim", "assign_jobs"),
                        ("ix_messages_acked_created", "messages"),
                        ("ix_messages_queued_expires", "messages"),
                        ("ix_messages_topic_feed", "messages"),
                        ("ix_messages_to_agent_created", "messages")):
        op.drop_index(name, table_name=table)
