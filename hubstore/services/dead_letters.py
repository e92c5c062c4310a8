"""Dead letters: messages that could not be delivered."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update

from hubstore.execution import execute, load
from hubstore.ids import now_ms
from hubstore.models import DeadLetter, Message, table_of
from hubstore.transaction import Scope, Transaction
from hubstore.validation import require_id, require_int, require_text

_letters = table_of(DeadLetter)
_messages = table_of(Message)
_CHUNK = 500


def record_dead_letters(tx: Transaction, message_ids: list[str], reason: str,
                        last_error: str | None, failed_at_ms: int) -> None:
    """Insert or replace dead-letter rows.

    Replace is a delete and an insert, as the reference's INSERT OR REPLACE, so that the
    row triggers keeping the SQLite figures see both halves.
    """
    for start in range(0, len(message_ids), _CHUNK):
        chunk = message_ids[start:start + _CHUNK]
        execute(tx, delete(_letters).where(_letters.c.message_id.in_(chunk)))
        execute(tx, insert(_letters), [
            {"message_id": mid, "reason": reason, "failed_at_ms": failed_at_ms,
             "last_error": last_error} for mid in chunk])


def move_to_dead_letter(scope: Scope, message_id: str, reason: str,
                        last_error: str | None = None) -> bool:
    """Mark the message dead_letter and record (or replace) its dead letter."""
    require_id(message_id, "message_id")
    require_text(reason, "reason")
    if last_error is not None:
        require_text(last_error, "last_error")
    with scope.transaction() as tx:
        execute(tx, update(_messages).where(_messages.c.id == message_id)
                            .values(status="dead_letter"))
        record_dead_letters(tx, [message_id], reason, last_error, now_ms())
    return True


def get_dead_letters(scope: Scope, limit: int = 50) -> list[DeadLetter]:
    """Dead letters, newest first."""
    require_int(limit, "limit", minimum=0)
    with scope.transaction(write=False) as tx:
        return load(tx, DeadLetter,
                    select(DeadLetter)
            .order_by(DeadLetter.failed_at_ms.desc(), DeadLetter.message_id.desc())
            .limit(limit))


def requeue_dead_letter(scope: Scope, message_id: str) -> bool:
    """Put a dead letter's message back to queued, with a fresh expiry (now plus its
    ``ttl_ms``, so the next expiry sweep does not take it straight back), and remove the
    dead letter. True when there was a dead letter; a message without one is untouched.

    The message keeps its place in the message feed's commit order: feeds that already
    returned it do not return it again; ``poll_for_agent`` shows it again.
    """
    require_id(message_id, "message_id")
    with scope.transaction() as tx:
        removed = execute(tx, delete(_letters).where(_letters.c.message_id == message_id))
        if not removed.rowcount:
            return False
        execute(tx, update(_messages).where(_messages.c.id == message_id)
                .values(status="queued", expires_at_ms=now_ms() + _messages.c.ttl_ms))
        return True


def discard_dead_letter(scope: Scope, message_id: str) -> bool:
    """Remove a dead letter; its message stays, with status dead_letter (until pruned).
    True when there was one."""
    require_id(message_id, "message_id")
    with scope.one_statement() as tx:
        removed = execute(tx, delete(_letters).where(_letters.c.message_id == message_id))
        return bool(removed.rowcount)
