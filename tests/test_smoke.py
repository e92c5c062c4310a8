from tests.factories import AgentFactory, AssignJobFactory, MessageInboxFactory


def test_factories_insert_rows_visible_to_the_store(store):
    AgentFactory.create(agent_id="x", topics=["t.a"])
    job = AssignJobFactory.create(worker_agent="w")
    inbox = MessageInboxFactory.create()
    assert store.get_agent("x").topics == ["t.a"]
    assert store.get_assign(job.job_id).worker_agent == "w"
    assert inbox.delivery_id >= 1
    assert store.get_hub_stats()["active_assign_jobs"] == 1
