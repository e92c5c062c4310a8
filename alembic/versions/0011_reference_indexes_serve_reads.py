"""Two of the reference's message indexes redefined to serve its reads and hubstore's:
two index writes fewer per message insert.

Every message insert (audit_log) writes one page of each index on ``messages``, and on
SQLite that is most of its cost (benchmarks/HISTORY.md weighs them). Two of revision
0003's indexes doubled two of the reference's, each on the same rows:

- ``idx_messages_to_agent`` (reference: ``to_agent, status``) beside
  ``ix_messages_to_agent_created`` (``to_agent, created_at_ms, id``). The reference reads
  messages by ``to_agent`` only in its poll, ``WHERE to_agent = ? ORDER BY created_at_ms
  DESC LIMIT ?``, which the second serves without a sort and the first with one; nothing
  of either store filters on ``to_agent`` and ``status`` together.
- ``idx_messages_expires`` (reference: ``expires_at_ms``, every row) beside
  ``ix_messages_queued_expires`` (the same, ``WHERE status = 'queued'``). The reference's
  one read of ``expires_at_ms`` is its expiry sweep, ``WHERE status = 'queued' AND
  expires_at_ms < ?``, as is hubstore's: the partial index serves both, without walking
  every message that expired long ago.

The reference's index names stay, with hubstore's definitions; hubstore's two are
dropped. The reference still reads and writes the file (indexes never change what a
query returns), and its ``CREATE INDEX IF NOT EXISTS`` finds the names taken, so it never
puts the old definitions back beside them. Measured on SQLite at 3,300 messages: 13.25
-> 10.59 WAL pages per insert, and a raw sqlite3 loop of audit_log's INSERT 119 -> 98 us.

Building an index reads the whole table: ``hubstore db upgrade`` from 0010 took 0.94 s
on a SQLite file of 100,000 messages, process start included (the migration holds the
write lock meanwhile); on PostgreSQL writers to ``messages`` wait for the CREATE INDEX.
The downgrade puts back both pairs.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

QUEUED = "status = 'queued'"


def _partial(where: str | None) -> dict[str, Any]:
    if where is None:
        return {}
    return {"sqlite_where": sa.text(where), "postgresql_where": sa.text(where)}


def _swap(drop: Sequence[str], create: Sequence[tuple[str, list[str], str | None]]) -> None:
    for name in drop:
        op.drop_index(name, table_name="messages")
    for name, columns, where in create:
        op.create_index(name, "messages", columns, **_partial(where))


def upgrade() -> None:
    _swap(["ix_messages_to_agent_created", "idx_messages_to_agent",
           "ix_messages_queued_expires", "idx_messages_expires"],
          [("idx_messages_to_agent", ["to_agent", "created_at_ms", "id"], None),
           ("idx_messages_expires", ["expires_at_ms"], QUEUED)])


def downgrade() -> None:
    _swap(["idx_messages_to_agent", "idx_messages_expires"],
          [("idx_messages_to_agent", ["to_agent", "status"], None),
           ("idx_messages_expires", ["expires_at_ms"], None),
           ("ix_messages_to_agent_created", ["to_agent", "created_at_ms", "id"], None),
           ("ix_messages_queued_expires", ["expires_at_ms"], QUEUED)])
