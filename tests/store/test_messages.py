"""Messages: the audit log and polling (both dialects)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import inspect

from hubstore import HubStore, ValidationError
from hubstore.models import Message
from tests.factories import AgentFactory, MessageFactory
from tests.helpers import present


def test_audit_log_defaults_and_returned_row(store: HubStore) -> None:
    msg = store.audit_log(type="event", from_agent="a", to_agent="b", topic="t")
    assert msg.priority == 5 and msg.ttl_ms == 300_000 and msg.status == "queued"
    assert msg.expires_at_ms == msg.created_at_ms + 300_000
    assert msg.payload == {}
    assert len(msg.correlation_id) == 36 and len(msg.trace_id) == 36
    assert msg.correlation_id != msg.trace_id
    assert present(store.get_message(msg.id)).to_dict() == msg.to_dict()


def test_enqueue_is_audit_log(store: HubStore) -> None:
    msg = store.enqueue_message("request", "a", "b", "t", priority=9, ttl_ms=10,
                                payload=[1], trace_id="tr", correlation_id="co",
                                status="delivered")
    stored = present(store.get_message(msg.id))
    assert (stored.type, stored.priority, stored.ttl_ms, stored.payload, stored.trace_id,
            stored.correlation_id, stored.status) == (
        "request", 9, 10, [1], "tr", "co", "delivered")


@pytest.mark.parametrize("priority", [0, 10, 5.5, "5", True])
def test_audit_log_refuses_a_bad_priority(store: HubStore, priority: Any) -> None:
    with pytest.raises(ValidationError, match="priority"):
        store.audit_log("event", "a", "b", "t", priority=priority)
    assert store.get_hub_stats()["total_messages"] == 0


def test_audit_log_refuses_unknown_type_and_status(store: HubStore) -> None:
    with pytest.raises(ValidationError, match="type must be one of"):
        store.audit_log("shout", "a", "b", "t")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="status must be one of"):
        store.audit_log("event", "a", "b", "t", status="lost")  # type: ignore[arg-type]


def test_response_by_correlation_is_the_newest_response(store: HubStore) -> None:
    MessageFactory.create(type="response", correlation_id="c", created_at_ms=1, payload={"n": 1})
    MessageFactory.create(type="response", correlation_id="c", created_at_ms=3, payload={"n": 3})
    MessageFactory.create(type="request", correlation_id="c", created_at_ms=9, payload={"n": 9})
    response = store.get_response_by_correlation("c")
    assert response is not None and response.payload == {"n": 3}
    assert store.get_response_by_correlation("none") is None


def test_messages_by_trace_oldest_first(store: HubStore) -> None:
    ids = [MessageFactory.create(trace_id="tr", created_at_ms=t).id for t in (5, 1, 3)]
    MessageFactory.create(trace_id="other")
    assert [m.id for m in store.get_messages_by_trace("tr")] == [ids[1], ids[2], ids[0]]


def test_update_message_status(store: HubStore) -> None:
    msg = MessageFactory.create()
    assert store.update_message_status(msg.id, "acked") is True
    assert present(store.get_message(msg.id)).status == "acked"
    assert store.update_message_status("missing", "acked") is False


def _reference_poll(messages: list[Message], agent: str, topics: list[str],
                    limit: int) -> list[str]:
    """The reference's query, in Python: to the agent, or to a followed topic."""
    hits = [m for m in messages
            if m.to_agent == agent or (m.to_agent.startswith("topic:") and m.topic in topics)]
    hits.sort(key=lambda m: (m.created_at_ms, m.id), reverse=True)
    return [m.id for m in hits[:limit]]


def test_poll_returns_direct_and_topic_messages_newest_first(store: HubStore) -> None:
    AgentFactory.create(agent_id="me", topics=["t.a", "t.b"])
    rows: list[Message] = []
    for i in range(60):
        kind = i % 5
        to_agent, topic = [("me", "direct"), ("topic:t.a", "t.a"), ("topic:t.c", "t.c"),
                           ("other", "t.a"), ("TOPIC:t.b", "t.b")][kind]
        rows.append(MessageFactory.create(to_agent=to_agent, topic=topic,
                                          created_at_ms=1000 + i // 2))
    got = [m.id for m in store.poll_for_agent("me")]
    assert got == _reference_poll(rows, "me", ["t.a", "t.b"], 20)
    assert len(got) == 20
    only_c = [m.id for m in store.poll_for_agent("me", max_messages=100, include_topics=["t.c"])]
    assert only_c == _reference_poll(rows, "me", ["t.c"], 100)
    assert [m.id for m in store.get_audit_messages_for_agent("me", 7)] == got[:7]


def test_poll_without_topics_is_direct_only(store: HubStore) -> None:
    direct = MessageFactory.create(to_agent="lonely")
    MessageFactory.create(to_agent="topic:t.a", topic="t.a")
    assert [m.id for m in store.poll_for_agent("lonely")] == [direct.id]
    assert store.poll_for_agent("nobody") == []


@pytest.mark.parametrize("given, expected", [
    # JavaScript's Number(): null is 0, "1_000" is NaN, " 12 " is 12, "0x10" is 16.
    (None, 1), ("many", 20), (float("nan"), 20), (0, 1), (-5, 1), (1000, 100), (3.9, 3),
    ("7", 7), ("1_000", 20), (" 12 ", 12), ("0x10", 16), ("1e1", 10), ("", 1),
    ("Infinity", 20), (True, 1), ([5], 20),
])
def test_poll_clamps_the_limit(store: HubStore, given: object, expected: int) -> None:
    for i in range(120):
        MessageFactory.create(to_agent="me", created_at_ms=i)
    assert len(store.poll_for_agent("me", max_messages=given)) == expected


def test_poll_counts_a_message_once_even_if_the_agent_is_named_like_a_topic(
        store: HubStore) -> None:
    msg = MessageFactory.create(to_agent="topic:t.a", topic="t.a")
    assert [m.id for m in store.poll_for_agent("topic:t.a", include_topics=["t.a"])] == [msg.id]


def test_deliver_and_ack_compatibility(store: HubStore) -> None:
    msg = MessageFactory.create()
    assert store.deliver_to_agent(msg.id, "b") is True
    assert store.deliver_to_agent(msg.id, "") is False
    assert store.deliver_to_agent("missing", "b") is False
    assert store.ack_messages("b", [msg.id]) == 0


# --- polling ----------------------------------------------------------------------


@pytest.mark.parametrize("count", [201, 500, 600])
def test_polling_with_hundreds_of_topics(store: HubStore, count: int) -> None:
    topics = [f"t.{i}" for i in range(count)]
    store.register_agent("many", "codex", topics=topics)
    first = store.audit_log("event", "a", "topic:t.0", "t.0")
    last = store.audit_log("event", "a", f"topic:t.{count - 1}", f"t.{count - 1}")
    store.audit_log("event", "a", "topic:other", "other")
    direct = store.audit_log("event", "a", "many", "x")
    assert [m.id for m in store.poll_for_agent("many")] == [direct.id, last.id, first.id]
    assert [m.id for m in store.poll_for_agent("other-agent", 5, topics)] == [
        last.id, first.id]
    feed = store.message_feed("many", cursor="feed1:0")
    assert {m.id for m in feed.next(timeout_s=0)} == {first.id, last.id, direct.id}


def test_polled_messages_are_the_stored_rows_detached(store: HubStore) -> None:
    store.register_agent("w", "codex", topics=["t.a"])
    sent = [store.audit_log("event", "lead", "w", "t.x", payload={"n": n, "f": 1.5})
            for n in range(3)]
    sent.append(store.audit_log("request", "lead", "topic:t.a", "t.a", payload=[1, "x"]))
    polled = store.poll_for_agent("w", 10)
    assert sorted(m.id for m in polled) == sorted(m.id for m in sent)
    for message in polled:
        stored = store.get_message(message.id)
        assert stored is not None and stored.to_dict() == message.to_dict()
        assert inspect(message).detached
    assert {m.id: m.payload for m in polled}[sent[-1].id] == [1, "x"]
