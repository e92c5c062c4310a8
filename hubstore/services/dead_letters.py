"""Dead letters: messages that could not be delivered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select, update

from hubstore.ids import now_ms
from hubstore.models import DeadLetter, Message
from hubstore.services.base import Operations, upsert
from hubstore.validation import require_id, require_int, require_text

if TYPE_CHECKING:
    from hubstore.uow import UnitOfWork

_letters = DeadLetter.__table__
_messages = Message.__table__


def record_dead_letters(uow: UnitOfWork, message_ids: list[str], reason: str,
                        last_error: str | None, failed_at_ms: int) -> None:
    """Insert or replace dead-letter rows (one statement for many ids)."""
    if not message_ids:
        return
    stmt = upsert(uow, _letters)
    stmt = stmt.on_conflict_do_update(
        index_elements=[_letters.c.message_id],
        set_={"reason": stmt.excluded.reason, "failed_at_ms": stmt.excluded.failed_at_ms,
              "last_error": stmt.excluded.last_error})
    uow.session.execute(stmt, [
        {"message_id": mid, "reason": reason, "failed_at_ms": failed_at_ms,
         "last_error": last_error} for mid in message_ids])


class DeadLetterOps(Operations):
    """The dead-letter queue."""

    def move_to_dead_letter(self, message_id: str, reason: str,
                            last_error: str | None = None) -> bool:
        """Mark the message dead_letter and record (or replace) its dead letter."""
        require_id(message_id, "message_id")
        require_text(reason, "reason")
        if last_error is not None:
            require_text(last_error, "last_error")
        with self.unit_of_work() as uow:
            uow.session.execute(update(_messages).where(_messages.c.id == message_id)
                                .values(status="dead_letter"))
            record_dead_letters(uow, [message_id], reason, last_error, now_ms())
        return True

    def get_dead_letters(self, limit: int = 50) -> list[DeadLetter]:
        """Dead letters, newest first."""
        require_int(limit, "limit", minimum=0)
        with self.unit_of_work(write=False) as uow:
            return list(uow.session.scalars(
                select(DeadLetter)
                .order_by(DeadLetter.failed_at_ms.desc(), DeadLetter.message_id.desc())
                .limit(limit)))
