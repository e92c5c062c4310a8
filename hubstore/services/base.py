"""Small helpers the service functions share."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, TypeVar

from sqlalchemy import Table, bindparam, update

from hubstore.dialects import SqlDialect
from hubstore.dialects.base import const
from hubstore.errors import DuplicateKey
from hubstore.execution import Prepared, execute, get
from hubstore.ids import now_ms
from hubstore.models import DEDUPLICATED, Base
from hubstore.transaction import Transaction
from hubstore.validation import require_time

M = TypeVar("M", bound=Base)


def resolve_now(value: int | None) -> int:
    """``now_ms`` as given (tests and callers sweep at a chosen time), else the clock.

    A given time is an int within +-MAX_DURATION_MS (2**62), so that it plus or minus a
    duration still fits in 64 bits on both dialects (else ValidationError)."""
    return now_ms() if value is None else require_time(value, "now_ms")


def update_row(tx: Transaction, table: Table, key: str, **values: Any) -> bool:
    """UPDATE the row whose primary key is ``key``; True when there was one."""
    (key_column,) = table.primary_key.columns
    result = execute(tx, update(table).where(key_column == key).values(**values))
    return bool(result.rowcount)


@functools.cache
def _insert_new(sql: SqlDialect, table: Table) -> Prepared:
    """The INSERT of a row that writes nothing when its primary key is taken."""
    return Prepared(
        sql.insert(table).values({c.name: bindparam(c.name) for c in table.c})
        .on_conflict_do_nothing(index_elements=list(table.primary_key.columns))
        .returning(*table.c), table)


def insert_once(tx: Transaction, model: type[M], row: dict[str, Any],
                same: Iterable[str], what: str) -> M:
    """Write ``row`` (column-keyed) under its caller-chosen primary key and return it;
    when a row has that key already and agrees with ``row`` in the columns ``same``,
    write nothing and return that row, its ``deduplicated`` True (a call retried after
    an unknown outcome: see DatabaseUnavailable.outcome_unknown). A row that differs
    raises DuplicateKey naming ``what``."""
    table = model.__table__
    assert isinstance(table, Table)
    written = _insert_new(tx.sql, table).instance(tx, row, model)
    if written is not None:
        return written
    (key_column,) = table.primary_key.columns
    key = row[key_column.name]
    held = get(tx, model, key, fresh=True)
    mapper = model.__mapper__
    differ = [name for name in same if held is not None and getattr(
        held, mapper.get_property_by_column(table.c[name]).key) != row[name]]
    if held is None or differ:
        raise DuplicateKey(
            f"{what} {key!r} is taken by another one (it differs in "
            f"{', '.join(differ) or 'its key'}): a call retried with the same id must "
            "repeat its own arguments")
    held.__dict__[DEDUPLICATED] = True
    return held


__all__ = ["const", "insert_once", "resolve_now", "update_row"]
