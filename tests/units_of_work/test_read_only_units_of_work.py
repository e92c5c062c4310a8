"""Read-only units of work (``unit_of_work(write=False)``) refuse every write, on both
dialects: store calls (joined ones too), raw SQL and the Session's flushes, also as a
block nested in a writing one. Reads still work, and the connection goes back usable.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from hubstore import HubStore
from hubstore.errors import HubStoreError, ReadOnlyUnitOfWork
from hubstore.models import Agent
from hubstore.testing.factories import AgentFactory

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


def test_a_read_only_block_inside_a_writing_one_refuses_every_write(store: HubStore
                                                                    ) -> None:
    with store.unit_of_work() as outer:
        outer.register_agent("before", "codex")
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as inner:
            assert inner.get_agent("before") is not None  # reads see the outer writes
            inner.connection.execute(_RAW_INSERT)
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as inner:
            inner.register_agent("refused", "codex")
        # the outer block writes again, and reads through the store still work
        outer.register_agent("after", "codex")
        assert store.get_agent("after") is not None
    names = sorted(a.agent_id for a in store.list_all_agents())
    assert names == ["after", "before"]


def test_a_session_write_refused_in_a_nested_read_only_block_fails_the_unit_of_work(
        store: HubStore) -> None:
    with pytest.raises(HubStoreError, match="rolled back"), store.unit_of_work() as outer:
        outer.register_agent("before", "codex")
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as inner:
            inner.session.add(AgentFactory.build(agent_id="orm"))
            inner.session.flush()  # a failed flush rolls the whole transaction back
    assert store.list_all_agents() == []
    store.register_agent("later", "codex")  # and the connection is usable again
    assert [a.agent_id for a in store.list_all_agents()] == ["later"]
