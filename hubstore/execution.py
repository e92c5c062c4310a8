"""How a statement runs: the one place that knows SQLAlchemy's execution layer and the
drivers under it. Services run every statement of their unit of work through this
module, never through ``uow.connection``, ``uow.session`` or ``uow.driver``
(docs/architecture.md, "How a statement runs"; tests/project/test_architecture.py checks it):

- :class:`Prepared` on the hot paths (the store calls a hub makes for each message, job
  or agent), built once: at import, or once per shape in a cached function;
- :func:`execute`, :func:`scalar` and :func:`scalars` for every other Core statement
  (built per call, or built once off the hot paths), through SQLAlchemy's execution
  layer;
- :func:`get`, :func:`load` and :func:`add` for the ORM's objects, through the unit of
  work's Session (its identity map: the same row is the same object in one unit of work).

:class:`Prepared` runs a Core statement built once, on the driver (Python's sqlite3 or
psycopg) when no engine event listener watches statements, else through SQLAlchemy's
execution layer; driver errors on the psycopg path go through SQLAlchemy's own handling,
so they reach the unit of work wrapped as on the ordinary path
(:mod:`hubstore.db_errors` maps them to HubStoreError). :func:`from_row` and
:func:`blank` turn rows into detached model instances as the ORM's loader would.

Every use of SQLAlchemy's private API in hubstore is in this module (the compiled
statement's result columns, the Connection's DBAPI error handling, the instance state
the ORM's loader makes), so that a change of SQLAlchemy is met here; CI runs the suite
on the lowest supported SQLAlchemy 2.0 and on the newest 2.1.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from sqlalchemy import ClauseElement, CursorResult, Executable, Float, Insert, Select, Table
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.orm import InstanceState
from sqlalchemy.orm.base import DEFAULT_STATE_ATTR
from sqlalchemy.sql.compiler import SQLCompiler

from hubstore.jsontype import JSONText
from hubstore.models import Base

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.orm import Session


class HasEngine(Protocol):
    """The store's shared state, as far as running a statement needs it."""

    @property
    def engine(self) -> Engine:
        """The store's engine (its dialect compiles the statements)."""
        ...


class Runner(Protocol):
    """What a statement runs in: an open unit of work (hubstore.transaction.Transaction)."""

    @property
    def db(self) -> HasEngine:
        """The store's shared state (hubstore.database.Database)."""
        ...

    @property
    def dialect(self) -> str:
        """The dialect's name."""
        ...

    @property
    def connection(self) -> Connection:
        """The SQLAlchemy Connection, in the unit of work's transaction."""
        ...

    @property
    def driver(self) -> Any:
        """The DBAPI connection under it."""
        ...

    @property
    def session(self) -> Session:
        """The unit of work's Session."""
        ...

    def statements_watched(self) -> bool:
        """Whether an engine event listener (or echo) watches statements."""
        ...


M = TypeVar("M", bound=Base)


def unwatched(conn: Connection) -> bool:
    """True when no event listener of the engine (or of the Engine class) but hubstore's
    own BEGIN watches transactions or statements, and echo is off: a unit of work may
    then begin and commit on the driver, unseen by SQLAlchemy's execution layer.

    Read from the engine's own listener collections, where echo, OpenTelemetry and
    Sentry attach theirs: about 1 us, where the connection's joined dispatcher, which
    builds an object for each event name read, took 4 to 12 us of a 50 us heartbeat.
    """
    events = conn.engine.dispatch
    return not (conn._echo or events.before_cursor_execute or events.after_cursor_execute
                or events.commit or events.rollback or len(events.begin) > 1)


def statements_watched(conn: Connection) -> bool:
    """Whether a listener of the engine (or echo) watches statements (as unwatched)."""
    events = conn.engine.dispatch
    return bool(conn._echo or events.before_cursor_execute or events.after_cursor_execute)


def execute(uow: Runner, statement: Executable,
            params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
            ) -> CursorResult[*tuple[Any, ...]]:
    """Run a statement built per call through SQLAlchemy's execution layer."""
    return uow.connection.execute(statement, params)


def scalar(uow: Runner, statement: Executable,
           params: Mapping[str, Any] | None = None) -> Any:
    """The first column of the first row of a statement built per call, or None."""
    return uow.connection.scalar(statement, params)


def scalars(uow: Runner, statement: Executable,
            params: Mapping[str, Any] | None = None) -> list[Any]:
    """The first column of every row of a statement built per call."""
    return list(uow.connection.scalars(statement, params))


def get(uow: Runner, model: type[M], key: Any, *, fresh: bool = False) -> M | None:
    """The ``model`` row with primary key ``key``, as the Session's object (``fresh``:
    read again even when the Session has it), or None."""
    return uow.session.get(model, key, populate_existing=fresh)


def load(uow: Runner, model: type[M], statement: Select[Any]) -> list[M]:
    """The Session's ``model`` objects a ``select(model)`` statement returns."""
    return list(uow.session.scalars(statement))


def add(uow: Runner, instance: Base) -> None:
    """INSERT a new object now (its defaults and errors come back here)."""
    uow.session.add(instance)
    uow.session.flush()


def blank(model: type[M]) -> tuple[M, InstanceState[M]]:
    """A new instance with no attribute set, and its state: what the class manager's
    ``new_instance`` makes (the ORM's loader starts from it), without its two
    indirections; read paths make one per row (a fifth less time per polled row).
    """
    instance = model.__new__(model)
    state = InstanceState(instance, model.__mapper__.class_manager)
    instance.__dict__[DEFAULT_STATE_ATTR] = state
    return instance, state


def from_row(model: type[M], row: Mapping[Any, Any]) -> M:
    """A detached ``model`` instance from a Core row keyed by column name: in the state
    of the instances the Session loaded once their unit of work ended (``session.merge``
    takes it in; ``session.add`` would UPDATE it, never INSERT it again).

    Hot read paths load with Core: the values go straight into the instance's state, as
    the ORM's own loader does, without the per-attribute events of ``__init__`` (which
    cost more than the query).
    """
    keys = model.column_keys()
    instance, state = blank(model)
    values = instance.__dict__
    values.update(zip(map(keys.__getitem__, row), row.values(), strict=True))
    key = values.get(model.key_attr())
    if key is not None:  # the identity the Session gives a row it loads
        state.key = (model, (key,), None)
    return instance


class Prepared:
    """A Core statement compiled once and run on the driver when no engine event
    listener watches statements (else through SQLAlchemy's execution layer).

    On the hot paths SQLAlchemy's per-call execution layer (and its result rows) cost
    more than SQLite's own work, and on PostgreSQL as much client CPU as the server
    spends on the statement. The statement is still built with SQLAlchemy; values
    still pass through the column types' bind processors (strict JSON included), and
    results through their result processors. Only the per-call layer is skipped.

    Each driver has a runner of its own, made the first time the statement runs on
    that dialect: :class:`_SQLiteRunner` (Python's sqlite3) and :class:`_PgRunner`
    (psycopg; see there). A statement with IN lists (post-compile parameters) runs
    through SQLAlchemy.
    """

    def __init__(self, statement: Executable, table: Table | None = None) -> None:
        self.statement = statement
        #: Where result columns take their types from on SQLite (by name).
        self.table = table
        #: Each dialect's runner (by its name), made on the statement's first run there.
        self._runners: dict[str, _SQLiteRunner | _PgRunner] = {}

    def _runner(self, uow: Runner) -> _SQLiteRunner | _PgRunner:
        """The runner of the unit of work's dialect, chosen once per dialect."""
        dialect = uow.dialect
        runner = self._runners.get(dialect)
        if runner is None:
            runner = self._runners[dialect] = (
                _SQLiteRunner(self) if dialect == "sqlite" else _PgRunner(self))
        return runner

    @property
    def _pg(self) -> _PgPlan | None:
        """The statement as compiled for psycopg (None before it ran on PostgreSQL, or
        where it runs through SQLAlchemy)."""
        runner = self._runners.get("postgresql")
        return runner.plan if isinstance(runner, _PgRunner) else None

    def run(self, uow: Runner, values: dict[str, Any]) -> int:
        """Execute with ``values`` (keyed by bind name); the number of rows it touched."""
        done = self._runner(uow).fetch(uow, values)
        if done is None:
            return int(uow.connection.execute(self.statement, values).rowcount)
        return int(done[0])

    def rows(self, uow: Runner, values: dict[str, Any]) -> list[dict[str, Any]]:
        """Execute and return every row as a dict keyed by column name."""
        done = self._runner(uow).fetch(uow, values)
        if done is None:
            return [dict(row) for row in
                    uow.connection.execute(self.statement, values).mappings()]
        _, names, fetched, readers = done
        return [{name: value if read is None else read(value)
                 for name, read, value in zip(names, readers, row, strict=True)}
                for row in fetched]

    def instances(self, uow: Runner, values: dict[str, Any], model: type[M]) -> list[M]:
        """Execute and return every row as a transient ``model`` instance (as
        ``model.from_row`` makes it), built straight from the fetched tuples."""
        runner = self._runner(uow)
        done = runner.fetch(uow, values)
        if done is None:
            return [from_row(model, row) for row in self.rows(uow, values)]
        _, names, fetched, readers = done
        plans = runner.plans
        plan = plans.get((model, names))
        if plan is None:
            keys = model.column_keys()
            key_column = model.key_column()
            plan = plans[(model, names)] = (
                [keys[name] for name in names],
                [(i, keys[name], read) for i, (name, read) in enumerate(
                    zip(names, readers, strict=True)) if read is not None],
                names.index(key_column) if key_column in names else None)
        attrs, decoded, at = plan
        made = []
        for row in fetched:
            instance, state = blank(model)
            values = instance.__dict__
            values.update(zip(attrs, row, strict=True))
            for i, key, read in decoded:
                values[key] = read(row[i])
            if at is not None and row[at] is not None:  # detached, as from_row makes it
                state.key = (model, (row[at],), None)
            made.append(instance)
        return made

    def inserted(self, uow: Runner, values: dict[str, Any], model: type[M]) -> M:
        """Run this INSERT of one row, each column bound by its own name, and return the
        row as a ``model`` instance, as ``INSERT ... RETURNING *`` reads it (each
        runner's ``inserted`` says how)."""
        return self._runner(uow).inserted(uow, values, model)

    def instance(self, uow: Runner, values: dict[str, Any], model: type[M]) -> M | None:
        """The first row as a ``model`` instance (see :meth:`instances`), or None."""
        made = self.instances(uow, values, model)
        return made[0] if made else None

    def first(self, uow: Runner, values: dict[str, Any]) -> dict[str, Any] | None:
        """Execute and return the first row (keyed by column name), or None."""
        rows = self.rows(uow, values)
        return rows[0] if rows else None


#: (rowcount, result keys, rows, result processors) of a statement run on the driver.
Fetched = tuple[int, tuple[str, ...], list[Any], list[Any]]
#: A model's plan of a result: its attribute keys, the decoded columns, the key's index.
_ModelPlans = dict[tuple[type[Any], tuple[str, ...]], tuple[list[str], list[Any], int | None]]


class _SQLiteRunner:
    """Prepared's SQLite half: the statement compiled once (positional ``?``), run on
    the unit of work's sqlite3 connection."""

    __slots__ = ("bound_readers", "compiled", "names", "plans", "prepared", "readers")

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.compiled: tuple[str, list[tuple[str, Any, Any]]] | None = None
        #: The result's column names, read once from ``cursor.description``.
        self.names: tuple[str, ...] | None = None
        #: The bound names and their columns' result processors (``inserted``).
        self.bound_readers: tuple[tuple[str, ...], list[Any]] | None = None
        self.readers: dict[tuple[str, ...], list[Any]] = {}
        self.plans: _ModelPlans = {}

    def _compile(self, uow: Runner) -> tuple[str, list[tuple[str, Any, Any]]]:
        dialect = uow.db.engine.dialect
        compiled = cast(SQLCompiler, cast(ClauseElement, self.prepared.statement).compile(
            dialect=dialect))
        if compiled.post_compile_params:  # IN (...) lists and literal_execute values
            raise TypeError("Prepared statements take plain bound values only")
        params = []
        for name in compiled.positiontup or []:
            bind = compiled.binds[name]  # a value written into the statement is its default
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            params.append((name, processor, bind.value))
        self.compiled = (str(compiled), params)
        return self.compiled

    def _bind(self, uow: Runner, values: dict[str, Any]) -> tuple[str, list[Any]]:
        """The statement's text and its positional values, bind-processed."""
        sql, params = self.compiled or self._compile(uow)
        args = []
        for name, process, default in params:
            value = values.get(name, default)
            args.append(value if process is None else process(value))
        return sql, args

    def _run(self, uow: Runner, sql: str, args: list[Any]
             ) -> tuple[int, tuple[str, ...], list[Any]]:
        if uow.statements_watched():
            # Someone watches statements (echo, OpenTelemetry, Sentry): go through
            # SQLAlchemy's execution layer, which tells them; it costs a few µs.
            result = uow.connection.exec_driver_sql(sql, tuple(args))
            if not result.returns_rows:
                return result.rowcount, (), []
            return result.rowcount, tuple(result.keys()), list(result.fetchall())
        cursor = uow.driver.execute(sql, args)
        description = cursor.description
        if description is None:
            return cursor.rowcount, (), []
        names = self.names  # the statement names its columns: the same on every run
        if names is None or len(names) != len(description):
            names = self.names = tuple(d[0] for d in description)
        return cursor.rowcount, names, cursor.fetchall()

    def fetch(self, uow: Runner, values: dict[str, Any]) -> Fetched:
        """Run: (rowcount, result keys, rows, result processors)."""
        sql, args = self._bind(uow, values)
        rowcount, names, fetched = self._run(uow, sql, args)
        readers = self.readers.get(names)
        if readers is None:
            readers = self.readers[names] = [self._reader(uow, name) for name in names]
        return rowcount, names, fetched, readers

    def inserted(self, uow: Runner, values: dict[str, Any], model: type[M]) -> M:
        """The values bound (after the columns' bind processors), read back through the
        columns' result processors: with every column named there is nothing else the
        row can hold, and no RETURNING to pay for (on SQLite it costs an INSERT of 24
        columns a third more instructions)."""
        sql, args = self._bind(uow, values)
        self._run(uow, sql, args)
        known = self.bound_readers
        if known is None:
            names = tuple(name for name, _, _ in (self.compiled or self._compile(uow))[1])
            known = self.bound_readers = (names, [self._reader(uow, name)
                                                  for name in names])
        names, readers = known
        return from_row(model, {name: value if read is None else read(value)
                               for name, read, value in zip(names, readers, args,
                                                            strict=True)})

    def _reader(self, uow: Runner, name: str) -> Any:
        table = self.prepared.table
        if table is None or name not in table.c:
            return None
        dialect = uow.db.engine.dialect
        column_type = table.c[name].type
        if isinstance(column_type, JSONText):
            return column_type.sqlite_reader()
        if isinstance(column_type, Float):
            # SQLite's RETURNING gives a whole REAL (0.0, 1.0) as the int it stores it as
            return _as_float
        return column_type.dialect_impl(dialect).result_processor(dialect, None)


class _PgRunner:
    """Prepared's PostgreSQL half (psycopg): the statement is compiled once for the
    dialect (its casts included) and run on a cursor of the unit of work's psycopg
    connection, in its transaction; psycopg still prepares it server-side after a few
    runs (unless the URL says ``?pgbouncer=true``). Result keys and types come from the
    compiled statement, as SQLAlchemy's result takes them, not from
    ``cursor.description`` (psycopg builds a Column object per result column on each
    read of it). Its placeholders are PostgreSQL's own ($1, $2, ...), run on psycopg's
    RawCursor (psycopg 3.2 or newer): psycopg parses a statement's ``%(name)s``
    placeholders on every run once it is longer than 4 KiB (its cache's bound), about
    80 us of each claim. A driver error goes through SQLAlchemy's own handling (the same
    wrapped error, a lost connection invalidated with the pool's older ones)."""

    __slots__ = ("compiled", "plan", "plans", "prepared", "readers", "returning")

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        #: The compiled statement (None when it must run through SQLAlchemy), once
        #: ``compiled``.
        self.plan: _PgPlan | None = None
        self.compiled = False
        #: This INSERT with RETURNING, for inserted() (made on first use).
        self.returning: Prepared | None = None
        self.readers: dict[tuple[str, ...], list[Any]] = {}
        self.plans: _ModelPlans = {}

    def _compile(self, uow: Runner) -> _PgPlan | None:
        """The statement compiled for psycopg, or None (run it through SQLAlchemy) when
        its parameters need SQLAlchemy's execution layer."""
        dialect = uow.db.engine.dialect
        plan: _PgPlan | None = None
        numbered = _numbered(dialect)
        compiled = cast(SQLCompiler, cast(ClauseElement, self.prepared.statement).compile(
            dialect=numbered or dialect))
        if (dialect.driver == "psycopg" and not compiled.post_compile_params
                and not compiled.escaped_bind_names
                and compiled.positional == (numbered is not None)):
            params: dict[str, tuple[str, Any, Any, bool]] = {}
            names = (compiled.positiontup or [] if numbered is not None
                     else compiled.bind_names.values())
            for name in names:
                bind = compiled.binds[name]
                processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
                default = bind.effective_value if bind.callable else bind.value
                params.setdefault(name, (name, processor, default, bind.required))
            sql = str(compiled)
            columns = [(entry[0], entry[3]) for entry in compiled._result_columns]
            plan = _PgPlan(sql, sql.encode(), list(params.values()), columns,
                           numbered is not None)
        self.plan, self.compiled = plan, True
        return plan

    def fetch(self, uow: Runner, values: dict[str, Any]) -> Fetched | None:
        """Run on the driver: (rowcount, result keys, rows, result processors), or None
        when the statement must go through SQLAlchemy (see the class)."""
        plan = self.plan if self.compiled else self._compile(uow)
        if plan is None or uow.statements_watched():
            return None
        bound = []
        for name, process, default, required in plan.params:
            if name in values:
                value = values[name]
            elif required:
                raise InvalidRequestError(f"A value is required for bind parameter {name!r}")
            else:
                value = default
            bound.append(value if process is None else process(value))
        args: Any = (bound if plan.numbered else
                     {name: value for (name, *_), value in zip(plan.params, bound, strict=True)})
        conn = uow.connection
        driver = uow.driver
        info = conn.info  # the pooled connection's, kept while it lives
        kind = _RAW_CURSOR if plan.numbered else _CURSOR
        cursor = info.get(kind)
        if cursor is None or cursor.closed or cursor.connection is not driver:
            cursor = info[kind] = (_raw_cursor(driver) if plan.numbered
                                   else driver.cursor())
        try:
            cursor.execute(plan.query, args)
        except conn.dialect.loaded_dbapi.Error as exc:
            # SQLAlchemy's own handling: the same wrapped error as its execution layer
            # raises, handle_error listeners told, a lost connection invalidated.
            conn._handle_dbapi_exception(exc, plan.sql, args, cursor, None)
        result = cursor.pgresult
        if result is None or not result.nfields:
            return cursor.rowcount, (), [], []
        fetched = cursor.fetchall()
        if plan.keys is None:
            names, readers = self._result(uow, plan, result)
        else:
            names = plan.keys
            readers = self.readers[names]
        return cursor.rowcount, names, fetched, readers

    def _result(self, uow: Runner, plan: _PgPlan, result: Any
                ) -> tuple[tuple[str, ...], list[Any]]:
        """The result keys and processors, on a statement's first run: the compiled
        statement's columns, as SQLAlchemy's result takes them (the server's type of each
        column decides the processor, as from ``cursor.description``)."""
        dialect = uow.db.engine.dialect
        count = result.nfields
        if len(plan.columns) == count:
            names = tuple(key for key, _ in plan.columns)
            types = [column_type for _, column_type in plan.columns]
        else:  # pragma: no cover - a Core statement's columns are its result's
            names = tuple(result.fname(i).decode() for i in range(count))
            types = [None] * count
        readers = [None if column_type is None else
                   column_type.dialect_impl(dialect).result_processor(dialect,
                                                                      result.ftype(i))
                   for i, column_type in enumerate(types)]
        self.readers[names] = readers
        plan.keys = names
        return names, readers

    def inserted(self, uow: Runner, values: dict[str, Any], model: type[M]) -> M:
        """With RETURNING (JSONB's own form of the values, as the server stored them)."""
        returning = self.returning
        if returning is None:
            table = self.prepared.table
            assert table is not None, "inserted() needs the table of the INSERT"
            returning = self.returning = Prepared(
                cast(Insert, self.prepared.statement).returning(*table.c), table)
        [row] = returning.instances(uow, values, model)
        return row


#: Connection.info key: the psycopg cursor Prepared statements run on (one per
#: connection: a new cursor per statement looked its dumpers and loaders up again).
_CURSOR = "hubstore_cursor"
_RAW_CURSOR = "hubstore_raw_cursor"


def _raw_cursor(driver: Any) -> Any:
    """A psycopg RawCursor on the connection (placeholders $1, $2, ...)."""
    import psycopg

    return psycopg.RawCursor(driver)


#: Each psycopg dialect's numbered copy (None: none), as long as the dialect lives.
_NUMBERED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _numbered(dialect: Any) -> Any:
    """The psycopg dialect ``dialect``, copied to write PostgreSQL's own placeholders
    ($1, $2, ...) instead of ``%(name)s``; None where psycopg has no RawCursor (before
    3.2) or the dialect is not psycopg's."""
    if dialect in _NUMBERED:
        return _NUMBERED[dialect]
    numbered = None
    if dialect.driver == "psycopg":
        import psycopg

        if hasattr(psycopg, "RawCursor"):
            numbered = copy.copy(dialect)
            numbered.paramstyle, numbered.positional = "numeric_dollar", True
            # (its preparer doubles no percent sign: nothing parses the text again)
            numbered.identifier_preparer = numbered.preparer(numbered)
    _NUMBERED[dialect] = numbered
    return numbered


class _PgPlan:
    """A statement compiled for psycopg (see Prepared)."""

    __slots__ = ("columns", "keys", "numbered", "params", "query", "sql")

    def __init__(self, sql: str, query: bytes, params: list[tuple[str, Any, Any, bool]],
                 columns: list[tuple[str, Any]], numbered: bool) -> None:
        self.sql = sql
        #: Whether the placeholders are PostgreSQL's own ($1, ...; a RawCursor runs it),
        #: each parameter in ``params``' order, else ``%(name)s``.
        self.numbered = numbered
        #: The text as psycopg takes it without encoding it again on each run.
        self.query = query
        #: (bind name, bind processor, default, required) of each parameter.
        self.params = params
        #: (key, type) of each result column, as the compiled statement has them.
        self.columns = columns
        #: The result keys, known once the statement ran (see Prepared._pg_result).
        self.keys: tuple[str, ...] | None = None


def _as_float(value: Any) -> float | None:
    return None if value is None else float(value)
