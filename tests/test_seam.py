"""Issue 9: one owner for every transaction, on both dialects.

Nesting as Django's ``atomic``, read-only units of work, the Session, SQLAlchemy's
cursor events, bounded waits, descriptors, no ``fcntl``, ``fork()`` and PostgreSQL's
connect timeout and lost connections. Times are bounded, never measured as throughput.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from hubstore import HubStore
from hubstore.errors import ReadOnlyUnitOfWork
from hubstore.models import Agent, AssignJob
from hubstore.testing.factories import AgentFactory, AssignJobFactory

#: Far below the default busy timeout (5 s): a join that waited on its own lock would
#: take the whole timeout.
FAST_S = 1.0


@pytest.fixture
def other(store: HubStore) -> Iterator[HubStore]:
    """A second store on the same database (another connection, as another program)."""
    with HubStore.open(store.url) as second:
        yield second


def checkouts(store: HubStore) -> list[int]:
    """A list that grows by one each time the store's engine hands out a connection."""
    seen: list[int] = []
    event.listen(store.engine, "checkout", lambda *_: seen.append(1))
    return seen


# -- 1. nesting ----------------------------------------------------------------------


def test_a_store_method_inside_a_unit_of_work_joins_it_at_once(store: HubStore) -> None:
    opened = checkouts(store)
    with store.unit_of_work() as uow:
        uow.register_agent("outer", "codex")
        before = len(opened)
        began = time.monotonic()
        store.register_agent("inner", "codex")
        store.audit_log("event", "outer", "inner", "t")
        assert sorted(a.agent_id for a in store.list_all_agents()) == ["inner", "outer"]
        with store.unit_of_work() as joined:
            assert joined is uow
        assert time.monotonic() - began < FAST_S
        assert len(opened) == before  # no second connection
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["inner", "outer"]
    assert store.get_hub_stats()["total_messages"] == 1


def test_an_inner_exception_rolls_back_only_the_inner_block(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        with pytest.raises(KeyError), store.unit_of_work() as inner:
            inner.register_agent("lost", "codex")
            store.audit_log("event", "lost", "x", "t")
            raise KeyError("inner")
        assert uow.get_agent("lost") is None
        uow.audit_log("event", "kept", "x", "t")  # the outer block goes on
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]
    assert store.get_hub_stats()["total_messages"] == 1


def test_a_failing_store_method_inside_rolls_back_only_itself(store: HubStore) -> None:
    job = store.create_assign("lead", "w")
    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        with pytest.raises(Exception) as caught:
            store.update_assign_status(job.job_id, "succeeded", result={"bad": float("nan")})
        assert type(caught.value).__module__.startswith("hubstore")
        uow.update_assign_status(job.job_id, "running")
    got = store.get_assign(job.job_id)
    assert got is not None and got.status == "running"
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]


def test_the_outer_rollback_undoes_the_inner_work(store: HubStore) -> None:
    with pytest.raises(RuntimeError), store.unit_of_work():
        store.register_agent("a", "codex")
        with store.unit_of_work() as inner:
            inner.audit_log("event", "a", "b", "t")
        store.create_assign("lead", "w")
        raise RuntimeError("outer")
    assert store.list_all_agents() == []
    assert store.list_assigns() == []
    assert store.get_hub_stats()["total_messages"] == 0


def test_nothing_is_visible_elsewhere_before_the_outermost_commit(
        store: HubStore, other: HubStore) -> None:
    with store.unit_of_work():
        with store.unit_of_work():
            store.register_agent("a", "codex")
        assert store.get_agent("a") is not None  # visible inside
        began = time.monotonic()
        assert other.get_agent("a") is None  # not elsewhere, and the reader does not wait
        assert time.monotonic() - began < FAST_S
    seen = other.get_agent("a")
    assert seen is not None and seen.cli == "codex"


def test_listeners_of_a_rolled_back_savepoint_never_hear(store: HubStore) -> None:
    heard: list[tuple[str, str]] = []
    store.on_assign_status_change(lambda event, job: heard.append(
        (event["job_id"], event["status"])))
    with store.unit_of_work():
        kept = store.create_assign("lead", "w")
        with pytest.raises(KeyError), store.unit_of_work() as inner:
            lost = inner.create_assign("lead", "w")
            inner.update_assign_status(kept.job_id, "running")
            raise KeyError
        assert heard == []
    assert heard == [(kept.job_id, "queued")]
    assert store.get_assign(lost.job_id) is None
    got = store.get_assign(kept.job_id)
    assert got is not None and got.status == "queued"


def test_a_committed_savepoint_keeps_its_actions_for_the_outer_commit(store: HubStore) -> None:
    ran: list[str] = []
    with store.unit_of_work() as uow:
        with store.unit_of_work() as inner:
            inner.after_commit(lambda: ran.append("inner"))
        assert ran == []  # a savepoint's release is no commit
        uow.after_commit(lambda: ran.append("outer"))
    assert ran == ["inner", "outer"]


# -- 3. read-only units of work ------------------------------------------------------


_RAW_INSERT = text("INSERT INTO agents (agent_id, cli, last_seen_ms, lease_expires_ms, "
                   "status) VALUES ('raw', 'codex', 1, 1, 'online')")


def test_a_read_only_unit_of_work_refuses_store_writes(store: HubStore) -> None:
    AgentFactory.create(agent_id="a")
    with store.unit_of_work(write=False) as uow:
        with pytest.raises(ReadOnlyUnitOfWork):
            uow.register_agent("b", "codex")
        with pytest.raises(ReadOnlyUnitOfWork):
            store.update_agent_status("a", "offline")  # joined: read-only too
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work() as inner:
            inner.audit_log("event", "a", "b", "t")
        got = uow.get_agent("a")  # reads still work
        assert got is not None and got.status == "online"
    agent = store.get_agent("a")
    assert agent is not None and agent.status == "online"
    assert [a.agent_id for a in store.list_all_agents()] == ["a"]
    assert store.get_hub_stats()["total_messages"] == 0


def test_a_read_only_unit_of_work_refuses_raw_sql_writes(store: HubStore) -> None:
    with pytest.raises(ReadOnlyUnitOfWork) as caught, store.unit_of_work(write=False) as uow:
        uow.connection.execute(_RAW_INSERT)
    assert caught.value.__cause__ is not None
    assert store.list_all_agents() == []
    store.register_agent("after", "codex")  # the connection went back usable
    assert [a.agent_id for a in store.list_all_agents()] == ["after"]


def test_a_read_only_unit_of_work_refuses_session_writes(store: HubStore) -> None:
    with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as uow:
        uow.session.add(AgentFactory.build(agent_id="orm"))
        uow.session.flush()
    with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as uow:
        uow.session.add(AgentFactory.build(agent_id="orm2"))  # flushed at the exit
    with store.unit_of_work(write=False) as uow:
        assert uow.session.get(Agent, "orm") is None
        assert uow.session.get(Agent, "orm2") is None
    assert store.list_all_agents() == []


# -- 4. the Session ------------------------------------------------------------------


def test_pending_orm_changes_are_flushed_before_a_store_method(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        uow.session.add(AgentFactory.build(agent_id="orm"))
        assert uow.update_agent_status("orm", "offline") is True
        assert store.get_agent("orm") is not None  # a joined store call sees it too
    agent = store.get_agent("orm")
    assert agent is not None and agent.status == "offline"


def test_objects_loaded_through_the_session_read_the_store_writes(store: HubStore) -> None:
    job_id = AssignJobFactory.create(status="queued").job_id
    AgentFactory.create(agent_id="a")
    with store.unit_of_work() as uow:
        job = uow.session.get(AssignJob, job_id)
        agent = uow.session.get(Agent, "a")
        assert job is not None and job.status == "queued"
        assert agent is not None and agent.status == "online"
        uow.update_assign_status(job_id, "running")
        assert job.status == "running"
        store.update_agent_status("a", "offline")  # joined
        assert agent.status == "offline"


def test_returned_instances_are_detached_and_mergeable(store: HubStore) -> None:
    from sqlalchemy.orm.attributes import instance_state

    store.register_agent("a", "codex")
    with store.unit_of_work() as uow:
        agent = uow.get_agent("a")
        job = uow.create_assign("lead", "w", task="t")
    assert agent is not None
    for instance in (agent, job):
        state = instance_state(instance)
        assert state.detached and not state.expired
    assert agent.cli == "codex" and job.task == "t"  # readable after the unit of work
    with store.unit_of_work() as uow:
        merged = uow.session.merge(agent)
        merged.status = "offline"
    got = store.get_agent("a")
    assert got is not None and got.status == "offline"


# -- 5. SQLAlchemy's cursor events ---------------------------------------------------


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

    through: list[str] = []
    real = Connection.exec_driver_sql

    def counting(self: Connection, statement: str, *args: Any, **kwargs: Any) -> Any:
        through.append(statement)
        return real(self, statement, *args, **kwargs)

    monkeypatch.setattr(Connection, "exec_driver_sql", counting)
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
