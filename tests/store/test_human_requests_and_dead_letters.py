"""Human requests and dead letters (both dialects)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore, ValidationError
from hubstore.ids import now_ms
from tests.factories import DeadLetterFactory, HumanRequestFactory, MessageFactory
from tests.helpers import present


def test_insert_human_request_stores_an_absolute_deadline(store: HubStore) -> None:
    before = now_ms()
    req = store.insert_human_request("codex-1", "choice", "A or B?",
                                     requested_schema={"enum": ["A", "B"]}, deadline_ms=60_000,
                                     default_action="timeout_continue", trace_id="tr")
    after = now_ms()
    assert before + 60_000 <= req.deadline_ms <= after + 60_000
    stored = present(store.get_human_request(req.request_id))
    assert stored.to_dict() == {
        "request_id": req.request_id, "requester_agent": "codex-1", "kind": "choice",
        "prompt": "A or B?", "schema": {"enum": ["A", "B"]}, "state": "pending",
        "deadline_ms": req.deadline_ms, "default_action": "timeout_continue",
        "correlation_id": req.correlation_id, "trace_id": "tr", "response": None,
    }


@pytest.mark.parametrize("response", [{"token": "s3cr3t"}, 0, "", False, [], None, "yes"])
def test_update_human_request_keeps_the_response_as_given(store: HubStore,
                                                          response: object) -> None:
    req = HumanRequestFactory.create()
    assert store.update_human_request(req.request_id, "accepted", response) is True
    stored = present(store.get_human_request(req.request_id))
    assert stored.state == "accepted"
    assert stored.response == response and type(stored.response) is type(response)


def test_update_missing_request_and_bad_state(store: HubStore) -> None:
    assert store.update_human_request("missing", "accepted") is False
    req = HumanRequestFactory.create()
    with pytest.raises(ValidationError, match="state"):
        store.update_human_request(req.request_id, "maybe")  # type: ignore[arg-type]
    assert present(store.get_human_request(req.request_id)).state == "pending"


def test_pending_and_expiry(store: HubStore) -> None:
    now = 50_000_000
    overdue = HumanRequestFactory.create(deadline_ms=now - 1)
    due_now = HumanRequestFactory.create(deadline_ms=now)
    HumanRequestFactory.create(state="accepted", deadline_ms=now - 1)
    assert {r.request_id for r in store.get_pending_human_requests()} == {
        overdue.request_id, due_now.request_id}
    assert store.expire_human_requests(now_ms=now) == 1
    assert present(store.get_human_request(overdue.request_id)).state == "timed_out"
    assert [r.request_id for r in store.get_pending_human_requests()] == [due_now.request_id]


def test_insert_refuses_bad_kind(store: HubStore) -> None:
    with pytest.raises(ValidationError, match="kind"):
        store.insert_human_request("a", "poem", "?", deadline_ms=1000)  # type: ignore[arg-type]
    assert store.get_pending_human_requests() == []


def test_move_to_dead_letter_marks_and_replaces(store: HubStore) -> None:
    msg = MessageFactory.create()
    assert store.move_to_dead_letter(msg.id, "boom", "trace") is True
    assert present(store.get_message(msg.id)).status == "dead_letter"
    assert store.move_to_dead_letter(msg.id, "again") is True
    letters = store.get_dead_letters()
    assert [(d.message_id, d.reason, d.last_error) for d in letters] == [(msg.id, "again", None)]
    assert store.get_queue_depths()["dlq"] == 1


def test_dead_letters_newest_first_with_limit(store: HubStore) -> None:
    ids = [DeadLetterFactory.create(failed_at_ms=t).message_id for t in (10, 30, 20)]
    assert [d.message_id for d in store.get_dead_letters()] == [ids[1], ids[2], ids[0]]
    assert [d.message_id for d in store.get_dead_letters(limit=1)] == [ids[1]]
    assert store.get_dead_letters(limit=0) == []


def test_requeue_dead_letter_queues_the_message_again_with_a_fresh_expiry(
        store: HubStore) -> None:
    now = 90_000_000
    expired = MessageFactory.create(expires_at_ms=now - 1, ttl_ms=60_000, to_agent="w")
    kept = MessageFactory.create(expires_at_ms=now - 1)
    assert store.sweep_expired(now_ms=now)["messages"] == 2
    assert store.get_queue_depths()["dlq"] == 2
    before = now_ms()
    assert store.requeue_dead_letter(expired.id) is True
    again = present(store.get_message(expired.id))
    assert again.status == "queued" and again.expires_at_ms >= before + 60_000
    assert [d.message_id for d in store.get_dead_letters()] == [kept.id]
    assert store.get_queue_depths()["dlq"] == 1
    assert store.sweep_expired()["messages"] == 0  # not straight back to the dead letters
    assert store.requeue_dead_letter(expired.id) is False  # no dead letter any more
    assert store.requeue_dead_letter("missing") is False


def test_discard_dead_letter_removes_it_and_keeps_the_message(store: HubStore) -> None:
    msg = MessageFactory.create()
    store.move_to_dead_letter(msg.id, "boom")
    assert store.discard_dead_letter(msg.id) is True
    assert store.get_dead_letters() == []
    assert present(store.get_message(msg.id)).status == "dead_letter"
    assert store.get_queue_depths()["dlq"] == 0
    assert store.discard_dead_letter(msg.id) is False
    with pytest.raises(ValidationError, match="message_id"):
        store.discard_dead_letter("")


def test_sweep_expired_dead_letters_queued_messages_and_times_out_requests(store: HubStore) -> None:
    now = 90_000_000
    expired = MessageFactory.create(expires_at_ms=now - 1)
    MessageFactory.create(expires_at_ms=now - 1, status="acked")
    fresh = MessageFactory.create(expires_at_ms=now + 1)
    HumanRequestFactory.create(deadline_ms=now - 5)
    assert store.sweep_expired(now_ms=now) == {"messages": 1, "human_requests": 1}
    assert present(store.get_message(expired.id)).status == "dead_letter"
    assert present(store.get_message(fresh.id)).status == "queued"
    [letter] = store.get_dead_letters()
    assert (letter.message_id, letter.reason, letter.failed_at_ms) == (expired.id, "ttl_expired",
                                                                      now)
    assert store.sweep_expired(now_ms=now) == {"messages": 0, "human_requests": 0}


def test_human_request_methods_take_request_id_by_keyword(store: HubStore) -> None:
    request = store.insert_human_request(requester_agent="a", kind="approval", prompt="ok?")
    found = store.get_human_request(request_id=request.request_id)
    assert found is not None and found.state == "pending"
    assert store.update_human_request(request_id=request.request_id, state="accepted",
                                      response={"ok": True}) is True
    again = store.get_human_request(request_id=request.request_id)
    assert again is not None and (again.state, again.response) == ("accepted", {"ok": True})
    assert store.update_human_request(request_id="missing", state="declined") is False


def test_answer_human_request_answers_a_pending_request_once(store: HubStore) -> None:
    req = HumanRequestFactory.create()
    answered = present(store.answer_human_request(req.request_id, "accepted", {"text": "yes"}))
    assert (answered.state, answered.response) == ("accepted", {"text": "yes"})
    assert answered.to_dict() == present(store.get_human_request(req.request_id)).to_dict()
    assert store.answer_human_request(req.request_id, "declined") is None  # kept as it was
    stored = present(store.get_human_request(req.request_id))
    assert (stored.state, stored.response) == ("accepted", {"text": "yes"})
    assert store.answer_human_request("missing", "accepted") is None
    expired = HumanRequestFactory.create(deadline_ms=now_ms() - 1)
    store.expire_human_requests()
    assert store.answer_human_request(expired.request_id, "accepted") is None
    assert store.update_human_request(req.request_id, "declined") is True  # the reference's


@pytest.mark.parametrize(("state", "response"), [("pending", None), ("maybe", None),
                                                 ("accepted", float("nan"))])
def test_answer_human_request_refuses_a_bad_answer(store: HubStore, state: str,
                                                   response: object) -> None:
    req = HumanRequestFactory.create()
    with pytest.raises(ValidationError, match=r"state|response"):
        store.answer_human_request(req.request_id, state, response)  # type: ignore[arg-type]
    assert present(store.get_human_request(req.request_id)).state == "pending"


def test_of_answers_made_at_once_exactly_one_is_kept(store: HubStore, db_url: URL) -> None:
    """Eight operators, each with a store of its own, answer the same requests at once."""
    answerers = 8
    requests = [HumanRequestFactory.create().request_id for _ in range(5)]
    start = threading.Barrier(answerers)

    def answer(k: int) -> list[bool]:
        with HubStore.open(db_url) as mine:
            mine.get_human_request(requests[0])  # connected before the start
            kept = []
            for request_id in requests:
                start.wait(timeout=30)
                kept.append(mine.answer_human_request(
                    request_id, "accepted", {"text": f"operator {k}"}) is not None)
            return kept

    with ThreadPoolExecutor(answerers) as pool:
        results = list(pool.map(answer, range(answerers)))
    for i, request_id in enumerate(requests):
        winners = [k for k in range(answerers) if results[k][i]]
        assert len(winners) == 1, (request_id, winners)
        stored = present(store.get_human_request(request_id))
        assert stored.response == {"text": f"operator {winners[0]}"}
