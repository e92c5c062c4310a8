"""What every operations mixin builds on."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Executable,
    Float,
    String,
    Table,
    literal_column,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm.attributes import instance_state
from sqlalchemy.sql.compiler import SQLCompiler

from hubstore.ids import now_ms
from hubstore.jsontype import JSONText
from hubstore.validation import require_time

if TYPE_CHECKING:
    from hubstore.models import Base
    from hubstore.uow import UnitOfWork

M = TypeVar("M", bound="Base")


class Operations:
    """Base of the mixins: a way to get the unit of work to run in."""

    def unit_of_work(self, write: bool = True) -> AbstractContextManager[UnitOfWork]:
        """The unit of work a method runs in (``write`` takes SQLite's lock up front)."""
        raise NotImplementedError

    def one_statement(self) -> AbstractContextManager[UnitOfWork]:
        """The unit of work of a method that writes with exactly one statement (the
        store runs it in autocommit on PostgreSQL); elsewhere the same as unit_of_work()."""
        return self.unit_of_work()


def upsert(dialect: str, table: Table) -> Any:
    """The dialect's INSERT, which offers ON CONFLICT."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def const(value: str) -> ColumnElement[Any]:
    """A constant rendered into the SQL text (never user input).

    Partial indexes are only used when the query names their constant literally;
    a bound parameter hides it from SQLite's planner.
    """
    return literal_column("'" + value.replace("'", "''") + "'", String())


def natural_order(uow: UnitOfWork, table: Table) -> list[ColumnElement[Any]]:
    """Insertion order on SQLite (the reference returns rows in rowid order), else the key."""
    if uow.dialect == "sqlite":
        return [literal_column(f"{table.name}.rowid")]
    return list(table.primary_key.columns)


def resolve_now(value: int | None) -> int:
    """``now_ms`` as given (tests and callers sweep at a chosen time), else the clock.

    A given time is an int within +-MAX_DURATION_MS (2**62), so that it plus or minus a
    duration still fits in 64 bits on both dialects (else ValidationError)."""
    return now_ms() if value is None else require_time(value, "now_ms")


def update_row(uow: UnitOfWork, table: Table, key: str, **values: Any) -> bool:
    """UPDATE the row whose primary key is ``key``; True when there was one."""
    (key_column,) = table.primary_key.columns
    result = uow.connection.execute(update(table).where(key_column == key).values(**values))
    return bool(result.rowcount)


class Prepared:
    """A Core statement compiled once and, on SQLite, run on the driver when no engine
    event listener watches statements (else through SQLAlchemy's execution layer).

    On the hot paths SQLAlchemy's per-call execution layer (and its result rows) cost
    more than SQLite's own work. The statement is still built with SQLAlchemy; values
    still pass through the column types' bind processors (strict JSON included), and
    results through their result processors. Only the per-call layer is skipped. Other
    dialects execute the statement through SQLAlchemy as usual.
    """

    def __init__(self, statement: Executable, table: Table | None = None) -> None:
        self.statement = statement
        #: Where result columns take their types from (by name).
        self.table = table
        self._compiled: tuple[str, list[tuple[str, Any, Any]]] | None = None
        self._readers: dict[tuple[str, ...], list[Any]] = {}
        self._plans: dict[tuple[type[Any], tuple[str, ...]],
                          tuple[list[str], list[Any], int | None]] = {}

    def _compile(self, uow: UnitOfWork) -> tuple[str, list[tuple[str, Any, Any]]]:
        dialect = uow.store.engine.dialect
        compiled = cast(SQLCompiler, cast(ClauseElement, self.statement).compile(
            dialect=dialect))
        if compiled.post_compile_params:  # IN (...) lists and literal_execute values
            raise TypeError("Prepared statements take plain bound values only")
        params = []
        for name in compiled.positiontup or []:
            bind = compiled.binds[name]  # a value written into the statement is its default
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            params.append((name, processor, bind.value))
        self._compiled = (str(compiled), params)
        return self._compiled

    def _execute(self, uow: UnitOfWork, values: dict[str, Any]
                 ) -> tuple[int, tuple[str, ...], list[Any]]:
        """Run on SQLite: (rowcount, column names, rows)."""
        sql, params = self._compiled or self._compile(uow)
        args = []
        for name, process, default in params:
            value = values.get(name, default)
            args.append(value if process is None else process(value))
        if uow.statements_watched():
            # Someone watches statements (echo, OpenTelemetry, Sentry): go through
            # SQLAlchemy's execution layer, which tells them; it costs a few µs.
            result = uow.connection.exec_driver_sql(sql, tuple(args))
            if not result.returns_rows:
                return result.rowcount, (), []
            return result.rowcount, tuple(result.keys()), list(result.fetchall())
        cursor = uow.driver.execute(sql, args)
        if cursor.description is None:
            return cursor.rowcount, (), []
        return (cursor.rowcount, tuple(d[0] for d in cursor.description),
                cursor.fetchall())

    def run(self, uow: UnitOfWork, values: dict[str, Any]) -> int:
        """Execute with ``values`` (keyed by bind name); the number of rows it touched."""
        if uow.dialect != "sqlite":
            return int(uow.connection.execute(self.statement, values).rowcount)
        return int(self._execute(uow, values)[0])

    def rows(self, uow: UnitOfWork, values: dict[str, Any]) -> list[dict[str, Any]]:
        """Execute and return every row as a dict keyed by column name."""
        if uow.dialect != "sqlite":
            return [dict(row) for row in
                    uow.connection.execute(self.statement, values).mappings()]
        _, names, fetched = self._execute(uow, values)
        readers = self._readers.get(names)
        if readers is None:
            readers = self._readers[names] = [self._reader(uow, name) for name in names]
        return [{name: value if read is None else read(value)
                 for name, read, value in zip(names, readers, row, strict=True)}
                for row in fetched]

    def instances(self, uow: UnitOfWork, values: dict[str, Any], model: type[M]) -> list[M]:
        """Execute and return every row as a transient ``model`` instance (as
        ``model.from_row`` makes it), built straight from the fetched tuples on SQLite."""
        if uow.dialect != "sqlite":
            return [model.from_row(row) for row in self.rows(uow, values)]
        _, names, fetched = self._execute(uow, values)
        plan = self._plans.get((model, names))
        if plan is None:
            keys = model.column_keys()
            readers = [self._reader(uow, name) for name in names]
            key_column = model.key_column()
            plan = self._plans[(model, names)] = (
                [keys[name] for name in names],
                [(i, keys[name], read) for i, (name, read) in enumerate(
                    zip(names, readers, strict=True)) if read is not None],
                names.index(key_column) if key_column in names else None)
        attrs, decoded, at = plan
        new = model.__mapper__.class_manager.new_instance
        made = []
        for row in fetched:
            instance = new()
            state = instance.__dict__
            state.update(zip(attrs, row, strict=True))
            for i, key, read in decoded:
                state[key] = read(row[i])
            if at is not None and row[at] is not None:  # detached, as from_row makes it
                instance_state(instance).key = (model, (row[at],), None)
            made.append(instance)
        return made

    def instance(self, uow: UnitOfWork, values: dict[str, Any], model: type[M]) -> M | None:
        """The first row as a ``model`` instance (see :meth:`instances`), or None."""
        made = self.instances(uow, values, model)
        return made[0] if made else None

    def first(self, uow: UnitOfWork, values: dict[str, Any]) -> dict[str, Any] | None:
        """Execute and return the first row (keyed by column name), or None."""
        rows = self.rows(uow, values)
        return rows[0] if rows else None

    def _reader(self, uow: UnitOfWork, name: str) -> Any:
        if self.table is None or name not in self.table.c:
            return None
        dialect = uow.store.engine.dialect
        column_type = self.table.c[name].type
        if isinstance(column_type, JSONText) and dialect.name == "sqlite":
            return column_type.sqlite_reader()
        if isinstance(column_type, Float) and dialect.name == "sqlite":
            # SQLite's RETURNING gives a whole REAL (0.0, 1.0) as the int it stores it as
            return _as_float
        return column_type.dialect_impl(dialect).result_processor(dialect, None)


def _as_float(value: Any) -> float | None:
    return None if value is None else float(value)
