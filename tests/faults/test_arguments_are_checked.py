"""Every argument of every store method is checked before anything is written, the same on
both dialects: text both can store (no lone surrogate, no U+0000), integers of 64 bits,
ids that are strings of at most 1,000 bytes, JSON no deeper than the limit. A refused
call raises ValidationError (a key given twice: DuplicateKey) and writes nothing; a
value at a limit is taken and reads back equal, of the same type. (Hostile arguments at
random: tests/faults/test_hostile_inputs.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import inspect as sa_inspect

from hubstore import HubStore
from hubstore.errors import DuplicateKey, ValidationError
from hubstore.jsontype import MAX_JSON_DEPTH
from hubstore.models import AssignJob
from hubstore.validation import MAX_KEY_BYTES
from tests.faults.test_hostile_inputs import METHODS, nested, snapshot

# --- one valid call per method, to make hostile one argument at a time ------------


VALID: dict[str, Any] = {
    "agent": "agent-1", "message": "m-1", "job": "j-1", "request": "r-1", "entry": "e-1",
    "team": "team-1", "trace": "tr-1", "correlation": "c-1", "cursor": None,
    "cli": "codex", "agent_status": "online", "msg_type": "event", "msg_status": "queued",
    "assign_status": "queued", "human_kind": "approval", "human_state": "accepted",
    "human_action": "decline", "reflexion_type": "reflexion", "timeout_from": "create",
    "topic": "t.a",
    "topics": ["t.a"], "text": "hello", "opt_text": "x", "opt_id": "id-1",
    "json": {"k": 1}, "object": {"k": 1}, "list": ["x"], "pid": 1, "count": 1,
    "opt_count": 1, "duration": 1_000, "time": None, "opt_time": 1_000, "priority": 5,
    "js_number": 5, "confidence": 0.5, "limit": 10, "bool": True, "reported": "succeeded",
    "statuses": ["queued"], "timeout": 0, "feed_batch": 10,
    "jobs": [{"task": "t"}], "reports": [{"job_id": "j-1", "status": "running"}],
    "attempt": 1, "extend": None, "limit_key": "codex", "opt_count1": 2, "cron": None,
    "every": 60_000, "page_cursor": None,
    "human_answer": "accepted", "reflexion_cursor": None,
    "claimed_job": AssignJob(job_id="j-1", worker_agent="agent-1", attempt=1),
    "callback": None,
}


#: The kinds that are strings a caller gives (ids, keys, text).
TEXT_KINDS = {"agent", "message", "job", "request", "entry", "team", "trace", "correlation",
              "topic", "text", "opt_text", "opt_id", "cli", "agent_status", "msg_type",
              "msg_status", "assign_status", "human_kind", "human_state", "human_action",
              "reflexion_type", "timeout_from", "reported", "limit_key"}


def text_calls() -> list[tuple[str, str]]:
    """(method, argument) for every string argument of every method."""
    return [(name, arg) for name, spec in METHODS.items() for arg, kind in spec.items()
            if kind.removeprefix("?") in TEXT_KINDS and name != "ack_messages"]


def call(store: HubStore, method: str, /, **override: Any) -> Any:
    kwargs = {arg: VALID[kind.removeprefix("?")] for arg, kind in METHODS[method].items()
              if arg != "**" and not arg.startswith("next.")}
    kwargs.update(override)
    value = getattr(store, method)(**kwargs)
    return value.next(timeout_s=0) if method == "message_feed" else value


def tables_of(store: HubStore) -> list[str]:
    return sorted(sa_inspect(store.engine).get_table_names())


def refused(store: HubStore, method: str, match: str, /, **override: Any) -> ValidationError:
    """The call raises ValidationError (message matching) and writes nothing."""
    tables = tables_of(store)
    before = snapshot(store, tables)
    with pytest.raises(ValidationError, match=match) as info:
        call(store, method, **override)
    assert snapshot(store, tables) == before
    return info.value


@pytest.fixture
def seeded(store: HubStore) -> HubStore:
    """A store where the VALID ids name rows, so that updates reach their checks."""
    store.register_agent("agent-1", "codex", topics=["t.a"])
    store.create_assign("lead", "agent-1", job_id="j-1")
    return store


# --- text both dialects can store -------------------------------------------------


def test_every_string_argument_is_checked() -> None:
    methods = {name for name, _ in text_calls()}
    assert len(methods) >= 36  # the issue counted 36 methods a surrogate broke


@pytest.mark.parametrize(("bad", "match"), [
    ("x\ud800y", "surrogate"), ("\udfff", "surrogate"), ("a\x00b", "U\\+0000"),
])
def test_lone_surrogates_and_nul_in_text_are_refused_everywhere(
        seeded: HubStore, bad: str, match: str) -> None:
    """Every string argument of every method, one at a time (enum arguments say which
    values they take instead)."""
    for name, arg in text_calls():
        refused(seeded, name, f"{match}|must be one of", **{arg: bad})


JSON_ARGUMENTS = [
    ("audit_log", "payload"), ("create_assign", "payload"), ("create_assign", "result"),
    ("insert_human_request", "requested_schema"), ("update_human_request", "response"),
    ("answer_human_request", "response"),
    ("register_agent", "capabilities"), ("register_agent", "metadata"),
    ("report_assign_result", "error"), ("add_reflexion", "context"),
    ("save_pipeline_state", "artifacts"), ("update_assign_status", "payload"),
]


@pytest.mark.parametrize("value", [{"k": "a\x00b"}, {"a\x00": 1}, ["\x00"], "\x00",
                                   {"k": "\udc00"}, {"\ud800": 1}])
def test_nul_and_surrogates_in_json_strings_are_refused(seeded: HubStore, value: Any) -> None:
    for name, arg in JSON_ARGUMENTS:
        given = value
        if arg == "capabilities" and not isinstance(value, list):
            given = [value]
        elif arg in ("metadata", "context") and not isinstance(value, dict):
            given = {"v": value}
        refused(seeded, name, "U\\+0000|surrogate", **{arg: given})


def test_find_reflexion_with_nul_is_refused_not_an_sqlite_error(store: HubStore) -> None:
    with pytest.raises(ValidationError, match="U\\+0000"):
        store.find_reflexion("a\x00b")
    with pytest.raises(ValidationError, match="U\\+0000"):
        store.find_reflexion("ab", {"k": "a\x00"})


# --- integers: 64 bits on both ----------------------------------------------------


def test_ttl_of_2_63_is_refused_and_2_62_is_taken(store: HubStore) -> None:
    refused(store, "audit_log", "at most", ttl_ms=2**63)
    refused(store, "audit_log", "at most", ttl_ms=2**62 + 1)
    message = store.audit_log("event", "a", "b", "t", ttl_ms=2**62)
    stored = store.get_message(message.id)
    assert stored is not None and stored.ttl_ms == 2**62
    assert stored.expires_at_ms == stored.created_at_ms + 2**62


def test_counters_and_pids_past_32_bits_are_taken(store: HubStore) -> None:
    job = store.create_assign("lead", "w", max_retries=2**31, retry_count=2**40)
    stored = store.get_assign(job.job_id)
    assert stored is not None
    assert (stored.max_retries, stored.retry_count) == (2**31, 2**40)
    assert type(stored.max_retries) is int
    store.register_agent("p", "codex", pid=2**31)
    store.register_agent("q", "codex", pid=2**63 - 1)
    assert [a.pid for a in (store.get_agent("p"), store.get_agent("q")) if a] == [
        2**31, 2**63 - 1]


@pytest.mark.parametrize(("name", "override"), [
    ("create_assign", {"max_retries": 2**63}), ("create_assign", {"retry_count": 2**64}),
    ("register_agent", {"pid": 2**63}), ("register_agent", {"pid": -(2**63) - 1}),
    ("create_assign", {"deadline_ms": 2**63}), ("save_pipeline_state", {"fix_max": 2**63}),
    ("patch_reflexion", {"hit_count": 2**63}), ("sweep_expired", {"now_ms": 2**63}),
    ("sweep_stale_agents", {"now_ms": 2**62 + 1}), ("prune_messages", {"now_ms": -(2**63)}),
    ("audit_log", {"payload": {"n": 2**63}}), ("create_assign", {"max_retries": 2.7}),
])
def test_integers_outside_64_bits_are_refused(seeded: HubStore, name: str,
                                              override: dict[str, Any]) -> None:
    if name == "patch_reflexion":
        seeded.add_reflexion("p", "m", "s")
    refused(seeded, name, "at most|at least|64-bit|whole number|integer", **override)


# --- keys, ids and types ----------------------------------------------------------


def test_a_job_id_given_twice_is_a_duplicate_key(store: HubStore) -> None:
    store.create_assign("lead", "w", job_id="k")
    tables = tables_of(store)
    before = snapshot(store, tables)
    with pytest.raises(DuplicateKey) as info:
        store.create_assign("lead", "w2", job_id="k")
    assert info.value.__cause__ is not None  # the driver's error, chained
    assert snapshot(store, tables) == before
    job = store.get_assign("k")
    assert job is not None and job.worker_agent == "w"


@pytest.mark.parametrize(("name", "override"), [
    ("get_agent", {"agent_id": ["a"]}), ("get_messages_by_trace", {"trace_id": 5}),
    ("list_assigns", {"statuses": 5}), ("get_message", {"id": {"a": 1}}),
    ("get_assign", {"job_id": b"j"}), ("get_human_request", {"request_id": 1.5}),
    ("get_reflexion", {"id": None}), ("get_pipeline_state", {"team_name": ["t"]}),
    ("get_response_by_correlation", {"correlation_id": 7}),
    ("get_agents_by_topic", {"topic": True}), ("deliver_to_agent", {"agent_id": 3}),
    ("list_assigns", {"worker_agent": 5}), ("list_assigns", {"statuses": "queued"}),
    ("poll_for_agent", {"include_topics": "t.a"}), ("register_agent", {"topics": "t.a"}),
    ("create_assign", {"topic": True}), ("find_reflexion", {"error_pattern": 5}),
])
def test_non_string_ids_are_validation_errors(seeded: HubStore, name: str,
                                              override: dict[str, Any]) -> None:
    refused(seeded, name, "must be", **override)


def test_ids_longer_than_1000_bytes_are_refused_and_found_by_no_getter(
        store: HubStore) -> None:
    long_id = "i" * 10_000
    for name, arg in (("register_agent", "agent_id"), ("create_assign", "job_id"),
                      ("audit_log", "topic"), ("save_pipeline_state", "team_name"),
                      ("audit_log", "trace_id"), ("insert_human_request", "correlation_id")):
        refused(store, name, "1,000", **{arg: long_id})
    assert store.get_agent(long_id) is None
    assert store.get_assign(long_id) is None
    assert store.get_messages_by_trace(long_id) == []
    # At the limit: 1,000 bytes (here 500 two-byte characters) are taken and read back.
    edge = "é" * (MAX_KEY_BYTES // 2)
    store.register_agent(edge, "codex")
    agent = store.get_agent(edge)
    assert agent is not None and agent.agent_id == edge
    refused(store, "register_agent", "1,002 bytes", agent_id=edge + "é")


def test_json_deeper_than_the_limit_is_refused(store: HubStore) -> None:
    refused(store, "audit_log", str(MAX_JSON_DEPTH), payload=nested(1000))
    refused(store, "create_assign", str(MAX_JSON_DEPTH), payload={"a": nested(MAX_JSON_DEPTH)})
    deepest = nested(MAX_JSON_DEPTH)
    message = store.audit_log("event", "a", "b", "t", payload=deepest)
    stored = store.get_message(message.id)
    assert stored is not None and stored.payload == deepest
    job = store.assign_async("lead", "w", payload=deepest)  # the handoff wraps it
    handoff = store.get_message(job.last_message_id or "")
    assert handoff is not None and handoff.payload["payload"] == deepest
