"""Small test helpers shared by several test modules."""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from sqlalchemy import event, text

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.sql import ClauseElement

    from hubstore import HubStore
    from hubstore.models import AssignJob
    from hubstore.types import AssignEvent

T = TypeVar("T")
#: Far below the default busy timeout (5 s): a join that waited on its own lock would
#: take the whole timeout.
FAST_S = 1.0
#: What the assign status listeners were told: (event, job) per status change.
Heard = list[tuple["AssignEvent", "AssignJob"]]


def present(value: T | None) -> T:
    """What a getter returned, asserted to be there (a row the test expects to exist)."""
    assert value is not None
    return value


def record_calls(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[Any]:
    """Wrap the method ``owner.name`` for this test: the list of the first argument each
    call on this thread passed (the statement, for Connection.execute and
    exec_driver_sql). Calls on other threads of the process are not the test's: the
    suite's own threads copy and drop PostgreSQL test databases ahead of later tests."""
    calls: list[Any] = []
    real = getattr(owner, name)
    test_thread = threading.get_ident()

    def recording(self: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == test_thread:
            calls.append(first)
        return real(self, first, *args, **kwargs)

    monkeypatch.setattr(owner, name, recording)
    return calls


def _first_word(seen: list[str]) -> Any:
    return lambda sql: seen.append(sql.split()[0].upper())


def engine_statements(store: HubStore) -> list[str]:
    """The first word of every statement the store's engine runs from now on (a
    ``before_cursor_execute`` listener, so statements take SQLAlchemy's layer)."""
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_: _first_word(seen)(statement))
    return seen


def driver_trace(store: HubStore, *, write: bool = True, whole: bool = False) -> list[str]:
    """The first word (``whole``: the text) of every statement SQLite's driver runs from
    now on on this thread's writing (or reading) connection; its trace sees BEGIN and
    COMMIT too."""
    seen: list[str] = []
    with store.unit_of_work(write=write) as uow:  # (opens the thread's connection)
        uow.driver.set_trace_callback(seen.append if whole else _first_word(seen))
    seen.clear()
    return seen


def query_plan(store: HubStore, statement: ClauseElement) -> str:
    """The plan the store's database picks for ``statement`` (its values written in):
    SQLite's EXPLAIN QUERY PLAN details, or PostgreSQL's EXPLAIN with sequential scans
    priced out, so that a usable index shows whatever the table's size."""
    with store.unit_of_work(write=False) as uow:
        sql = str(statement.compile(dialect=uow.connection.dialect,
                                    compile_kwargs={"literal_binds": True}))
        if uow.dialect == "sqlite":
            return " ".join(str(r[3]) for r in uow.connection.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql}"))
        uow.connection.execute(text("SET LOCAL enable_seqscan = off"))
        return " ".join(r[0] for r in uow.connection.exec_driver_sql(f"EXPLAIN {sql}"))


def analyzed(conn: Connection, sql: str) -> tuple[str, int]:
    """PostgreSQL's EXPLAIN ANALYZE of ``sql`` (its values written in): the plan, and the
    rows its scans read in all (each scan's rows times its loops)."""
    plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN ANALYZE {sql}"))
    read = sum(int(rows) * int(loops) for rows, loops in re.findall(
        r"Scan[^\n]*actual[^\n]*rows=(\d+) loops=(\d+)", plan))
    return plan, read
