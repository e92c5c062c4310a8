"""What every operations mixin builds on."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Table, literal, literal_column, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import UpdateBase

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


class Prepared:
    """A Core statement without results, compiled once and, on SQLite, run on the driver.

    On the write hot paths (heartbeat, register, audit log) SQLAlchemy's execution
    machinery cost more than SQLite's work. The statement is still built with
    SQLAlchemy and its values still pass through the column types' bind processors
    (strict JSON included); only the per-call execution layer is skipped. Other
    dialects execute the statement normally.
    """

    def __init__(self, statement: UpdateBase) -> None:
        self.statement = statement
        self._compiled: tuple[str, list[tuple[str, Any, Any]]] | None = None

    def _compile(self, uow: UnitOfWork) -> tuple[str, list[tuple[str, Any, Any]]]:
        dialect = uow.connection.dialect
        compiled = self.statement.compile(dialect=dialect)
        params = []
        for name in compiled.positiontup or []:
            bind = compiled.binds[name]  # a value written into the statement is its default
            params.append((name, bind.type.bind_processor(dialect), bind.value))
        self._compiled = (str(compiled), params)
        return self._compiled

    def run(self, uow: UnitOfWork, values: dict[str, Any]) -> int:
        """Execute with ``values`` (keyed by bind name); the number of rows it touched."""
        if uow.dialect != "sqlite":
            return int(uow.connection.execute(self.statement, values).rowcount)
        sql, params = self._compiled or self._compile(uow)
        args = []
        for name, process, default in params:
            value = values.get(name, default)
            args.append(value if process is None else process(value))
        return int(uow.driver.execute(sql, args).rowcount)
