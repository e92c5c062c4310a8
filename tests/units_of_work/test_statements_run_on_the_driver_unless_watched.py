"""Prepared statements run on the driver while no engine listener watches statements, and
through SQLAlchemy's execution layer once one does, so that cursor events see every
common call: the same rows, the same Python types, the same errors either way, on both
dialects; and on PostgreSQL the hot paths skip the layer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, event, insert, select, text

from hubstore import HubStore
from hubstore.errors import DuplicateKey, HubStoreError, ValidationError
from hubstore.execution import Prepared
from hubstore.models import AssignJob, Message, table_of
from tests.helpers import record_calls

#: Values whose Python type a careless read changes (0.0 read back as 0, a JSON
#: string as its text, a big integer as a float).
PAYLOAD = {"f": 0.0, "one": 1.0, "big": 2**62, "neg": -1, "s": "é\u2603", "n": None,
           "list": [1, "2", [3.5]], "t": True, "nested": {"k": {"k": []}}}


def _watch(store: HubStore) -> list[str]:
    """A listener that watches statements: from now on they go through SQLAlchemy."""
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_: seen.append(statement))
    return seen


def _typed(value: Any) -> Any:
    """``value`` with the type of every part spelled out (0 and 0.0 differ)."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_typed(item) for item in value]
    return (type(value).__name__, value)


def _reads(store: HubStore, job_id: str, trace_id: str) -> Any:
    job = store.get_assign(job_id)
    assert job is not None
    agent = store.get_agent("w")
    assert agent is not None
    return _typed({
        "job": job.to_dict(),
        "agent": agent.to_dict(),
        "polled": [m.to_dict() for m in store.poll_for_agent("w", 10)],
        "trace": [m.to_dict() for m in store.get_messages_by_trace(trace_id)],
        "reflexion": [e.to_dict() for e in store.find_reflexion("TypeError")],
        "stats": store.get_hub_stats(),
    })


def test_reads_are_the_same_on_the_driver_and_through_the_execution_layer(
        store: HubStore) -> None:
    store.register_agent("w", "codex", capabilities=["x", 1.0], metadata=PAYLOAD)
    job = store.assign_async("lead", "w", task="t", payload=PAYLOAD, max_retries=0)
    store.audit_log("event", "lead", "w", "t", payload=PAYLOAD, trace_id=job.trace_id)
    entry = store.add_reflexion("TypeError", "x is None", "check x", context=PAYLOAD)
    store.patch_reflexion(entry.id, confidence=0.0)
    on_driver = _reads(store, job.job_id, job.trace_id)
    seen = _watch(store)
    through_layer = _reads(store, job.job_id, job.trace_id)
    assert seen  # the second time the listener saw the statements
    assert through_layer == on_driver
    assert on_driver["job"]["payload"] == _typed(PAYLOAD)


def _claim_and_finish(store: HubStore, through: list[Any]) -> tuple[Any, Any, int]:
    """Claim and finish a job: what they returned, and how many statements went through
    Connection.execute meanwhile (``through`` collects them)."""
    before = len(through)
    job = store.claim_next_assign("w")
    assert job is not None
    outcome = store.report_assign_result(job.job_id, "succeeded", worker_agent="w",
                                         attempt=job.attempt, result=PAYLOAD)
    executed = len(through) - before
    message = outcome.message
    assert message is not None
    stored = store.get_message(message.id)
    assert stored is not None and stored.to_dict() == message.to_dict()
    skip = {"job_id", "trace_id", "correlation_id", "created_at_ms", "updated_at_ms",
            "started_at_ms", "completed_at_ms", "deadline_ms", "last_message_id"}

    def same(d: dict[str, Any]) -> Any:
        return _typed({k: v for k, v in d.items() if k not in skip})

    payload = {k: v for k, v in message.payload.items() if k not in skip}
    return (same(job.to_dict()), same(outcome.job.to_dict())), _typed(payload), executed


def test_claim_and_finish_are_the_same_on_the_driver_and_through_the_layer(
        store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2):
        store.assign_async("lead", "w", task="same", payload=PAYLOAD, max_retries=0)
    through = record_calls(monkeypatch, Connection, "execute")
    *on_driver, executed = _claim_and_finish(store, through)
    assert executed == 0  # both dialects: claim and finish ran on the driver
    seen = _watch(store)
    *through_layer, executed = _claim_and_finish(store, through)
    assert len(seen) >= 2
    if store.dialect == "postgresql":  # (SQLite's goes through exec_driver_sql)
        assert executed == 2
    assert through_layer == on_driver


#: A job's row by id, and a whole row inserted (the store's own statements, as
#: hubstore.services.assigns.moves prepares them).
JOBS = table_of(AssignJob)
SELECT_JOB = Prepared(select(JOBS).where(JOBS.c.job_id == bindparam("p_job_id")), JOBS)
INSERT_JOB = Prepared(insert(JOBS).values({c.name: bindparam(c.name) for c in JOBS.c}), JOBS)


def _duplicate_and_bad_value(store: HubStore) -> list[tuple[type[BaseException], str, Any]]:
    """A duplicate key and a value the database refuses, each in its own unit of work."""
    job = store.assign_async("lead", "w", task="t")
    with store.transaction(write=False) as uow:
        row = SELECT_JOB.rows(uow, {"p_job_id": job.job_id})[0]
    found: list[tuple[type[BaseException], str, Any]] = []
    attempts: list[Callable[[Any], Any]] = [
        lambda uow: INSERT_JOB.run(uow, row),
        lambda uow: INSERT_JOB.run(uow, {**row, "job_id": "x" + job.job_id,
                                         "priority": 2**40}),  # outside INTEGER
    ]
    for attempt in attempts:
        with pytest.raises(HubStoreError) as caught, store.transaction() as uow:
            attempt(uow)
        error = caught.value
        cause = error.__cause__  # (SQLite's driver path raises sqlite3's own error)
        found.append((type(error), str(error), type(getattr(cause, "orig", cause))))
    return found


def test_errors_are_the_same_on_the_driver_and_through_the_layer(store: HubStore) -> None:
    on_driver = _duplicate_and_bad_value(store)
    _watch(store)
    through_layer = _duplicate_and_bad_value(store)
    assert through_layer == on_driver
    assert [kind for kind, _, _ in on_driver] == [DuplicateKey, ValidationError]
    store.register_agent("after", "codex")  # the connections still work


def test_a_statement_with_an_in_list_runs_through_the_layer_on_postgresql(
        store: HubStore) -> None:
    table = table_of(Message)
    listed = Prepared(select(table.c.id).where(
        table.c.id.in_(bindparam("ids", expanding=True))).order_by(table.c.id), table)
    first = store.audit_log("event", "a", "b", "t")
    second = store.audit_log("event", "a", "b", "t")
    with store.transaction(write=False) as uow:
        if store.dialect == "sqlite":
            with pytest.raises(TypeError):
                listed.rows(uow, {"ids": [first.id, second.id]})
            return
        rows = listed.rows(uow, {"ids": [first.id, second.id]})
    assert [r["id"] for r in rows] == sorted([first.id, second.id])


def test_postgresql_runs_prepared_statements_with_its_own_placeholders(
        store: HubStore) -> None:
    """A statement longer than psycopg's parse cache (4 KiB), a percent sign in it, a
    value bound twice: compiled once with $1, $2, ... and run on a RawCursor, nothing
    parses it again; the rows are those the execution layer reads."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite's driver takes ? placeholders (the SQLite fast path below)")
    table = table_of(Message)
    padding = " + ".join(["0"] * 1500)  # a long text (a claim's is 8 KiB)
    long = Prepared(select(table.c.id, (table.c.priority % 3).label("rest"))
                    .where(table.c.from_agent == bindparam("who"),
                           table.c.to_agent == bindparam("who"),
                           table.c.priority >= text(padding))
                    .order_by(table.c.id), table)
    made = [store.audit_log("event", "a", "a", "t", priority=p) for p in (4, 5)]
    store.audit_log("event", "b", "a", "t")
    with store.transaction(write=False) as uow:
        rows = long.rows(uow, {"who": "a"})
        plan = long._pg
        assert plan is not None and plan.numbered and len(plan.query) > 4096
        assert b"$1" in plan.query and b"%%" not in plan.query and b"%(" not in plan.query
        assert [name for name, *_ in plan.params].count("who") == 1
    seen = _watch(store)
    with store.transaction(write=False) as uow:
        layered = long.rows(uow, {"who": "a"})
    assert seen and rows == layered
    assert rows == [{"id": m.id, "rest": m.priority % 3}
                    for m in sorted(made, key=lambda m: m.id)]


# --- cursor events see every call; without a listener, SQLite's driver ------------


def _each_common_call(store: HubStore) -> Iterator[tuple[str, Any]]:
    yield "register_agent", lambda: store.register_agent("w", "codex", topics=["t"])
    yield "refresh_lease", lambda: store.refresh_lease("w")
    yield "audit_log", lambda: store.audit_log("event", "lead", "w", "t")
    yield "poll_for_agent", lambda: store.poll_for_agent("w")
    yield "assign_async", lambda: store.assign_async("lead", "w", task="x")
    yield "claim_next_assign", lambda: store.claim_next_assign("w")
    yield "get_assign", lambda: store.get_assign(store.list_assigns()[0].job_id)
    yield "add_reflexion", lambda: store.add_reflexion("TypeError", "x is None", "check x")
    yield "find_reflexion", lambda: store.find_reflexion("TypeError")


def test_every_common_call_is_seen_by_cursor_events(store: HubStore) -> None:
    before: list[str] = []
    after: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *_: before.append(statement))
    event.listen(store.engine, "after_cursor_execute",
                 lambda conn, cursor, statement, *_: after.append(statement))
    for name, call in _each_common_call(store):
        seen = len(before)
        call()
        assert len(before) > seen, f"{name} ran no statement the events saw"
    assert after == before


def test_without_a_listener_the_sqlite_fast_path_skips_the_execution_layer(
        store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import Connection

    from tests.helpers import record_calls

    through = record_calls(monkeypatch, Connection, "exec_driver_sql")
    store.register_agent("w", "codex")
    store.refresh_lease("w")
    store.audit_log("event", "lead", "w", "t")
    assert len(store.poll_for_agent("w")) == 1
    if store.dialect == "sqlite":
        assert through == []  # run on the driver
        event.listen(store.engine, "before_cursor_execute", lambda *_: None)
        store.refresh_lease("w")  # a listener now: decided again on this very call
        assert through
    agent = store.get_agent("w")
    assert agent is not None and agent.status == "online"
