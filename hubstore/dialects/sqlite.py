"""SQLite's SQL component."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BindParameter,
    ColumnElement,
    FromClause,
    Table,
    Text,
    TextClause,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
    text,
    type_coerce,
)
from sqlalchemy.dialects import sqlite

from hubstore.dialects.base import SqlDialect, const
from hubstore.sqlite_setup import begin_statement

#: What json_type() says for each kind of a context filter's value.
_JSON_TYPES = {"text": ("text",), "number": ("integer", "real")}


def _one_of(expr: ColumnElement[Any], names: tuple[str, ...]) -> ColumnElement[bool]:
    """``expr`` equals one of ``names``, with plain bound values (no expanding IN)."""
    return or_(*(expr == bindparam(None, name, Text) for name in names))


class SQLiteDialect(SqlDialect):
    name = "sqlite"
    writable_ctes = False
    row_locks = False
    split_claim_indexes = False
    release_stripes = 1  # (one writer at a time: nothing to spread)

    def insert(self, table: Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def natural_order(self, table: Table) -> list[ColumnElement[Any]]:
        return [self.row_key(table)]

    def row_key(self, table: Table) -> ColumnElement[Any]:
        return literal_column(f"{table.name}.rowid")

    def json_list_contains(self, column: ColumnElement[Any], value: str
                           ) -> ColumnElement[bool]:
        elements = func.json_each(column).table_valued("value")
        return exists(select(1).select_from(elements).where(elements.c.value == value))

    def in_json_array(self, column: ColumnElement[Any], name: str) -> TextClause:
        return text(f"{column} IN (SELECT value FROM json_each(:{name}))")

    def start_times(self, starts: ColumnElement[Any]) -> tuple[FromClause, ColumnElement[Any]]:
        each = func.json_each(starts).table_valued("value")
        return each, each.c.value

    def lesser(self, first: ColumnElement[Any], second: ColumnElement[Any]
               ) -> ColumnElement[Any]:
        # (SQLite's min() of a NULL is NULL: each side stands in for a missing other)
        return func.min(func.coalesce(first, second), func.coalesce(second, first))

    def greater(self, first: ColumnElement[Any], second: ColumnElement[Any]
                ) -> ColumnElement[Any]:
        return func.max(func.coalesce(first, second), func.coalesce(second, first))

    def json_not_null(self, column: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.trim(column, func.char(32, 9, 10, 13)) != const("null")

    def whole_numbers(self, columns: list[ColumnElement[Any]], *, nullable: bool
                      ) -> list[ColumnElement[bool]]:
        if nullable:
            return [or_(column.is_(None), func.typeof(column) == const("integer"))
                    for column in columns]
        return [func.typeof(column) == const("integer") for column in columns]

    def likely(self, condition: ColumnElement[bool]) -> ColumnElement[bool]:
        # (untyped: a Boolean function would be compared with 1)
        return func.likely(condition)

    def json_key_equals(self, column: ColumnElement[Any], key: str, kind: str,
                        value: BindParameter[Any]) -> ColumnElement[bool]:
        types = _JSON_TYPES.get(kind, (kind,))
        if '"' in key:
            # SQLite's JSON paths cannot name a key holding a double quote: look it up
            # through json_each instead, still with the key bound.
            each = func.json_each(column).table_valued("key", "value", "type")
            conditions = [each.c.key == key, _one_of(each.c.type, types)]
            if kind in ("text", "number"):
                conditions.append(each.c.value == value)
            return exists(select(1).select_from(each).where(*conditions))
        element = type_coerce(column, JSON)[key]  # SQLAlchemy binds the path '$."key"'
        type_ok = _one_of(func.json_type(column, bindparam(None, f'$."{key}"', Text)), types)
        if kind == "number":
            return and_(type_ok, element.as_float() == value)
        if kind == "text":
            return and_(type_ok, element.as_string() == value)
        return type_ok

    def json_filter_value(self, value: str | int | float) -> Any:
        return None if isinstance(value, bool) else value  # (a boolean: its type alone)

    def ascii_like(self, column: ColumnElement[Any], pattern: BindParameter[Any]
                   ) -> ColumnElement[bool]:
        return column.like(pattern, escape="\\")

    def trigram_filter(self) -> TextClause | None:
        # The trigram index narrows the rows; LIKE keeps the exact semantics.
        return text("reflexion_entries.rowid IN (SELECT rowid FROM reflexion_entries_fts "
                    "WHERE reflexion_entries_fts MATCH :p_phrase)")

    def project_slug(self) -> ColumnElement[Any]:
        return literal_column(
            "CASE WHEN json_valid(adaptive_state_json) THEN "
            "CASE json_type(adaptive_state_json, '$.project_slug') "
            "WHEN 'text' THEN json_extract(adaptive_state_json, '$.project_slug') END END",
            Text)

    def project_slug_param(self, name: str) -> ColumnElement[Any]:
        return bindparam(name, type_=Text)

    def refuse_writes(self, driver: Any, on: bool) -> None:
        driver.execute(f"PRAGMA query_only = {1 if on else 0}")  # (a pragma: not counted)

    def begin_for_savepoint(self, driver: Any) -> None:
        """pysqlite begins only before its first INSERT, UPDATE or DELETE: a SAVEPOINT
        before that would be the transaction itself, and its RELEASE a commit."""
        if not driver.in_transaction:
            driver.execute(begin_statement(True))

    def end_failed_commit(self, driver: Any) -> None:
        if driver.in_transaction:  # SQLAlchemy left a failed COMMIT's open
            driver.rollback()
