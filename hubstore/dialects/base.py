"""What each dialect's SQL component provides (see :mod:`hubstore.dialects`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from sqlalchemy import (
    CTE,
    BindParameter,
    ColumnClause,
    ColumnElement,
    Connection,
    Engine,
    Executable,
    FromClause,
    Select,
    String,
    Table,
    TextClause,
    literal_column,
)
from sqlalchemy.sql.selectable import TableValuedAlias

#: The keys of a reflexion context filter, each with the JSON kind of its value
#: ("text", "number", "true" or "false"), in order: value i is bound as p_value_i.
ContextSignature = tuple[tuple[str, str], ...]


def const(value: str) -> ColumnElement[Any]:
    """A constant rendered into the SQL text (never user input).

    Partial indexes are only used when the query names their constant literally;
    a bound parameter hides it from SQLite's planner.
    """
    return literal_column("'" + value.replace("'", "''") + "'", String())


class SqlDialect(ABC):
    """One dialect's SQL: statement pieces, and the few driver calls the unit of work
    makes itself."""

    name: str
    #: Whether an INSERT, UPDATE or DELETE may stand in a WITH clause (PostgreSQL's
    #: data-modifying CTEs): a move and its event message in one statement.
    writable_ctes: bool
    #: Whether transactions run side by side and serialize on row locks (PostgreSQL),
    #: rather than one writer at a time under the database's write lock (SQLite): a
    #: decision read in one statement must then be taken again under the row's lock.
    row_locks: bool
    #: How many rows count an assign limit's releases (revision 0016's triggers pick one
    #: by the finishing transaction's id): finishing jobs of one key wait for each other
    #: only when theirs is the same, and never for a row claims lock. Also the most
    #: shares a limit's running room is split in (revision 0017).
    release_stripes: int
    #: Whether revision 0019's claim indexes are there (PostgreSQL): queued jobs without
    #: a limit key and with one indexed apart, and the scheduled ones apart, so that a
    #: claim of unlimited jobs reads no limit and a full key's jobs are never read.
    split_claim_indexes: bool

    @abstractmethod
    def insert(self, table: Table) -> Any:
        """The dialect's INSERT, which offers ON CONFLICT (each dialect's own Insert
        class, whose on_conflict methods differ)."""

    @abstractmethod
    def natural_order(self, table: Table) -> list[ColumnElement[Any]]:
        """Insertion order (the reference returns rows in SQLite's rowid order)."""

    @abstractmethod
    def row_key(self, table: Table) -> ColumnElement[Any]:
        """The cheapest key to read a row again by (SQLite's rowid, else the key)."""

    @abstractmethod
    def json_list_contains(self, column: ColumnElement[Any], value: str
                           ) -> ColumnElement[bool]:
        """``value`` is an element of the JSON list stored in ``column``."""

    @abstractmethod
    def in_json_array(self, column: ColumnElement[Any], name: str) -> TextClause:
        """``column`` is one of the strings of the JSON array bound as ``name``."""

    @abstractmethod
    def json_not_null(self, column: ColumnElement[Any]) -> ColumnElement[bool]:
        """The JSON stored in ``column`` is not JSON null."""

    def whole_numbers(self, columns: list[ColumnElement[Any]], *, nullable: bool
                      ) -> list[ColumnElement[bool]]:
        """Guards that each column holds a whole number (or NULL when ``nullable``):
        only SQLite can store another type in an INTEGER column."""
        return []

    def materialized(self, query: CTE) -> CTE:
        """``query`` computed once, whatever the planner would rather do with it."""
        return query

    def one_of(self, column: ColumnElement[Any], keys: Select[Any]) -> ColumnElement[bool]:
        """``column`` is one of the values ``keys`` selects (a few), found by the
        column's own index rather than by scanning its table for them."""
        return column.in_(keys)

    def json_rows(self, table: Table, name: str) -> Select[Any] | None:
        """The rows of ``table`` bound as ``name``, one JSON array of objects keyed by
        column name, as a query of the table's columns in its order: a batch INSERT's
        rows in one bound value, so that its text is the same for any number of rows.
        None where the dialect has no such function (its batches run row by row)."""
        return None

    def json_records(self, name: str, columns: list[ColumnClause[Any]]
                     ) -> TableValuedAlias | None:
        """Records bound as ``name``, one JSON array of objects, as a FROM item named
        ``records`` with ``columns`` (each value converted to its column's type; a key
        missing from an object is NULL). None where the dialect has no such function."""
        return None

    def fold_counter_deltas(self, engine: Engine) -> None:
        """Fold the counters' pending deltas (revision 0004's, and revision 0015's of
        the workers' jobs) into the counters, one folder at a time, then reclaim the
        delta rows. Nothing where the dialect's triggers write the counters directly."""
        return None

    def json_object(self, pairs: list[tuple[str, ColumnElement[Any]]]
                    ) -> ColumnElement[Any] | None:
        """A JSON object of the (key, value) pairs, built by the server (the keys are the
        code's own names, never a user's). None where the dialect writes no message in
        SQL (it has no writable CTEs: its events are built in Python)."""
        return None

    def claim_slots(self, picked: CTE, released: CTE, now: ColumnElement[Any]
                    ) -> tuple[CTE, CTE] | None:
        """Where claims run side by side (row locks): the room each assign limit's picked
        jobs take, under a lock, and the statement that counts it (see
        services/assigns/claims.py's ``claim_statement``: ``picked`` is its picked jobs,
        ``released`` each share's releases, ``now`` the claim's time). None where one
        writer runs at a time (SQLite: what the claim picked is what it takes, and a
        limit has one share)."""
        return None

    def likely(self, condition: ColumnElement[bool]) -> ColumnElement[bool]:
        """``condition``, with a hint that it selects most rows (SQLite's planner)."""
        return condition

    @abstractmethod
    def start_times(self, starts: ColumnElement[Any]) -> tuple[FromClause, ColumnElement[Any]]:
        """The elements of the JSON array of integers in ``starts`` as rows: a FROM item
        (a table-valued function of the column, which may stand in a join after the
        column's table) and its value as an integer."""

    @abstractmethod
    def lesser(self, first: ColumnElement[Any], second: ColumnElement[Any]
               ) -> ColumnElement[Any]:
        """The lesser of two numbers, NULL counting as no bound (NULL when both are)."""

    @abstractmethod
    def greater(self, first: ColumnElement[Any], second: ColumnElement[Any]
                ) -> ColumnElement[Any]:
        """The greater of two numbers, a NULL one left out (NULL when both are)."""

    def rate_room_for(self, limit: FromClause, count: ColumnElement[Any],
                      now: ColumnElement[Any]) -> ColumnElement[bool]:
        """Where row locks serialize (row_locks): whether the key's rate lets ``count``
        more of its jobs start at ``now``, read from the key's own row and values fixed
        before it (no subquery), so that PostgreSQL checks it again on the row's newest
        version once it holds its lock."""
        raise NotImplementedError(f"{self.name} takes its decisions under its write lock")

    def hold_still(self, table: Table) -> Executable | None:
        """A statement that keeps every other transaction from writing ``table`` until
        this one ends (waiting for those writing it now), so that a count of its rows
        stays true until the commit; None where the write lock held already does."""
        return None

    def room_notice(self, key: str) -> Executable | None:
        """A statement that wakes the claimers waiting for room under the limit ``key``
        (PostgreSQL: a NOTIFY at commit), or None where any commit wakes every waiter."""
        return None

    @abstractmethod
    def json_key_equals(self, column: ColumnElement[Any], key: str, kind: str,
                        value: BindParameter[Any]) -> ColumnElement[bool]:
        """The JSON object in ``column`` has ``key`` equal to the bound ``value`` of JSON
        kind ``kind`` (see ContextSignature); the key is bound, never pasted."""

    @abstractmethod
    def json_filter_value(self, value: str | int | float) -> Any:
        """What to bind for json_key_equals's ``value`` (None: bind nothing)."""

    @abstractmethod
    def ascii_like(self, column: ColumnElement[Any], pattern: BindParameter[Any]
                   ) -> ColumnElement[bool]:
        """``column LIKE pattern``, case-blind for ASCII letters only (SQLite's LIKE)."""

    def like_needle(self, needle: str) -> str:
        """The text ascii_like's pattern is made of (see PostgreSQLDialect)."""
        return needle

    def trigram_filter(self) -> TextClause | None:
        """A condition narrowing a substring search by the reflexion trigram index, with
        the phrase bound as ``p_phrase`` (None where there is no such index)."""
        return None

    @abstractmethod
    def project_slug(self) -> ColumnElement[Any]:
        """``adaptive_state["project_slug"]`` of a reflexion entry: revision 0005's
        indexed expression, repeated verbatim (a planner uses an expression index only
        for the expression it indexes, so the JSON path is constant SQL text; the slug
        itself is bound). SQLite: the slug when it is a JSON string, else NULL
        (json_extract would return an array or object as JSON text). PostgreSQL: jsonb,
        compared with a jsonb string."""

    @abstractmethod
    def project_slug_param(self, name: str) -> ColumnElement[Any]:
        """The bound parameter ``name`` as project_slug compares with it."""

    def project_slug_value(self, slug: str, encoded: str) -> str:
        """What to bind for project_slug_param: the slug, or ``encoded`` (its JSON text)
        where the comparison is between JSON values."""
        return slug

    @abstractmethod
    def refuse_writes(self, driver: Any, on: bool) -> None:
        """Make the open transaction on ``driver`` refuse writes, or allow them again."""

    @abstractmethod
    def begin_for_savepoint(self, driver: Any) -> None:
        """Begin the application's transaction on ``driver`` unless the driver has begun
        it, so that a SAVEPOINT made next is inside it."""

    def transaction_failed(self, conn: Connection) -> bool:
        """Whether the server aborted the transaction open on ``conn`` (it can only roll
        back)."""
        return False

    @abstractmethod
    def end_failed_commit(self, driver: Any) -> None:
        """End what a failed COMMIT left open on ``driver`` after SQLAlchemy's rollback."""
