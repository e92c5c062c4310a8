"""Ids the caller chooses (``audit_log(id=)``, ``insert_human_request(request_id=)``):
a call retried after an unknown outcome writes its row once (issue 33, point 3).
The lost answer itself is staged in tests/faults/test_call_bounds.py."""

from __future__ import annotations

import pytest

from hubstore import HubStore
from hubstore.errors import DuplicateKey, ValidationError


def test_a_message_retried_with_its_id_is_recorded_once(store: HubStore) -> None:
    store.register_agent("w1", "codex", topics=["t"])
    first = store.audit_log("request", "lead", "w1", "t", payload={"n": 1}, id="m-1")
    assert (first.id, first.deduplicated) == ("m-1", False)
    again = store.enqueue_message("request", "lead", "w1", "t", payload={"n": 1}, id="m-1")
    assert (again.id, again.deduplicated) == ("m-1", True)
    assert again.created_at_ms == first.created_at_ms
    assert again.correlation_id == first.correlation_id  # the row first written
    assert [m.id for m in store.poll_for_agent("w1")] == ["m-1"]
    assert store.get_hub_stats()["total_messages"] == 1


@pytest.mark.parametrize("change", [
    {"payload": {"n": 2}}, {"to_agent": "w2"}, {"topic": "u"}, {"type": "event"},
])
def test_another_message_under_a_taken_id_is_refused(store: HubStore,
                                                     change: dict[str, object]) -> None:
    store.audit_log("request", "lead", "w1", "t", payload={"n": 1}, id="m-1")
    call = {"type": "request", "from_agent": "lead", "to_agent": "w1", "topic": "t",
            "payload": {"n": 1}, **change}
    with pytest.raises(DuplicateKey, match=f"differs in {next(iter(change))}"):
        store.audit_log(**call, id="m-1")  # type: ignore[arg-type]
    assert store.get_hub_stats()["total_messages"] == 1
    kept = store.get_message("m-1")
    assert kept is not None and (kept.payload, kept.to_agent) == ({"n": 1}, "w1")


def test_a_message_id_joins_the_callers_unit_of_work(store: HubStore) -> None:
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        uow.audit_log("event", "lead", "w1", "t", id="m-1")
        raise RuntimeError("the application fails after it")
    assert store.get_message("m-1") is None  # rolled back with the block
    with store.unit_of_work() as uow:
        uow.audit_log("event", "lead", "w1", "t", id="m-1")
        assert uow.audit_log("event", "lead", "w1", "t", id="m-1").deduplicated
    assert store.get_hub_stats()["total_messages"] == 1


@pytest.mark.parametrize("bad", ["", 7, "x" * 5000, "\ud800"])
def test_a_bad_message_id_is_refused(store: HubStore, bad: object) -> None:
    with pytest.raises(ValidationError, match="id"):
        store.audit_log("event", "lead", "w1", "t", id=bad)  # type: ignore[arg-type]
    assert store.get_hub_stats()["total_messages"] == 0


def test_a_human_request_retried_with_its_id_is_recorded_once(store: HubStore) -> None:
    first = store.insert_human_request("lead", "approval", "ship?", {"type": "boolean"},
                                       request_id="ask-1")
    assert (first.request_id, first.deduplicated, first.state) == ("ask-1", False, "pending")
    again = store.insert_human_request("lead", "approval", "ship?", {"type": "boolean"},
                                       request_id="ask-1")
    assert (again.deduplicated, again.deadline_ms) == (True, first.deadline_ms)
    assert [r.request_id for r in store.get_pending_human_requests()] == ["ask-1"]
    with pytest.raises(DuplicateKey, match="differs in prompt"):
        store.insert_human_request("lead", "approval", "deploy?", request_id="ask-1")
    assert store.get_human_request("ask-1").prompt == "ship?"  # type: ignore[union-attr]
