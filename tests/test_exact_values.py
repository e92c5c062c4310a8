"""Issue 10, case by case: one error model and exact values, the same on both dialects.

Each case of the issue is a test here (hostile arguments at random are
tests/test_hostile_inputs.py). Where a value is refused, the test also checks that
nothing was written; where it is taken, that it reads back equal and of the same type.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect as sa_inspect

from hubstore import HubStore
from hubstore.errors import (
    DatabaseBusy,
    DatabaseUnavailable,
    DuplicateKey,
    HubStoreError,
    ValidationError,
)
from hubstore.jsontype import MAX_JSON_DEPTH
from hubstore.reflexion import learn_from_error, lookup_solution, recalc_confidence, report_outcome
from hubstore.validation import MAX_KEY_BYTES, as_number, js_number
from tests.test_hostile_inputs import METHODS, nested, same, snapshot

# --- one valid call per method, to make hostile one argument at a time -------------

VALID: dict[str, Any] = {
    "agent": "agent-1", "message": "m-1", "job": "j-1", "request": "r-1", "entry": "e-1",
    "team": "team-1", "trace": "tr-1", "correlation": "c-1", "cursor": None,
    "cli": "codex", "agent_status": "online", "msg_type": "event", "msg_status": "queued",
    "assign_status": "queued", "human_kind": "approval", "human_state": "accepted",
    "human_action": "decline", "reflexion_type": "reflexion", "topic": "t.a",
    "topics": ["t.a"], "text": "hello", "opt_text": "x", "opt_id": "id-1",
    "json": {"k": 1}, "object": {"k": 1}, "list": ["x"], "pid": 1, "count": 1,
    "opt_count": 1, "duration": 1_000, "time": None, "opt_time": 1_000, "priority": 5,
    "js_number": 5, "confidence": 0.5, "limit": 10, "bool": True, "reported": "succeeded",
    "statuses": ["queued"], "timeout": 0, "feed_batch": 10,
}
#: The kinds that are strings a caller gives (ids, keys, text).
TEXT_KINDS = {"agent", "message", "job", "request", "entry", "team", "trace", "correlation",
              "topic", "text", "opt_text", "opt_id", "cli", "agent_status", "msg_type",
              "msg_status", "assign_status", "human_kind", "human_state", "human_action",
              "reflexion_type", "reported"}


def text_calls() -> list[tuple[str, str]]:
    """(method, argument) for every string argument of every method."""
    return [(name, arg) for name, spec in METHODS.items() for arg, kind in spec.items()
            if kind in TEXT_KINDS and name != "ack_messages"]


def call(store: HubStore, name: str, **override: Any) -> Any:
    kwargs = {arg: VALID[kind] for arg, kind in METHODS[name].items()
              if arg != "**" and not arg.startswith("next.")}
    kwargs.update(override)
    value = getattr(store, name)(**kwargs)
    return value.next(timeout_s=0) if name == "message_feed" else value


def tables_of(store: HubStore) -> list[str]:
    return sorted(sa_inspect(store.engine).get_table_names())


def refused(store: HubStore, name: str, match: str, **override: Any) -> ValidationError:
    """The call raises ValidationError (message matching) and writes nothing."""
    tables = tables_of(store)
    before = snapshot(store, tables)
    with pytest.raises(ValidationError, match=match) as info:
        call(store, name, **override)
    assert snapshot(store, tables) == before
    return info.value


@pytest.fixture
def seeded(store: HubStore) -> HubStore:
    """A store where the VALID ids name rows, so that updates reach their checks."""
    store.register_agent("agent-1", "codex", topics=["t.a"])
    store.create_assign("lead", "agent-1", job_id="j-1")
    return store


# --- text both dialects can store ----------------------------------------------------

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


# --- integers: 64 bits on both --------------------------------------------------------

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


# --- keys, ids and types --------------------------------------------------------------

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


# --- exact values -----------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    {"f": 1e16}, {"f": 1e300}, [1e16, -1e16, 123456789012345678.0], {"f": 1.5e-300},
    {"f": 2.0**70, "i": 2**62, "neg": -(2**63)}, 1e16, [0.1, 1.0, 0, -0.0],
])
def test_floats_stay_floats_and_ints_stay_ints(store: HubStore, value: Any) -> None:
    expected = [0.1, 1.0, 0, 0.0] if value == [0.1, 1.0, 0, -0.0] else value
    message = store.audit_log("event", "a", "b", "t", payload=value)
    job = store.create_assign("lead", "w", payload=value, result=value)
    request = store.insert_human_request("a", "text", "?", requested_schema=value)
    stored_message = store.get_message(message.id)
    stored_job = store.get_assign(job.job_id)
    stored_request = store.get_human_request(request_id=request.request_id)
    assert stored_message is not None and stored_job is not None
    assert stored_request is not None
    for got in (stored_message.payload, stored_job.payload, stored_job.result,
                stored_request.schema):
        assert same(expected, got), got


@pytest.mark.parametrize(("payload", "stored"), [
    ([], []), ({}, {}), (None, {}), (0, {}), ("", {}), (False, {}), ([0], [0]),
    ("x", "x"), (True, True), (1, 1),
])
def test_create_assign_payload_as_the_reference_stores_it(
        store: HubStore, payload: Any, stored: Any) -> None:
    job = store.create_assign("lead", "w", payload=payload)
    again = store.get_assign(job.job_id)
    assert again is not None and same(stored, again.payload) and same(stored, job.payload)


def test_audit_log_payload_none_is_an_empty_object_and_a_list_stays(store: HubStore) -> None:
    for payload, stored in ((None, {}), ([], []), (False, False), (0, 0)):
        message = store.audit_log("event", "a", "b", "t", payload=payload)
        again = store.get_message(message.id)
        assert again is not None and same(stored, again.payload)


# --- JavaScript's Number() -----------------------------------------------------------------

@pytest.mark.parametrize(("value", "number"), [
    ("12", 12.0), (" 12 ", 12.0), ("\t\n12\u00a0", 12.0), ("-1.5", -1.5), (".5", 0.5),
    ("5.", 5.0), ("1e3", 1000.0), ("+2E-3", 0.002), ("0x1F", 31.0), ("0X1f", 31.0),
    ("0o17", 15.0), ("0b101", 5.0), ("", 0.0), ("   ", 0.0), (None, 0.0), (True, 1.0),
    (False, 0.0), (7, 7.0), (2.5, 2.5), ("Infinity", math.inf), ("-Infinity", -math.inf),
    (10**400, math.inf),
])
def test_js_number_of_numbers(value: object, number: float) -> None:
    assert js_number(value) == number


@pytest.mark.parametrize("value", [
    "1_000", "12px", "0x", "-0x10", "+0x10", "inf", "nan", "NaN", "infinity", "1e", "e3",
    "1,5", "٣", "0x1G", "--1", [], [5], {}, b"5", object(),
])
def test_js_number_of_non_numbers_is_nan(value: object) -> None:
    assert math.isnan(js_number(value))
    assert as_number(value) is None


def test_number_arguments_follow_number_semantics(store: HubStore) -> None:
    for i in range(30):
        store.audit_log("event", "a", "poller", "t", payload={"i": i})
    assert len(store.poll_for_agent("poller", "1_000")) == 20  # NaN: the default
    assert len(store.poll_for_agent("poller", "0x10")) == 16
    assert len(store.poll_for_agent("poller", " 7 ")) == 7
    assert len(store.poll_for_agent("poller", None)) == 1  # Number(null) is 0: at least 1
    assert len(store.poll_for_agent("poller", "")) == 1  # Number("") is 0
    assert len(store.poll_for_agent("poller", [])) == 20
    job = store.create_assign("lead", "w", priority="7", timeout_ms="1_000", ttl_ms="0x10")
    assert job.priority == 7
    assert job.timeout_ms == 600_000  # NaN: the default
    assert job.ttl_ms == 1_000  # clamped to at least 1 s, as the reference does
    with pytest.raises(ValidationError, match="whole number"):
        store.create_assign("lead", "w", attempt=2.7)  # type: ignore[arg-type]
    assert store.create_assign("lead", "w", attempt="3").attempt == 3  # type: ignore[arg-type]


# --- many topics -----------------------------------------------------------------------------

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


# --- URLs --------------------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "postgresql+psycopg2://postgres@127.0.0.1/test",
    "postgresql+asyncpg://postgres@127.0.0.1/test",
    "sqlite+aiosqlite:///{dir}/hub.db", "mysql://u@h/db", "sqlite+pysqlcipher:///{dir}/x.db",
])
def test_unsupported_drivers_are_refused_with_the_supported_forms(
        tmp_path: Path, url: str) -> None:
    with pytest.raises(ValidationError, match="postgresql://USER@HOST:PORT/DB") as info:
        HubStore.open(url.format(dir=tmp_path), auto_migrate=True)
    assert "sqlite:///PATH" in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("url", "match"), [
    ("", "empty"), ("   ", "empty"), ("sqlite://", "in-memory"),
    ("sqlite:///:memory:", "in-memory"), ("sqlite:///file:x?mode=memory&uri=true", "in-memory"),
    ("sqlite:///file::memory:?uri=true", "in-memory"),
    ("postgresql://postgres@127.0.0.1:99999/test", "99999"),
    ("postgresql://postgres@127.0.0.1:0/test", "between 1 and 65535"),
    ("postgresql://postgres@127.0.0.1:abc/test", "cannot read"), ("not a url", "cannot read"),
    ("sqlite:///x\x00.db", "U\\+0000"), ("sqlite:///x\ud800.db", "surrogate"),
])
def test_bad_urls_are_validation_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        url: str, match: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match=match):
        HubStore.open(url, auto_migrate=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options", [{"busy_timeout_ms": "x"}, {"busy_timeout_ms": 2**70},
                                     {"no_such_option": 1}, {"connect_args": 5}])
def test_bad_open_arguments_are_validation_errors(tmp_path: Path,
                                                  options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HubStore.open(f"sqlite:///{tmp_path}/hub.db", auto_migrate=True, **options)


def test_tilde_is_expanded_and_nothing_is_half_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(HubStoreError, match="no hubstore revision"):
        HubStore.open("sqlite:///~/hub.db")  # not migrated: refused, nothing created
    assert list(tmp_path.iterdir()) == []
    with HubStore.open("sqlite:///~/hub.db", auto_migrate=True) as hub:
        hub.register_agent("a", "codex")
        assert hub.url.database == str(tmp_path / "hub.db")
    assert (tmp_path / "hub.db").stat().st_size > 0
    assert not (tmp_path / "~").exists()


def test_a_file_that_cannot_be_created_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DatabaseUnavailable):
        HubStore.open(f"sqlite:///{blocker}/hub.db", auto_migrate=True)


# --- SQLite failures with the reason -----------------------------------------------------

@pytest.fixture
def sqlite_store(tmp_path: Path, sqlite_template: Path) -> Iterator[HubStore]:
    """A migrated SQLite file of this test's own (these are a file's own failures)."""
    path = tmp_path / "hub.db"
    shutil.copyfile(sqlite_template, path)
    with HubStore.open(f"sqlite:///{path}") as hub:
        yield hub


def test_a_read_only_file_is_unavailable_with_the_reason(sqlite_store: HubStore) -> None:
    sqlite_store.audit_log("event", "a", "b", "t")
    path = sqlite_store.url.database
    with HubStore.open(f"sqlite:///file:{path}?mode=ro&uri=true") as read_only:
        assert read_only.get_hub_stats()["total_messages"] == 1
        with pytest.raises(DatabaseUnavailable, match="read-only") as info:
            read_only.audit_log("event", "a", "b", "t")
        assert isinstance(_root(info.value), sqlite3.Error)
    assert sqlite_store.get_hub_stats()["total_messages"] == 1


def test_a_full_disk_is_unavailable_with_the_reason(sqlite_store: HubStore) -> None:
    # SQLite's own SQLITE_FULL: the store's connection may not grow the file further.
    with sqlite_store.unit_of_work() as uow:
        pages = uow.connection.exec_driver_sql("PRAGMA page_count").scalar()
        uow.connection.exec_driver_sql(f"PRAGMA max_page_count = {pages}")
    tables = tables_of(sqlite_store)
    before = snapshot(sqlite_store, tables)
    with pytest.raises(DatabaseUnavailable, match="full") as info:
        sqlite_store.audit_log("event", "a", "b", "t", payload={"x": "y" * 200_000})
    assert isinstance(_root(info.value), sqlite3.Error)
    assert snapshot(sqlite_store, tables) == before


def test_a_lock_held_past_the_busy_timeout_is_busy(sqlite_store: HubStore) -> None:
    path = sqlite_store.url.database
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with HubStore.open(sqlite_store.url, busy_timeout_ms=200) as other:
            started = time.monotonic()
            with pytest.raises(DatabaseBusy, match=r"busy timeout|locked") as info:
                other.audit_log("event", "a", "b", "t")
            assert time.monotonic() - started < 5
            assert isinstance(_root(info.value), sqlite3.Error | TimeoutError) or \
                info.value.__cause__ is not None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sqlite_store.get_hub_stats()["total_messages"] == 0


def _root(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


# --- API.md's names -------------------------------------------------------------------------

def test_human_request_methods_take_request_id_by_keyword(store: HubStore) -> None:
    request = store.insert_human_request(requester_agent="a", kind="approval", prompt="ok?")
    found = store.get_human_request(request_id=request.request_id)
    assert found is not None and found.state == "pending"
    assert store.update_human_request(request_id=request.request_id, state="accepted",
                                      response={"ok": True}) is True
    again = store.get_human_request(request_id=request.request_id)
    assert again is not None and (again.state, again.response) == ("accepted", {"ok": True})
    assert store.update_human_request(request_id="missing", state="declined") is False


# --- hubstore.reflexion helpers --------------------------------------------------------------

@pytest.mark.parametrize("entry", [{"hit_count": "5"}, {"hit_count": 5, "success_count": []},
                                   {"hit_count": [1]}, {"success_count": "1", "hit_count": 2}])
def test_recalc_confidence_refuses_non_numbers(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="must be a number"):
        recalc_confidence(entry)


def test_recalc_confidence_of_huge_and_odd_numbers() -> None:
    assert recalc_confidence({"hit_count": math.nan}) == 0.5
    assert recalc_confidence({"hit_count": True, "success_count": True}) == pytest.approx(0.55)
    assert recalc_confidence({"hit_count": 10**400, "success_count": 1}) == 0.0


def test_reflexion_helpers_raise_only_hubstore_errors(store: HubStore) -> None:
    assert lookup_solution(store, 5).found is False  # no pattern: nothing to look up
    assert learn_from_error(store, ["not", "text"], "fix") is None  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        lookup_solution(store, "TypeError: x", context=5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        learn_from_error(store, "TypeError: x", ["fix"])  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        report_outcome(store, 5, True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="surrogate"):
        learn_from_error(store, "TypeError: \ud800", "fix")
    assert store.list_reflexion() == []
