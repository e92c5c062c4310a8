"""What every operations mixin builds on."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Table, literal, literal_column, update
from sqlalchemy.dialects import postgresql, sqlite

if TYPE_CHECKING:
    from hubstore.uow import UnitOfWork


class Operations:
    """Base of the mixins: a way to get the unit of work to run in."""

    def unit_of_work(self, write: bool = True) -> AbstractContextManager[UnitOfWork]:
        """The unit of work a method runs in (``write`` takes SQLite's lock up front)."""
        raise NotImplementedError


def upsert(uow: UnitOfWork, table: Table) -> Any:
    """The dialect's INSERT, which offers ON CONFLICT."""
    if uow.dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def const(value: str) -> ColumnElement[Any]:
    """A constant rendered into the SQL text (never user input).

    Partial indexes are only used when the query names their constant literally;
    a bound parameter hides it from SQLite's planner.
    """
    return literal(value, literal_execute=True)


def natural_order(uow: UnitOfWork, table: Table) -> list[ColumnElement[Any]]:
    """Insertion order on SQLite (the reference returns rows in rowid order), else the key."""
    if uow.dialect == "sqlite":
        return [literal_column(f"{table.name}.rowid")]
    return list(table.primary_key.columns)


def resolve_now(value: int | None) -> int:
    """``now_ms`` as given (tests and callers sweep at a chosen time), else the clock."""
    from hubstore.ids import now_ms
    from hubstore.validation import require_int

    return now_ms() if value is None else require_int(value, "now_ms")


def update_row(uow: UnitOfWork, table: Table, key: str, **values: Any) -> bool:
    """UPDATE the row whose primary key is ``key``; True when there was one."""
    (key_column,) = table.primary_key.columns
    result = uow.connection.execute(update(table).where(key_column == key).values(**values))
    return bool(result.rowcount)
