"""The console's sessions and signing keys, kept in the database.

Until now an operator's session was a cookie signed with a key derived from the token:
nothing on the server knew it, so signing out could not end a copy of it, and nothing
expired it there. The CSRF key was made at each start, so a restart refused every form
rendered before it.

- ``console_sessions`` (session_hash, created_at_ms, expires_at_ms): one row per
  signed-in operator, keyed by the SHA-256 of the cookie's random value (the value
  itself is never stored). Signing out deletes the row; a row past its
  ``expires_at_ms`` is refused, and pruned (``ix_console_sessions_expires_at_ms``).
- ``console_keys`` (name, secret, created_at_ms): a console's CSRF key when no operator
  token derives one (a console whose application's hook decides who may act), so that
  a page rendered before a restart, or by another console process, still submits.

hubstore's own tables: the reference never reads them. Downgrade drops both (every
operator signs in again).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("session_hash", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_expires_at_ms"), "console_sessions",
                    ["expires_at_ms"])
    op.create_table(
        "console_keys",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_console_keys")),
    )


def downgrade() -> None:
    op.drop_table("console_keys")
    op.drop_index(op.f("ix_console_sessions_expires_at_ms"), table_name="console_sessions")
    op.drop_table("console_sessions")
