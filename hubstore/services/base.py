"""Small helpers the service functions share."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, update

from hubstore.dialects.base import const
from hubstore.execution import execute
from hubstore.ids import now_ms
from hubstore.transaction import Transaction
from hubstore.validation import require_time


def resolve_now(value: int | None) -> int:
    """``now_ms`` as given (tests and callers sweep at a chosen time), else the clock.

    A given time is an int within +-MAX_DURATION_MS (2**62), so that it plus or minus a
    duration still fits in 64 bits on both dialects (else ValidationError)."""
    return now_ms() if value is None else require_time(value, "now_ms")


def update_row(uow: Transaction, table: Table, key: str, **values: Any) -> bool:
    """UPDATE the row whose primary key is ``key``; True when there was one."""
    (key_column,) = table.primary_key.columns
    result = execute(uow, update(table).where(key_column == key).values(**values))
    return bool(result.rowcount)



__all__ = ["const", "resolve_now", "update_row"]
