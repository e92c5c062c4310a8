"""Units of work of one statement (a write, or a read of one SELECT) run in autocommit:
on PostgreSQL one round trip (no BEGIN, COMMIT or ping), on SQLite no BEGIN or COMMIT
either, and a one-SELECT read there runs on the thread's idle writing connection
without a lock. A job's claim and its routine finish are one statement each, with the
same rows as the general path. Inside an open unit of work they join it; a second
statement of one is refused (SQLite); the connection goes back to the pool as it came."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import event, text

from hubstore import HubStore, HubStoreError, ValidationError
from hubstore.errors import ReadOnlyUnitOfWork
from hubstore.services import agents
from hubstore.services.assigns import creating as assigns
from tests.helpers import FAST_S, driver_trace, engine_statements


def test_claim_and_finish_are_one_statement_each_without_begin_or_commit(
        store: HubStore) -> None:
    store.assign_async("lead", "w", task="one", max_retries=0)
    # A store's first claim also looks for stalled jobs (in a transaction); the claims
    # after it, until its next look is due, are the claim alone.
    assert store.claim_next_assign("nobody") is None
    seen = engine_statements(store)
    job = store.claim_next_assign("w")
    assert job is not None and job.status == "running"
    outcome = store.report_assign_result(job.job_id, "succeeded", worker_agent="w",
                                         attempt=job.attempt, result={"n": 1})
    if store.dialect == "postgresql":
        assert seen == ["WITH", "WITH"]  # autocommit: no BEGIN, no COMMIT, no ping
    assert outcome.event == "completed" and outcome.job.status == "succeeded"
    message = outcome.message
    assert message is not None
    stored = store.get_message(message.id)
    assert stored is not None
    assert stored.to_dict() == message.to_dict()
    assert stored.payload["status"] == "succeeded" and stored.payload["result"] == {"n": 1}
    assert (stored.type, stored.from_agent, stored.to_agent, stored.topic) == (
        "event", "w", "lead", "assign.result")
    assert stored.correlation_id == outcome.job.correlation_id
    assert stored.expires_at_ms == stored.created_at_ms + outcome.job.ttl_ms


def test_a_report_off_the_routine_path_still_runs_in_one_transaction(
        store: HubStore) -> None:
    job = store.assign_async("lead", "w", task="retry me", max_retries=1)
    claimed = store.claim_next_assign("w")
    assert claimed is not None and claimed.job_id == job.job_id
    outcome = store.report_assign_result(job.job_id, "failed", worker_agent="w",
                                         attempt=claimed.attempt, error={"e": 1})
    assert outcome.event == "retry_scheduled"
    again = store.get_assign(job.job_id)
    assert again is not None and again.status == "queued" and again.retry_count == 1
    kinds: list[Any] = [m.payload["event"] for m in store.get_messages_by_trace(job.trace_id)
                        if m.type == "event"]
    assert kinds.count("retry_scheduled") == 1


@pytest.mark.parametrize("call", ["register_agent", "refresh_lease", "audit_log"])
def test_one_statement_writes_run_in_autocommit(store: HubStore, call: str) -> None:
    """A write of one statement is its own transaction: PostgreSQL sends no BEGIN or
    COMMIT (one round trip), SQLite's driver runs no BEGIN or COMMIT either (the
    statement takes the write lock itself); what it wrote is committed and visible."""
    store.register_agent("a", "codex", heartbeat_ttl_ms=1_000)
    before = store.get_agent("a")
    assert before is not None
    seen = engine_statements(store) if store.dialect == "postgresql" else driver_trace(store)
    if call == "register_agent":
        store.register_agent("b", "gemini", topics=["t"])
    elif call == "refresh_lease":
        store.refresh_lease("a", ttl_ms=90_000)
    else:
        store.audit_log("event", "a", "b", "t", payload={"n": 1})
    expected = {"register_agent": "INSERT", "refresh_lease": "UPDATE",
                "audit_log": "INSERT"}[call]
    if store.dialect == "postgresql":
        assert seen == [expected]
    else:  # (SQLite's trace also reports the statements of triggers)
        assert seen[0] == expected and not {"BEGIN", "COMMIT", "SAVEPOINT"} & set(seen)
    with HubStore.open(store.engine.url) as other:  # another connection sees it at once
        if call == "register_agent":
            agent = other.get_agent("b")
            assert agent is not None and agent.topics == ["t"]
        elif call == "refresh_lease":
            agent = other.get_agent("a")
            assert agent is not None
            assert agent.lease_expires_ms - agent.last_seen_ms == 90_000
            assert agent.last_seen_ms >= before.last_seen_ms
        else:
            assert [m.payload for m in other.poll_for_agent("b")] == [{"n": 1}]


@pytest.mark.parametrize("call", ["get_assign", "find_reflexion", "poll_topics",
                                  "poll_own_topics"])
def test_one_select_reads_run_in_autocommit(store: HubStore, call: str) -> None:
    """A read of one SELECT is its own snapshot: no BEGIN or COMMIT on either dialect
    (PostgreSQL: one round trip), and it sees what was committed before it."""
    job = store.create_assign("lead", "w", task="t")
    store.add_reflexion("TypeError: x is undefined", "x is undefined", "check x")
    store.register_agent("w", "codex", topics=["t.a"])
    store.audit_log("event", "lead", "topic:t.a", "t.a", payload={"n": 1})
    # (SQLite: on the thread's idle writing connection, the last test below)
    seen = engine_statements(store) if store.dialect == "postgresql" else driver_trace(store)
    if call == "get_assign":
        got = store.get_assign(job.job_id)
        assert got is not None and got.to_dict() == job.to_dict()
        expected = ["SELECT"]
    elif call == "find_reflexion":
        [entry] = store.find_reflexion("TypeError: x is undefined")
        assert entry.solution == "check x"
        expected = ["SELECT"]
    else:
        topics = ["t.a"] if call == "poll_topics" else None
        [message] = store.poll_for_agent("w", include_topics=topics)
        assert message.payload == {"n": 1}
        expected = ["SELECT"] if topics else ["SELECT", "SELECT"]  # (its topics first)
    if store.dialect == "postgresql":
        assert seen == expected
    else:
        assert [word for word in seen if word != "WITH"] == expected, seen


def test_one_select_reads_inside_a_unit_of_work_see_its_writes(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        job = uow.create_assign("lead", "w", task="t")
        got = store.get_assign(job.job_id)  # joins: the uncommitted row is there
        assert got is not None and got.status == "queued"
        uow.add_reflexion("TypeError: y is undefined", "y is undefined", "check y")
        assert [e.solution for e in store.find_reflexion("TypeError: y is undefined")] == [
            "check y"]
    with pytest.raises(ValidationError), store.unit_of_work():
        store.create_assign("lead", "w", task="gone", job_id="gone")
        assert store.get_assign("gone") is not None
        store.create_assign("", "w")  # refused: the block rolls back
    assert store.get_assign("gone") is None


def test_a_second_statement_of_a_one_select_read_is_refused(store: HubStore) -> None:
    if store.dialect != "sqlite":
        pytest.skip("the autocommit guard is SQLite's")
    store.register_agent("a", "codex")
    with pytest.raises(HubStoreError, match="second statement"), \
            store.one_read() as tx:  # (the store methods' own transaction: its services)
        assert assigns.get_assign(tx, "none") is None
        assigns.get_assign(tx, "again")


def test_one_statement_writes_inside_a_unit_of_work_join_it(store: HubStore) -> None:
    """Inside an open unit of work a one-statement write joins it: nothing of it commits
    before the outer block, and a refused call does not spoil the outer block."""
    store.register_agent("a", "codex")
    with store.unit_of_work() as uow:
        uow.audit_log("event", "a", "b", "t", payload={"n": 1})
        with pytest.raises(ValidationError):
            store.audit_log("event", "a", "b", "t", priority=99)
        store.refresh_lease("a")
        with HubStore.open(store.engine.url) as other:
            assert other.poll_for_agent("b") == []  # nothing committed yet
    assert [m.payload for m in store.poll_for_agent("b")] == [{"n": 1}]


def test_a_connection_goes_back_to_the_pool_as_it_came(
        store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Autocommit and READ ONLY are set on the psycopg connection for one unit of work
    and undone before the pool gets it back; one that cannot be undone is dropped."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite keeps its own connections per thread")
    with store.unit_of_work() as uow:
        driver = uow.driver
        assert (driver.autocommit, driver.read_only) == (False, None)
    with store.one_statement() as tx:
        assert tx.driver is driver and driver.autocommit is True
    with store.unit_of_work(write=False) as uow:
        assert uow.driver is driver and (driver.autocommit, driver.read_only) == (False, True)
    with store.unit_of_work() as uow:  # a transaction again, and writable
        assert uow.driver is driver and (driver.autocommit, driver.read_only) == (False, None)
        uow.register_agent("w", "codex")
        assert driver.info.transaction_status.name == "INTRANS"

    real = type(driver).autocommit  # psycopg's property

    def refused(conn: Any, value: bool) -> None:  # autocommit may go on, never off again
        if not value:
            raise RuntimeError("cannot undo")
        real.fset(conn, value)

    monkeypatch.setattr(type(driver), "autocommit", property(real.fget, refused))
    with store.one_statement() as tx:
        assert tx.driver is driver
    monkeypatch.undo()
    with store.unit_of_work() as uow:  # dropped, never handed out in autocommit
        assert uow.driver is not driver and uow.driver.autocommit is False
    assert driver.closed
    assert [a.agent_id for a in store.list_all_agents()] == ["w"]


def test_the_routine_finish_is_one_transaction_on_sqlite(store: HubStore) -> None:
    """SQLite's finish is two statements (the update, then its event): they commit
    together, though the report runs as a one-statement unit of work elsewhere."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL's finish is one statement (the claim test above)")
    store.assign_async("lead", "w", task="one", max_retries=0)
    job = store.claim_next_assign("w")
    assert job is not None
    seen = driver_trace(store)
    store.report_assign_result(job.job_id, "succeeded", worker_agent="w",
                               attempt=job.attempt, result={"n": 1})
    top = [word for k, word in enumerate(seen) if k == 0 or word != seen[k - 1]]
    assert top == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]


def test_a_second_statement_of_a_one_statement_unit_of_work_is_refused(
        store: HubStore) -> None:
    """On SQLite a one-statement unit of work runs in autocommit: a second statement
    would commit apart from the first, so it is refused (the second runs not at all),
    unless the unit of work began its transaction first."""
    if store.dialect != "sqlite":
        pytest.skip("the autocommit guard is SQLite's")
    store.register_agent("a", "codex")
    with pytest.raises(HubStoreError, match="second statement"), \
            store.one_statement() as tx:
        agents.refresh_lease(tx, "a", ttl_ms=5_000)
        agents.update_agent_topics(tx, "a", ["never"])
    agent = store.get_agent("a")
    assert agent is not None and agent.topics == []
    with store.one_statement() as tx:
        with store.unit_of_work(write=False):  # a read-only block's pragmas are no write
            assert store.get_agent("a") is not None
        agents.refresh_lease(tx, "a", ttl_ms=6_000)  # the one statement, still allowed
    agent = store.get_agent("a")
    assert agent is not None and agent.lease_expires_ms - agent.last_seen_ms == 6_000
    with store.one_statement() as tx:
        tx.begin()
        agents.refresh_lease(tx, "a", ttl_ms=5_000)
        agents.update_agent_topics(tx, "a", ["both"])
    agent = store.get_agent("a")
    assert agent is not None and agent.topics == ["both"]
    with pytest.raises(HubStoreError, match="second statement"), \
            store.one_statement() as tx:
        agents.refresh_lease(tx, "a")
        tx.begin()  # too late: the one statement has committed


def test_one_select_reads_use_the_idle_writers_connection_and_take_no_lock(
        store: HubStore) -> None:
    """SQLite: a store read of one SELECT runs on the thread's idle writing connection,
    whose page cache its own commits keep warm. It takes no lock (another program holds
    the write lock meanwhile), also when it begins SQLAlchemy's transaction; with a
    listener watching statements the reading connection serves it again."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL's reads run in autocommit on a pooled connection")
    import sqlite3

    from tests.helpers import driver_trace

    store.register_agent("w", "codex", topics=["t.a"])
    store.audit_log("event", "lead", "w", "t.x", payload={"n": 1})
    writing = driver_trace(store, whole=True)
    reading = driver_trace(store, write=False, whole=True)
    path = store.url.database
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        began = time.monotonic()
        assert [m.payload for m in store.poll_for_agent("w")] == [{"n": 1}]
        with store.one_read() as uow:
            assert uow.connection.execute(text("SELECT count(*) FROM agents")).scalar() == 1
        assert time.monotonic() - began < FAST_S
        assert [sql.split()[0] for sql in writing] == ["SELECT", "SELECT", "BEGIN",
                                                       "SELECT", "COMMIT"]
        assert writing[2] == "BEGIN DEFERRED" and reading == []
        writing.clear()
        event.listen(store.engine, "before_cursor_execute", lambda *_: None)
        assert [m.payload for m in store.poll_for_agent("w")] == [{"n": 1}]
        assert writing == [] and [sql.split()[0] for sql in reading] == [
            "BEGIN", "SELECT", "COMMIT", "BEGIN", "SELECT", "COMMIT"]
    finally:
        holder.close()
    # the guard of general reads is kept
    with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as uow:
        uow.connection.execute(text("DELETE FROM agents"))
    assert store.get_agent("w") is not None


def test_assign_async_is_one_statement_on_postgresql_with_the_same_rows(
        store: HubStore) -> None:
    """The job and its handoff message in one statement (one round trip): the rows the
    two-step path (create, then dispatch) writes, the message's payload included."""
    seen = engine_statements(store)
    job = store.assign_async("lead", "w", task="t", payload={"k": [1, 2]}, priority=7,
                             max_retries=2, timeout_ms=5_000, ttl_ms=9_000)
    if store.dialect == "postgresql":
        assert seen == ["WITH"]  # autocommit: no BEGIN, no COMMIT
    assert job.last_message_id is not None
    stored = store.get_assign(job.job_id)
    assert stored is not None and stored.to_dict() == job.to_dict()
    handoff = store.get_message(job.last_message_id)
    assert handoff is not None
    assert (handoff.type, handoff.from_agent, handoff.to_agent, handoff.topic,
            handoff.priority, handoff.ttl_ms, handoff.trace_id, handoff.correlation_id,
            handoff.status) == ("handoff", "lead", "w", "assign.job", 7, 9_000,
                                job.trace_id, job.correlation_id, "queued")
    assert handoff.payload == {
        "kind": "assign.job", "reason": "create", "assign_job_id": job.job_id,
        "attempt": 1, "retry_count": 0, "max_retries": 2, "timeout_ms": 5_000,
        "supervisor_agent": "lead", "worker_agent": "w", "task": "t",
        "payload": {"k": [1, 2]}}
    assert handoff.expires_at_ms == handoff.created_at_ms + 9_000
    assert [m.id for m in store.poll_for_agent("w")] == [handoff.id]
    assert store.get_hub_stats()["total_messages"] == 1
