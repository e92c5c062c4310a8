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


def record_dead_letters(uow: Transaction, message_ids: list[str], reason: str,
                        last_error: str | None, failed_at_ms: int) -> None:
    """Insert or replace dead-letter rows.

    Replace is a delete and an insert, as the reference's INSERT OR REPLACE, so that the
    row triggers keeping the SQLite figures see both halves.
    """
    for start in range(0, len(message_ids), _CHUNK):
        chunk = message_ids[start:start + _CHUNK]
        execute(uow, delete(_letters).where(_letters.c.message_id.in_(chunk)))
        execute(uow, insert(_letters), [
            {"message_id": mid, "reason": reason, "failed_at_ms": failed_at_ms,
             "last_error": last_error} for mid in chunk])


def move_to_dead_letter(scope: Scope, message_id: str, reason: str,
                        last_error: str | None = None) -> bool:
    """Mark the message dead_letter and record (or replace) its dead letter."""
    require_id(message_id, "message_id")
    require_text(reason, "reason")
    if last_error is not None:
        require_text(last_error, "last_error")
    with scope.unit_of_work() as uow:
        execute(uow, update(_messages).where(_messages.c.id == message_id)
                            .values(status="dead_letter"))
        record_dead_letters(uow, [message_id], reason, last_error, now_ms())
    return True


def get_dead_letters(scope: Scope, limit: int = 50) -> list[DeadLetter]:
    """Dead letters, newest first."""
    require_int(limit, "limit", minimum=0)
    with scope.unit_of_work(write=False) as uow:
        return load(uow, DeadLetter,
                    select(DeadLetter)
            .order_by(DeadLetter.failed_at_ms.desc(), DeadLetter.message_id.desc())
            .limit(limit))
