"""The reference's schema version 3 (triflux 7.2.x), every table, constraint and index.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def json_text() -> sa.Text:
    """JSON text: TEXT on SQLite (keeps every value's form), JSONB on PostgreSQL."""
    return sa.Text().with_variant(postgresql.JSONB(), "postgresql")


def millis() -> sa.BigInteger:
    return sa.BigInteger()


def enum_check(column: str, values: tuple[str, ...], name: str) -> sa.CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({listed})", name=name)


def upgrade() -> None:
    op.create_table(
        "_meta",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk__meta")),
    )
    op.execute("INSERT INTO _meta (key, value) VALUES ('schema_version', '3')")

    op.create_table(
        "agents",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("cli", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("capabilities_json", json_text(), server_default=sa.text("'[]'"),
                  nullable=False),
        sa.Column("topics_json", json_text(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("last_seen_ms", millis(), nullable=False),
        sa.Column("lease_expires_ms", millis(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("metadata_json", json_text(), server_default=sa.text("'{}'"), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name=op.f("pk_agents")),
        enum_check("cli", ("codex", "gemini", "claude", "other"), op.f("ck_agents_cli")),
        enum_check("status", ("online", "stale", "offline"), op.f("ck_agents_status")),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("from_agent", sa.Text(), nullable=False),
        sa.Column("to_agent", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("ttl_ms", millis(), nullable=False),
        sa.Column("created_at_ms", millis(), nullable=False),
        sa.Column("expires_at_ms", millis(), nullable=False),
        sa.Column("correlation_id", sa.Text(), nullable=False),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("payload_json", json_text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        enum_check("type", ("request", "response", "event", "handoff", "human_request",
                            "human_response", "system"), op.f("ck_messages_type")),
        sa.CheckConstraint("priority BETWEEN 1 AND 9", name=op.f("ck_messages_priority")),
        enum_check("status", ("queued", "delivered", "acked", "expired", "dead_letter"),
                   op.f("ck_messages_status")),
    )
    op.create_table(
        "message_inbox",
        sa.Column("delivery_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("delivered_at_ms", millis(), nullable=True),
        sa.Column("acked_at_ms", millis(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="CASCADE",
                                name=op.f("fk_message_inbox_message_id_messages")),
        sa.PrimaryKeyConstraint("delivery_id", name=op.f("pk_message_inbox")),
        sa.UniqueConstraint("message_id", "agent_id",
                            name=op.f("uq_message_inbox_message_id_agent_id")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "human_requests",
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("requester_agent", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("schema_json", json_text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("deadline_ms", millis(), nullable=False),
        sa.Column("default_action", sa.Text(), nullable=False),
        sa.Column("correlation_id", sa.Text(), nullable=False),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("response_json", json_text(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_human_requests")),
        enum_check("kind", ("captcha", "approval", "credential", "choice", "text"),
                   op.f("ck_human_requests_kind")),
        enum_check("state", ("pending", "accepted", "declined", "cancelled", "timed_out"),
                   op.f("ck_human_requests_state")),
        enum_check("default_action", ("decline", "cancel", "timeout_continue"),
                   op.f("ck_human_requests_default_action")),
    )
    op.create_table(
        "dead_letters",
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("failed_at_ms", millis(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_dead_letters")),
    )
    op.create_table(
        "assign_jobs",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("supervisor_agent", sa.Text(), nullable=False),
        sa.Column("worker_agent", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), server_default=sa.text("'assign.job'"), nullable=False),
        sa.Column("task", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("payload_json", json_text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("retry_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_retries", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column("ttl_ms", millis(), server_default=sa.text("600000"), nullable=False),
        sa.Column("timeout_ms", millis(), server_default=sa.text("600000"), nullable=False),
        sa.Column("deadline_ms", millis(), nullable=True),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("correlation_id", sa.Text(), nullable=False),
        sa.Column("last_message_id", sa.Text(), nullable=True),
        sa.Column("result_json", json_text(), nullable=True),
        sa.Column("error_json", json_text(), nullable=True),
        sa.Column("created_at_ms", millis(), nullable=False),
        sa.Column("updated_at_ms", millis(), nullable=False),
        sa.Column("started_at_ms", millis(), nullable=True),
        sa.Column("completed_at_ms", millis(), nullable=True),
        sa.Column("last_retry_at_ms", millis(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_assign_jobs")),
        enum_check("status", ("queued", "running", "succeeded", "failed", "timed_out"),
                   op.f("ck_assign_jobs_status")),
        sa.CheckConstraint("priority BETWEEN 1 AND 9", name=op.f("ck_assign_jobs_priority")),
    )
    op.create_table(
        "pipeline_state",
        sa.Column("team_name", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), server_default=sa.text("'plan'"), nullable=False),
        sa.Column("fix_attempt", sa.Integer(), server_default=sa.text("0"), nullable=True),
        sa.Column("fix_max", sa.Integer(), server_default=sa.text("3"), nullable=True),
        sa.Column("ralph_iteration", sa.Integer(), server_default=sa.text("0"), nullable=True),
        sa.Column("ralph_max", sa.Integer(), server_default=sa.text("10"), nullable=True),
        sa.Column("artifacts", json_text(), server_default=sa.text("'{}'"), nullable=True),
        sa.Column("phase_history", json_text(), server_default=sa.text("'[]'"), nullable=True),
        sa.Column("created_at", millis(), nullable=True),
        sa.Column("updated_at", millis(), nullable=True),
        sa.PrimaryKeyConstraint("team_name", name=op.f("pk_pipeline_state")),
    )
    op.create_table(
        "reflexion_entries",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("error_pattern", sa.Text(), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("context_json", json_text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("solution", sa.Text(), nullable=False),
        sa.Column("solution_code", sa.Text(), nullable=True),
        sa.Column("confidence", sa.Float(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("hit_count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("success_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_hit_ms", millis(), nullable=False),
        sa.Column("created_at_ms", millis(), nullable=False),
        sa.Column("updated_at_ms", millis(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reflexion_entries")),
    )

    for name, table, columns in INDEXES:
        op.create_index(name, table, [sa.text(c) if " " in c else c for c in columns])


INDEXES: list[tuple[str, str, list[str]]] = [
    ("idx_messages_status", "messages", ["status"]),
    ("idx_messages_to_agent", "messages", ["to_agent", "status"]),
    ("idx_messages_correlation", "messages", ["correlation_id"]),
    ("idx_messages_trace", "messages", ["trace_id"]),
    ("idx_messages_expires", "messages", ["expires_at_ms"]),
    ("idx_messages_priority", "messages", ["priority DESC", "created_at_ms ASC"]),
    ("idx_inbox_agent", "message_inbox", ["agent_id", "delivered_at_ms"]),
    ("idx_inbox_message", "message_inbox", ["message_id"]),
    ("idx_human_requests_state", "human_requests", ["state"]),
    ("idx_agents_status", "agents", ["status"]),
    ("idx_agents_lease", "agents", ["lease_expires_ms"]),
    ("idx_assign_jobs_status", "assign_jobs", ["status", "updated_at_ms DESC"]),
    ("idx_assign_jobs_supervisor", "assign_jobs", ["supervisor_agent", "updated_at_ms DESC"]),
    ("idx_assign_jobs_worker", "assign_jobs", ["worker_agent", "updated_at_ms DESC"]),
    ("idx_assign_jobs_deadline", "assign_jobs", ["deadline_ms", "status"]),
    ("idx_reflexion_pattern", "reflexion_entries", ["error_pattern"]),
    ("idx_reflexion_confidence", "reflexion_entries", ["confidence DESC"]),
]


def downgrade() -> None:
    for table in ("reflexion_entries", "pipeline_state", "assign_jobs", "dead_letters",
                  "human_requests", "message_inbox", "messages", "agents", "_meta"):
        op.drop_table(table)
