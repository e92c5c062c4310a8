"""The factories (hubstore.testing.factories) insert rows the store reads."""

from __future__ import annotations

from hubstore import HubStore
from tests.factories import AgentFactory, AssignJobFactory, MessageInboxFactory


def test_factories_insert_rows_visible_to_the_store(store: HubStore) -> None:
    AgentFactory.create(agent_id="x", topics=["t.a"])
    job = AssignJobFactory.create(worker_agent="w")
    inbox = MessageInboxFactory.create()
    agent = store.get_agent("x")
    assert agent is not None and agent.topics == ["t.a"]
    stored = store.get_assign(job.job_id)
    assert stored is not None and stored.worker_agent == "w"
    assert inbox.delivery_id >= 1
    assert store.get_hub_stats()["active_assign_jobs"] == 1
