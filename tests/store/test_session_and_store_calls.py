"""A unit of work's ORM Session and its store calls share one transaction, on both
dialects: pending ORM changes are flushed before a store call, objects loaded through
the Session see the store's writes, and the instances the store returns are detached,
readable afterwards and mergeable.
"""

from __future__ import annotations

from hubstore import HubStore
from hubstore.models import Agent, AssignJob
from hubstore.testing.factories import AgentFactory, AssignJobFactory


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
