"""Agents: registration, leases, topics, sweeps (both dialects)."""

from __future__ import annotations

from typing import Any

import pytest

from hubstore import HubStore, Lease, ValidationError
from hubstore.ids import now_ms
from tests.factories import AgentFactory
from tests.helpers import present


def test_register_creates_an_online_agent_with_a_lease(store: HubStore) -> None:
    before = now_ms()
    lease = store.register_agent("codex-1", "codex", pid=42, capabilities=["code"],
                                 topics=["t.a"], heartbeat_ttl_ms=10_000,
                                 metadata={"host": "box", "ключ": "значение"})
    assert isinstance(lease, Lease)
    assert lease.lease_id is not None
    assert lease.agent_id == "codex-1" and len(lease.lease_id) == 36
    assert lease.lease_expires_ms == lease.server_time_ms + 10_000
    assert lease.server_time_ms >= before
    agent = present(store.get_agent("codex-1"))
    assert agent.to_dict() == {
        "agent_id": "codex-1", "cli": "codex", "pid": 42, "capabilities": ["code"],
        "topics": ["t.a"], "last_seen_ms": lease.server_time_ms,
        "lease_expires_ms": lease.lease_expires_ms, "status": "online",
        "metadata": {"host": "box", "ключ": "значение"},
    }


def test_register_again_replaces_the_row(store: HubStore) -> None:
    store.register_agent("a", "codex", topics=["x"], metadata={"v": 1})
    store.update_agent_status("a", "offline")
    store.register_agent("a", "gemini")
    agent = present(store.get_agent("a"))
    assert (agent.cli, agent.status, agent.topics, agent.meta) == ("gemini", "online", [], {})
    assert len(store.list_all_agents()) == 1


def test_refresh_lease_moves_the_lease_and_revives(store: HubStore) -> None:
    AgentFactory.create(agent_id="a", status="stale", lease_expires_ms=1, last_seen_ms=1)
    lease = store.refresh_lease("a", ttl_ms=5_000)
    assert lease.lease_id is None
    agent = present(store.get_agent("a"))
    assert agent.status == "online"
    assert agent.lease_expires_ms == lease.lease_expires_ms == lease.server_time_ms + 5_000


@pytest.mark.parametrize("status", ["online", "stale", "offline"])
def test_refresh_lease_from_every_status(store: HubStore, status: str) -> None:
    """An online agent's heartbeat skips the status column; a stale or offline one is
    revived all the same, and its other columns are left alone."""
    AgentFactory.create(agent_id="a", status=status, lease_expires_ms=1, last_seen_ms=1,
                        topics=["t.keep"])
    AgentFactory.create(agent_id="b", status=status, lease_expires_ms=1, last_seen_ms=1)
    lease = store.refresh_lease("a", ttl_ms=7_000)
    agent = present(store.get_agent("a"))
    assert (agent.status, agent.topics) == ("online", ["t.keep"])
    assert agent.last_seen_ms == lease.server_time_ms
    assert agent.lease_expires_ms == lease.server_time_ms + 7_000
    other = present(store.get_agent("b"))  # only the named agent moved
    assert (other.status, other.last_seen_ms, other.lease_expires_ms) == (status, 1, 1)


def test_refresh_lease_of_an_unknown_agent_creates_nothing(store: HubStore) -> None:
    lease = store.refresh_lease("ghost", ttl_ms=1_000)
    assert lease.agent_id == "ghost"
    assert store.get_agent("ghost") is None and store.list_all_agents() == []


def test_update_topics_and_status_report_whether_a_row_changed(store: HubStore) -> None:
    AgentFactory.create(agent_id="a", topics=["old"])
    assert store.update_agent_topics("a", ["t.1", "t.2"]) is True
    assert present(store.get_agent("a")).topics == ["t.1", "t.2"]
    assert store.update_agent_topics("missing", ["t"]) is False
    assert store.update_agent_status("a", "stale") is True
    assert present(store.get_agent("a")).status == "stale"
    assert store.update_agent_status("missing", "stale") is False


def test_listing_by_status_and_topic(store: HubStore, backend: str) -> None:
    AgentFactory.create(agent_id="on", topics=["t.a", "t.b"])
    AgentFactory.create(agent_id="stale", status="stale", topics=["t.a"])
    AgentFactory.create(agent_id="off", status="offline", topics=["t.a"])
    AgentFactory.create(agent_id="other", topics=["t.c"])
    # Insertion order on SQLite (as the reference's rowid order), the key elsewhere.

    def order(ids: list[str]) -> list[str]:
        return ids if backend == "sqlite" else sorted(ids)

    assert [a.agent_id for a in store.list_all_agents()] == order(["on", "stale", "off", "other"])
    assert [a.agent_id for a in store.list_online_agents()] == order(["on", "stale", "other"])
    assert [a.agent_id for a in store.get_agents_by_topic("t.a")] == order(["on", "stale"])
    assert store.get_agents_by_topic("t.zzz") == []
    assert store.deliver_to_topic("any-message", "t.a") == 2


def test_sweep_stale_agents_at_a_chosen_time(store: HubStore) -> None:
    now = 10_000_000
    AgentFactory.create(agent_id="fresh", lease_expires_ms=now + 1)
    AgentFactory.create(agent_id="lapsed", lease_expires_ms=now - 1)
    AgentFactory.create(agent_id="long-stale", status="stale", lease_expires_ms=now - 300_001)
    AgentFactory.create(agent_id="recent-stale", status="stale", lease_expires_ms=now - 300_000)
    assert store.sweep_stale_agents(now_ms=now) == {"stale": 1, "offline": 1}
    status = {a.agent_id: a.status for a in store.list_all_agents()}
    assert status == {"fresh": "online", "lapsed": "stale", "long-stale": "offline",
                      "recent-stale": "stale"}


@pytest.mark.parametrize("kwargs, fragment", [
    ({"agent_id": "", "cli": "codex"}, "agent_id"),
    ({"agent_id": 5, "cli": "codex"}, "agent_id"),
    ({"agent_id": "a", "cli": "gpt"}, "cli must be one of"),
    ({"agent_id": "a", "cli": "codex", "topics": "t.a"}, "topics"),
    ({"agent_id": "a", "cli": "codex", "metadata": {1: "x"}}, "keys must be strings"),
    ({"agent_id": "a", "cli": "codex", "capabilities": [float("nan")]}, "not valid JSON"),
])
def test_register_refuses_bad_input_and_writes_nothing(store: HubStore, kwargs: dict[str, Any],
                                                       fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        store.register_agent(**kwargs)
    assert store.list_all_agents() == []


def test_update_status_refuses_unknown_status(store: HubStore) -> None:
    AgentFactory.create(agent_id="a")
    with pytest.raises(ValidationError) as info:
        store.update_agent_status("a", "asleep")  # type: ignore[arg-type]
    assert info.value.code == "VALIDATION"
    assert present(store.get_agent("a")).status == "online"
