"""Assign jobs on both dialects: the store-level methods and the hub's rules.

Every test runs on SQLite and on PostgreSQL (the ``store`` fixture), each on a
database of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import pytest
from sqlalchemy import text

from hubstore import HubStore
from hubstore.errors import (
    AssignNotFound,
    HubStoreError,
    IllegalTransition,
    RetryExhausted,
    StaleAttempt,
    ValidationError,
    WorkerMismatch,
)
from hubstore.ids import now_ms
from hubstore.models import AssignJob, Message
from hubstore.services.assigns.moves import move
from hubstore.services.assigns.rows import ConcurrentUpdate, lock_job
from hubstore.types import AssignEvent, AssignStatus
from tests.factories import AssignJobFactory
from tests.helpers import Heard

TIMED_OUT_ERROR = {"message": "assign job timed out"}
SNAPSHOT_KEYS = {
    "job_id", "supervisor_agent", "worker_agent", "topic", "task", "status", "attempt",
    "retry_count", "max_retries", "timeout_ms", "deadline_ms", "trace_id", "correlation_id",
    "last_message_id", "result", "error", "updated_at_ms", "completed_at_ms",
}


def statuses(heard: Heard) -> list[tuple[str, str, int]]:
    """(job_id, status, attempt of the row handed over) for each event."""
    return [(event["job_id"], event["status"], job.attempt) for event, job in heard]


def row(store: HubStore, job_id: str) -> dict[str, Any]:
    job = store.get_assign(job_id)
    assert job is not None
    return job.to_dict()


def trace(store: HubStore, job: AssignJob) -> list[Message]:
    return store.get_messages_by_trace(job.trace_id)


def handoffs(store: HubStore, job: AssignJob) -> list[Message]:
    return [m for m in trace(store, job) if m.type == "handoff"]


def events(store: HubStore, job: AssignJob, name: str | None = None) -> list[Message]:
    return [m for m in trace(store, job)
            if m.type == "event" and (name is None or m.payload["event"] == name)]


def running_job(store: HubStore, **fields: Any) -> AssignJob:
    """A dispatched job, claimed by its worker w1."""
    job = store.assign_async("lead", "w1", task="t", **fields)
    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.job_id == job.job_id
    return claimed


# --- create / get --------------------------------------------------------------------

def test_create_applies_the_reference_defaults(store: HubStore, heard: Heard) -> None:
    before = now_ms()
    job = store.create_assign("lead", "w1")
    after = now_ms()
    assert (job.topic, job.task, job.payload, job.status) == ("assign.job", "", {}, "queued")
    assert (job.attempt, job.retry_count, job.max_retries, job.priority) == (1, 0, 0, 5)
    assert (job.ttl_ms, job.timeout_ms) == (600_000, 600_000)
    assert job.deadline_ms is not None
    assert before + 600_000 <= job.deadline_ms <= after + 600_000
    assert before <= job.created_at_ms == job.updated_at_ms <= after
    assert job.started_at_ms is job.completed_at_ms is job.last_retry_at_ms is None
    assert job.result is None and job.error is None and job.last_message_id is None
    assert job.trace_id and job.correlation_id and job.trace_id != job.correlation_id
    assert row(store, job.job_id) == job.to_dict()
    assert statuses(heard) == [(job.job_id, "queued", 1)]
    assert heard[0][0]["result"] is None


CLAMPS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"priority": 0}, {"priority": 1}),
    ({"priority": 12}, {"priority": 9}),
    ({"priority": "x"}, {"priority": 5}),
    ({"timeout_ms": 10}, {"timeout_ms": 1_000, "ttl_ms": 600_000}),
    ({"timeout_ms": 10**10}, {"timeout_ms": 86_400_000}),
    ({"timeout_ms": "abc"}, {"timeout_ms": 600_000}),
    ({"timeout_ms": 5_000, "ttl_ms": "abc"}, {"timeout_ms": 5_000, "ttl_ms": 5_000}),
    ({"max_retries": -2, "retry_count": -1, "attempt": 0},
     {"max_retries": 0, "retry_count": 0, "attempt": 1}),
    ({"deadline_ms": 123}, {"deadline_ms": 123}),
]


def test_create_clamps_like_the_reference(store: HubStore) -> None:
    for given, expected in CLAMPS:
        job = store.create_assign("lead", "w1", **given)
        assert {key: getattr(job, key) for key in expected} == expected, given
        assert row(store, job.job_id) == job.to_dict()


def test_create_returns_the_row_as_stored_and_keeps_no_caller_value(
        store: HubStore) -> None:
    """The job handed back is the row as the database holds it, type for type (SQLite
    reads it back from what it bound, PostgreSQL from RETURNING), and it shares no
    object with the caller's arguments."""
    payload: dict[str, Any] = {"f": [1e16, -0.0, 0.5, 2**62], "s": "ü\u2028", "n": None,
                               "t": (1, "two")}
    result: dict[str, Any] = {"ok": True, "items": [{"a": 1}]}
    job = store.create_assign("lead", "w1", payload=payload, result=result, error=["e"],
                              deadline_ms=2**62, priority=8, task="x" * 5_000)
    payload["f"].append("later")
    result["items"][0]["a"] = 2
    stored = store.get_assign(job.job_id)
    assert stored is not None
    for key, value in stored.to_dict().items():
        got = getattr(job, key)
        assert type(got) is type(value) and got == value, key
    assert job.payload == {"f": [1e16, 0.0, 0.5, 2**62], "s": "ü\u2028", "n": None,
                           "t": [1, "two"]}
    assert job.result == {"ok": True, "items": [{"a": 1}]}


def test_create_sets_times_that_match_its_status(store: HubStore) -> None:
    running = store.create_assign("lead", "w1", status="running")
    assert running.started_at_ms == running.created_at_ms
    assert running.completed_at_ms is None
    for terminal in ("succeeded", "failed", "timed_out"):
        job = store.create_assign("lead", "w1", status=terminal)
        assert job.completed_at_ms == job.created_at_ms and job.started_at_ms is None
    retried = store.create_assign("lead", "w1", retry_count=1, max_retries=3)
    assert retried.last_retry_at_ms == retried.created_at_ms


def test_create_refuses_bad_input_and_writes_nothing(store: HubStore, heard: Heard) -> None:
    for bad in ({"worker_agent": ""}, {"supervisor_agent": None}, {"status": "done"},
                {"payload": {"x": float("nan")}}, {"result": {1: "non-string key"}}):
        fields: dict[str, Any] = {"supervisor_agent": "lead", "worker_agent": "w1", **bad}
        with pytest.raises(ValidationError):
            store.create_assign(**fields)
    assert store.list_assigns() == []
    assert heard == []


def test_get_assign_missing_is_none(store: HubStore) -> None:
    assert store.get_assign("no-such-job") is None


# --- update_assign_status ------------------------------------------------------------

def test_update_missing_job_is_none(store: HubStore) -> None:
    assert store.update_assign_status("no-such-job", "running") is None


def test_update_to_running_sets_start_and_deadline(store: HubStore, heard: Heard) -> None:
    job = store.create_assign("lead", "w1", timeout_ms=30_000)
    cleared = AssignJobFactory.create(deadline_ms=None, timeout_ms=30_000)
    before = now_ms()
    moved = store.update_assign_status(cleared.job_id, "running")
    after = now_ms()
    assert moved is not None and moved.status == "running"
    assert moved.started_at_ms is not None
    assert before <= moved.started_at_ms <= after
    assert moved.deadline_ms is not None
    assert before + 30_000 <= moved.deadline_ms <= after + 30_000
    assert before <= moved.updated_at_ms <= after
    # A job that has a deadline keeps it when it starts running.
    kept = store.update_assign_status(job.job_id, "running")
    assert kept is not None and kept.deadline_ms == job.deadline_ms
    assert [(i, s) for i, s, _ in statuses(heard)] == [
        (job.job_id, "queued"), (cleared.job_id, "running"), (job.job_id, "running")]


def test_update_patch_names_fields_and_none_clears_only_clearable(store: HubStore) -> None:
    job = store.create_assign("lead", "w1", task="keep", result={"r": 1}, error="e",
                              last_message_id="m-1")
    moved = store.update_assign_status(job.job_id, "running", task=None, result=None,
                                       error=None, last_message_id=None, priority=8,
                                       payload={"p": [1, 2]}, deadline_ms=None)
    assert moved is not None
    assert moved.task == "keep"
    assert moved.result is None and moved.error is None and moved.last_message_id is None
    assert moved.priority == 8 and moved.payload == {"p": [1, 2]}
    assert moved.deadline_ms is None
    assert row(store, job.job_id) == moved.to_dict()


def test_update_to_terminal_clears_deadline(store: HubStore, heard: Heard) -> None:
    for terminal in ("succeeded", "failed", "timed_out"):
        job = store.create_assign("lead", "w1", status="running")
        before = now_ms()
        done = store.update_assign_status(job.job_id, terminal, result={"ok": 1})
        assert done is not None
        assert done.status == terminal and done.deadline_ms is None
        assert done.completed_at_ms is not None
        assert done.completed_at_ms >= before and done.result == {"ok": 1}
        assert statuses(heard)[-1] == (job.job_id, terminal, 1)
        assert heard[-1][0]["result"] == {"ok": 1}


def test_progress_update_fires_no_listener(store: HubStore, heard: Heard) -> None:
    job = store.create_assign("lead", "w1", status="running")
    heard.clear()
    moved = store.update_assign_status(job.job_id, "running", result={"pct": 50})
    assert moved is not None and moved.result == {"pct": 50}
    assert heard == []


def test_illegal_update_raises_and_changes_nothing(store: HubStore, heard: Heard) -> None:
    for start, target in (("succeeded", "running"), ("succeeded", "failed"),
                          ("succeeded", "queued"), ("failed", "queued"),
                          ("timed_out", "queued"), ("failed", "succeeded"),
                          ("timed_out", "running"), ("running", "queued"),
                          ("queued", "queued")):
        job = AssignJobFactory.create(status=start, result={"kept": True})
        before = row(store, job.job_id)
        with pytest.raises(IllegalTransition) as caught:
            store.update_assign_status(job.job_id, cast(AssignStatus, target),
                                       result={"new": True})
        assert caught.value.code == "ASSIGN_ILLEGAL_TRANSITION"
        assert row(store, job.job_id) == before, (start, target)
    assert heard == []


def test_illegal_update_caught_inside_a_unit_of_work_leaves_the_row(store: HubStore) -> None:
    job = AssignJobFactory.create(status="succeeded")
    before = row(store, job.job_id)
    with store.unit_of_work() as uow:
        with pytest.raises(IllegalTransition):
            uow.update_assign_status(job.job_id, "running")
        uow.update_assign_status(job.job_id, "succeeded")  # a no-op
    assert row(store, job.job_id) == before


def test_repeating_the_terminal_status_is_a_noop(store: HubStore, heard: Heard) -> None:
    for terminal in ("succeeded", "failed", "timed_out"):
        job = AssignJobFactory.create(status="running")
        store.update_assign_status(job.job_id, terminal, result={"first": 1})
        before = row(store, job.job_id)
        heard.clear()
        again = store.update_assign_status(job.job_id, terminal, result={"second": 2})
        assert again is not None and again.to_dict() == before
        assert row(store, job.job_id) == before
        assert heard == []


def test_update_refuses_bad_input_before_writing(store: HubStore) -> None:
    job = AssignJobFactory.create(status="queued")
    before = row(store, job.job_id)
    for status, patch in (("done", {}), ("running", {"statuss": "x"}),
                          ("running", {"deadline_ms": "soon"}),
                          ("running", {"result": float("inf")})):
        with pytest.raises(ValidationError):
            store.update_assign_status(job.job_id, cast(AssignStatus, status), **patch)
    assert row(store, job.job_id) == before


# --- the guarded compare-and-set ------------------------------------------------------

def test_move_is_fenced_by_the_status_and_attempt_it_read(store: HubStore,
                                                          heard: Heard) -> None:
    """A row changed behind the lock (which the lock exists to prevent) is not
    overwritten: the UPDATE names the status and attempt it read."""
    for sneak in ("UPDATE assign_jobs SET status = 'running' WHERE job_id = :id",
                  "UPDATE assign_jobs SET attempt = attempt + 1 WHERE job_id = :id"):
        job = AssignJobFactory.create(status="queued")
        heard.clear()
        with pytest.raises(ConcurrentUpdate), store.transaction() as uow:
            locked = lock_job(uow, job.job_id)
            assert locked is not None
            uow.session.execute(text(sneak), {"id": job.job_id})
            move(uow, locked, "succeeded", {"result": {"lost": "update"}})
        assert row(store, job.job_id)["status"] == "queued", sneak
        assert heard == []


# --- list ------------------------------------------------------------------------------

def test_list_filters_and_orders(store: HubStore) -> None:
    t = now_ms()
    a = AssignJobFactory.create(supervisor_agent="s1", worker_agent="w1", status="queued",
                         deadline_ms=t + 10, updated_at_ms=t - 3, trace_id="tr-1")
    b = AssignJobFactory.create(supervisor_agent="s1", worker_agent="w2", status="running",
                         deadline_ms=t + 20, updated_at_ms=t - 2, correlation_id="co-1")
    c = AssignJobFactory.create(supervisor_agent="s2", worker_agent="w1", status="failed",
                         deadline_ms=None, updated_at_ms=t - 1)

    def ids(**filters: Any) -> list[str]:
        return [job.job_id for job in store.list_assigns(**filters)]

    assert ids() == [c.job_id, b.job_id, a.job_id]
    assert ids(supervisor_agent="s1") == [b.job_id, a.job_id]
    assert ids(worker_agent="w1") == [c.job_id, a.job_id]
    assert ids(status="running") == [b.job_id]
    assert ids(statuses=["queued", "failed"]) == [c.job_id, a.job_id]
    assert ids(trace_id="tr-1") == [a.job_id]
    assert ids(correlation_id="co-1") == [b.job_id]
    assert ids(active_before_ms=t + 10) == [a.job_id]
    assert ids(active_before_ms=t + 20) == [b.job_id, a.job_id]
    assert ids(limit=1) == [c.job_id]
    assert ids(limit=0) == [c.job_id]
    with pytest.raises(ValidationError):
        store.list_assigns(status="done")  # type: ignore[arg-type]


# --- retry_assign ------------------------------------------------------------------------

@pytest.mark.parametrize("terminal", ["failed", "timed_out"])
def test_retry_assign_requeues_for_the_next_attempt(store: HubStore, heard: Heard,
                                                    terminal: str) -> None:
    job = AssignJobFactory.create(status=terminal, attempt=2, retry_count=1, max_retries=0,
                           timeout_ms=40_000, result={"partial": 1}, error={"e": 1},
                           last_message_id="m-9", started_at_ms=5, completed_at_ms=6,
                           deadline_ms=None)
    before = now_ms()
    retried = store.retry_assign(job.job_id)
    after = now_ms()
    assert retried is not None
    assert (retried.status, retried.attempt, retried.retry_count) == ("queued", 3, 2)
    assert retried.deadline_ms is not None
    assert before + 40_000 <= retried.deadline_ms <= after + 40_000
    assert retried.last_retry_at_ms is not None
    assert before <= retried.last_retry_at_ms <= after
    assert retried.started_at_ms is None and retried.completed_at_ms is None
    assert retried.result is None and retried.error == {"e": 1}
    assert retried.last_message_id is None
    assert row(store, job.job_id) == retried.to_dict()
    assert statuses(heard) == [(job.job_id, "queued", 3)]


def test_retry_assign_takes_a_patch(store: HubStore) -> None:
    job = AssignJobFactory.create(status="failed", error="old")
    retried = store.retry_assign(job.job_id, error=None, timeout_ms=2_000)
    assert retried is not None and retried.error is None and retried.timeout_ms == 2_000


def test_retry_assign_enforces_the_table(store: HubStore, heard: Heard) -> None:
    for start in ("queued", "running", "succeeded"):
        job = AssignJobFactory.create(status=start)
        before = row(store, job.job_id)
        with pytest.raises(IllegalTransition):
            store.retry_assign(job.job_id)
        assert row(store, job.job_id) == before, start
    assert heard == []


def test_retry_assign_missing_is_none(store: HubStore) -> None:
    assert store.retry_assign("nope") is None


# --- listeners -------------------------------------------------------------------------

def test_listeners_run_after_commit_and_see_committed_data(store: HubStore) -> None:
    seen: list[str | None] = []

    def listener(event: AssignEvent, job: AssignJob) -> None:
        fresh = store.get_assign(event["job_id"])  # another connection
        seen.append(fresh.status if fresh else None)

    store.on_assign_status_change(listener)
    job = AssignJobFactory.create(status="queued")
    with store.unit_of_work() as uow:
        uow.update_assign_status(job.job_id, "running")
        uow.update_assign_status(job.job_id, "succeeded")
        assert seen == []  # nothing announced inside the transaction
    assert seen == ["succeeded", "succeeded"]


def test_each_listener_gets_the_row_as_of_its_event(store: HubStore, heard: Heard) -> None:
    job = running_job(store, max_retries=1)
    heard.clear()
    store.report_assign_result(job.job_id, "failed", worker_agent="w1", attempt=1,
                               error={"boom": 1})
    assert [(e["status"], j.status, j.attempt) for e, j in heard] == [
        ("failed", "failed", 1), ("queued", "queued", 2)]
    assert heard[0][1].error == {"boom": 1}
    assert heard[0][1].deadline_ms is None and heard[1][1].deadline_ms is not None


def test_rolled_back_unit_of_work_fires_no_listener(store: HubStore, heard: Heard) -> None:
    job = AssignJobFactory.create(status="queued")
    heard.clear()
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        uow.update_assign_status(job.job_id, "running")
        uow.assign_async("lead", "w9")
        uow.report_assign_result(job.job_id, "succeeded", worker_agent="worker")
        raise RuntimeError("roll it back")
    assert heard == []
    assert row(store, job.job_id)["status"] == "queued"
    assert store.list_assigns(worker_agent="w9") == []
    assert trace(store, job) == []


def test_a_failing_listener_is_logged_and_harms_nothing(
        store: HubStore, heard: Heard, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(event: AssignEvent, job: AssignJob) -> None:
        raise ValueError("listener bug")

    after: Heard = []
    store.on_assign_status_change(broken)
    store.on_assign_status_change(lambda event, job: after.append((event, job)))
    # Read at hubstore's own logger (whatever other tests did to the root logger's
    # handlers in this process).
    logged: list[logging.LogRecord] = []

    class Catcher(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record)

    catcher = Catcher(logging.ERROR)
    # Other tests in this process may have run a logging configuration that disables
    # or quiets the loggers that existed then (logging.config's default): the logger
    # that announces is made live again for this test.
    for name in ("hubstore", "hubstore.transaction"):
        live = logging.getLogger(name)
        monkeypatch.setattr(live, "disabled", False)
        monkeypatch.setattr(live, "propagate", True)
        monkeypatch.setattr(live, "level", logging.NOTSET)
    logger = logging.getLogger("hubstore")
    logger.addHandler(catcher)
    try:
        job = store.assign_async("lead", "w1")
    finally:
        logger.removeHandler(catcher)
    assert row(store, job.job_id)["last_message_id"] == job.last_message_id
    assert len(handoffs(store, job)) == 1
    assert statuses(heard) == statuses(after) == [(job.job_id, "queued", 1)]
    failures = [r for r in logged if r.exc_info and r.exc_info[0] is ValueError]
    assert len(failures) == 1
    assert "listener" in failures[0].getMessage()


def test_unsubscribe_stops_events(store: HubStore) -> None:
    got: Heard = []
    unsubscribe = store.on_assign_status_change(lambda e, j: got.append((e, j)))
    store.create_assign("lead", "w1")
    unsubscribe()
    unsubscribe()  # twice is harmless
    store.create_assign("lead", "w1")
    assert len(got) == 1


# --- assign_async ------------------------------------------------------------------------

def test_assign_async_records_the_handoff_in_the_same_transaction(store: HubStore,
                                                                  heard: Heard) -> None:
    job = store.assign_async("lead", "w1", topic="build", task="compile", payload={"n": 1},
                             priority=7, ttl_ms=90_000, timeout_ms=60_000, max_retries=2,
                             trace_id="tr-x", correlation_id="co-x")
    [message] = handoffs(store, job)
    assert job.last_message_id == message.id
    assert row(store, job.job_id)["last_message_id"] == message.id
    assert (message.type, message.from_agent, message.to_agent, message.topic) == (
        "handoff", "lead", "w1", "build")
    assert (message.priority, message.ttl_ms) == (7, 90_000)
    assert (message.trace_id, message.correlation_id) == ("tr-x", "co-x")
    assert message.payload == {
        "kind": "assign.job", "reason": "create", "assign_job_id": job.job_id,
        "attempt": 1, "retry_count": 0, "max_retries": 2, "timeout_ms": 60_000,
        "supervisor_agent": "lead", "worker_agent": "w1", "task": "compile",
        "payload": {"n": 1},
    }
    assert statuses(heard) == [(job.job_id, "queued", 1)]


def test_assign_async_is_one_transaction(store: HubStore) -> None:
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        job = uow.assign_async("lead", "w1", trace_id="tr-rollback")
        assert uow.session.get(Message, job.last_message_id) is not None
        raise RuntimeError
    assert store.list_assigns() == []
    assert store.get_messages_by_trace("tr-rollback") == []


def test_assign_async_refuses_bad_input_and_writes_nothing(store: HubStore) -> None:
    with pytest.raises(ValidationError):
        store.assign_async("lead", "", trace_id="tr-bad")
    with pytest.raises(ValidationError, match="bogus_field"):  # not a raw TypeError
        store.assign_async("lead", "w1", bogus_field=1)  # type: ignore[call-arg]
    assert store.list_assigns() == []
    assert store.get_messages_by_trace("tr-bad") == []


# --- report_assign_result ----------------------------------------------------------------

def test_report_refusals_carry_the_reference_codes_and_change_nothing(store: HubStore,
                                                                      heard: Heard) -> None:
    job = running_job(store)
    before, before_trace = row(store, job.job_id), len(trace(store, job))
    heard.clear()
    cases: list[tuple[Callable[[], object], type[HubStoreError], str]] = [
        (lambda: store.report_assign_result("nope", "succeeded"),
         AssignNotFound, "ASSIGN_NOT_FOUND"),
        (lambda: store.report_assign_result(job.job_id, "succeeded", worker_agent="w2"),
         WorkerMismatch, "ASSIGN_WORKER_MISMATCH"),
        (lambda: store.report_assign_result(job.job_id, "succeeded", attempt=2),
         StaleAttempt, "ASSIGN_ATTEMPT_MISMATCH"),
        (lambda: store.report_assign_result(job.job_id, "done"), ValidationError, "VALIDATION"),
        (lambda: store.report_assign_result(job.job_id, "succeeded", attempt="1"),  # type: ignore[arg-type]
         ValidationError, "VALIDATION"),
    ]
    for call, error, code in cases:
        with pytest.raises(error) as caught:
            call()
        assert caught.value.code == code
    assert row(store, job.job_id) == before
    assert len(trace(store, job)) == before_trace
    assert heard == []


def test_progress_refreshes_the_deadline_and_tells_the_supervisor(store: HubStore,
                                                                  heard: Heard) -> None:
    job = running_job(store, timeout_ms=45_000)
    heard.clear()
    before = now_ms()
    outcome = store.report_assign_result(job.job_id, "in_progress", worker_agent="w1",
                                         attempt=1, result={"pct": 10})
    after = now_ms()
    assert outcome.event == "progress"
    assert outcome.job.status == "running" and outcome.job.result == {"pct": 10}
    assert outcome.job.deadline_ms is not None
    assert before + 45_000 <= outcome.job.deadline_ms <= after + 45_000
    assert outcome.job.started_at_ms == job.started_at_ms
    assert row(store, job.job_id) == outcome.job.to_dict()
    [event] = events(store, job)
    assert outcome.message is not None and event.id == outcome.message.id
    assert (event.type, event.topic, event.from_agent, event.to_agent) == (
        "event", "assign.result", "w1", "lead")
    assert (event.trace_id, event.correlation_id) == (job.trace_id, job.correlation_id)
    assert event.payload["event"] == "progress"
    assert set(event.payload) == SNAPSHOT_KEYS | {"event"}
    assert event.payload["status"] == "running" and event.payload["job_id"] == job.job_id
    assert event.payload["deadline_ms"] == outcome.job.deadline_ms
    assert heard == []  # running -> running is not a status change


def test_running_report_on_a_queued_job_starts_it(store: HubStore, heard: Heard) -> None:
    job = store.assign_async("lead", "w1", timeout_ms=20_000)
    heard.clear()
    before = now_ms()
    outcome = store.report_assign_result(job.job_id, "running", worker_agent="w1", attempt=1)
    assert outcome.event == "progress"
    assert outcome.job.status == "running"
    assert outcome.job.started_at_ms is not None
    assert outcome.job.started_at_ms >= before
    assert outcome.job.deadline_ms is not None
    assert outcome.job.deadline_ms >= before + 20_000
    assert statuses(heard) == [(job.job_id, "running", 1)]
    assert [m.payload["event"] for m in events(store, job)] == ["progress"]


def test_running_report_on_a_finished_job_is_illegal(store: HubStore) -> None:
    for start in ("succeeded", "failed", "timed_out"):
        job = AssignJobFactory.create(status=start, worker_agent="w1")
        before = row(store, job.job_id)
        with pytest.raises(IllegalTransition):
            store.report_assign_result(job.job_id, "running", worker_agent="w1", attempt=1)
        assert row(store, job.job_id) == before, start
        assert trace(store, job) == []


def test_final_report_completes_the_job(store: HubStore, heard: Heard) -> None:
    for reported, metadata, final in (
        ("succeeded", None, "succeeded"), ("success", None, "succeeded"),
        ("completed", None, "succeeded"), ("completed", {"outcome": "error"}, "failed"),
        ("completed", {"status": "timeout"}, "timed_out"), ("error", None, "failed"),
        ("timeout", None, "timed_out"),
    ):
        job = running_job(store, priority=2, ttl_ms=70_000)
        heard.clear()
        before = now_ms()
        outcome = store.report_assign_result(job.job_id, reported, worker_agent="w1",
                                             attempt=1, result={"out": 1}, error="why",
                                             metadata=metadata)
        assert outcome.event == "completed"
        done = outcome.job
        assert (done.status, done.result, done.error, done.deadline_ms) == (
            final, {"out": 1}, "why", None), reported
        assert done.completed_at_ms is not None
        assert done.completed_at_ms >= before
        assert row(store, job.job_id) == done.to_dict()
        [event] = events(store, job)
        assert outcome.message is not None and outcome.message.id == event.id
        assert event.payload["event"] == "completed" and event.payload["status"] == final
        assert event.payload["result"] == {"out": 1} and event.payload["error"] == "why"
        assert (event.priority, event.ttl_ms) == (5, 70_000)  # priority at least 5
        assert statuses(heard) == [(job.job_id, final, 1)]


def test_repeating_the_final_report_is_a_noop(store: HubStore, heard: Heard) -> None:
    job = running_job(store)
    store.report_assign_result(job.job_id, "succeeded", worker_agent="w1", attempt=1,
                               result={"first": 1})
    before, before_trace = row(store, job.job_id), trace(store, job)
    heard.clear()
    again = store.report_assign_result(job.job_id, "success", worker_agent="w1", attempt=1,
                                       result={"first": 1})  # (another: IllegalTransition,
    # tests/assigns/test_cancel_and_results.py)
    assert again.event == "completed" and again.message is None
    assert again.job.to_dict() == before == row(store, job.job_id)
    assert [m.id for m in trace(store, job)] == [m.id for m in before_trace]
    assert heard == []


def test_conflicting_final_report_is_illegal(store: HubStore) -> None:
    for start, reported in (("succeeded", "failed"), ("succeeded", "timeout"),
                            ("failed", "succeeded"), ("timed_out", "failed")):
        job = AssignJobFactory.create(status=start, worker_agent="w1", max_retries=3)
        before = row(store, job.job_id)
        with pytest.raises(IllegalTransition):
            store.report_assign_result(job.job_id, reported, worker_agent="w1", attempt=1)
        assert row(store, job.job_id) == before, (start, reported)
        assert trace(store, job) == []


@pytest.mark.parametrize("reported", ["failed", "timed_out"])
def test_failure_with_retries_left_is_retried_and_redispatched(store: HubStore, heard: Heard,
                                                               reported: str) -> None:
    job = running_job(store, max_retries=2, timeout_ms=30_000)
    heard.clear()
    before = now_ms()
    outcome = store.report_assign_result(job.job_id, reported, worker_agent="w1", attempt=1,
                                         result={"partial": 1}, error={"why": "x"})
    after = now_ms()
    assert outcome.event == "retry_scheduled"
    retried = outcome.job
    assert (retried.status, retried.attempt, retried.retry_count) == ("queued", 2, 1)
    assert retried.error == {"why": "x"} and retried.result is None
    assert retried.deadline_ms is not None
    assert before + 30_000 <= retried.deadline_ms <= after + 30_000
    assert retried.started_at_ms is None and retried.completed_at_ms is None
    assert row(store, job.job_id) == retried.to_dict()
    first, second = handoffs(store, job)
    assert retried.last_message_id == second.id != first.id
    assert second.payload["reason"] == "retry"
    assert (second.payload["attempt"], second.payload["retry_count"]) == (2, 1)
    [event] = events(store, job)
    assert outcome.message is not None and outcome.message.id == event.id
    assert event.payload["event"] == "retry_scheduled"
    assert (event.payload["retry_reason"], event.payload["requested_by"]) == (reported, "w1")
    assert (event.payload["status"], event.payload["attempt"]) == ("queued", 2)
    assert event.payload["last_message_id"] == second.id
    assert statuses(heard) == [(job.job_id, reported, 1), (job.job_id, "queued", 2)]


def test_a_result_from_the_retried_attempt_is_stale(store: HubStore) -> None:
    job = running_job(store, max_retries=1)
    store.report_assign_result(job.job_id, "failed", worker_agent="w1", attempt=1)
    before, before_trace = row(store, job.job_id), len(trace(store, job))
    for reported in ("failed", "succeeded", "running"):
        with pytest.raises(StaleAttempt):
            store.report_assign_result(job.job_id, reported, worker_agent="w1", attempt=1)
    assert row(store, job.job_id) == before
    assert len(trace(store, job)) == before_trace
    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.attempt == 2
    final = store.report_assign_result(job.job_id, "failed", worker_agent="w1", attempt=2)
    assert (final.event, final.job.status, final.job.attempt) == ("completed", "failed", 2)
    assert [m.payload["event"] for m in events(store, job)] == ["retry_scheduled", "completed"]


def test_failure_without_retries_left_completes(store: HubStore) -> None:
    job = running_job(store, max_retries=0)
    outcome = store.report_assign_result(job.job_id, "failed", worker_agent="w1", attempt=1)
    assert (outcome.event, outcome.job.status, outcome.job.attempt) == ("completed", "failed", 1)
    assert len(handoffs(store, job)) == 1


def test_report_without_worker_or_attempt_is_accepted(store: HubStore) -> None:
    job = running_job(store)
    outcome = store.report_assign_result(job.job_id, "succeeded")
    assert outcome.job.status == "succeeded"


# --- schedule_assign_retry ---------------------------------------------------------------

def test_schedule_retry_requeues_and_redispatches(store: HubStore, heard: Heard) -> None:
    job = AssignJobFactory.create(status="failed", worker_agent="w1", max_retries=1,
                           error={"e": 1}, timeout_ms=10_000)
    heard.clear()
    retried = store.schedule_assign_retry(job.job_id, reason="flaky", requested_by="lead")
    assert (retried.status, retried.attempt, retried.retry_count) == ("queued", 2, 1)
    assert retried.error == {"e": 1}
    [handoff] = handoffs(store, job)
    assert retried.last_message_id == handoff.id
    assert row(store, job.job_id)["last_message_id"] == handoff.id
    assert handoff.payload["reason"] == "retry" and handoff.payload["attempt"] == 2
    [event] = events(store, job)
    assert event.payload["event"] == "retry_scheduled"
    assert (event.payload["retry_reason"], event.payload["requested_by"]) == ("flaky", "lead")
    assert statuses(heard) == [(job.job_id, "queued", 2)]


def test_schedule_retry_defaults_to_manual(store: HubStore) -> None:
    job = AssignJobFactory.create(status="timed_out", max_retries=1)
    store.schedule_assign_retry(job.job_id)
    [event] = events(store, job)
    assert (event.payload["retry_reason"], event.payload["requested_by"]) == (
        "manual", "manual")


def test_schedule_retry_refuses_when_retries_are_used_up(store: HubStore) -> None:
    for retry_count, max_retries in ((0, 0), (2, 2), (3, 1)):
        job = AssignJobFactory.create(status="failed", retry_count=retry_count,
                               max_retries=max_retries)
        before = row(store, job.job_id)
        with pytest.raises(RetryExhausted) as caught:
            store.schedule_assign_retry(job.job_id)
        assert caught.value.code == "ASSIGN_RETRY_EXHAUSTED"
        assert row(store, job.job_id) == before
        assert trace(store, job) == []


def test_schedule_retry_of_an_unfinished_or_succeeded_job_is_illegal(store: HubStore) -> None:
    for start in ("queued", "running", "succeeded"):
        job = AssignJobFactory.create(status=start, max_retries=3)
        before = row(store, job.job_id)
        with pytest.raises(IllegalTransition):
            store.schedule_assign_retry(job.job_id)
        assert row(store, job.job_id) == before, start
        assert trace(store, job) == []


def test_schedule_retry_of_a_missing_job(store: HubStore) -> None:
    with pytest.raises(AssignNotFound):
        store.schedule_assign_retry("nope")


# --- sweep_timed_out_assigns ---------------------------------------------------------------

def test_sweep_times_out_due_jobs_and_retries_those_with_retries_left(store: HubStore,
                                                                      heard: Heard) -> None:
    t = now_ms()
    queued_due = AssignJobFactory.create(status="queued", deadline_ms=t - 5, max_retries=0)
    running_due = AssignJobFactory.create(status="running", deadline_ms=t, max_retries=1,
                                   error={"kept": True}, timeout_ms=20_000)
    not_yet = AssignJobFactory.create(status="running", deadline_ms=t + 1)
    no_deadline = AssignJobFactory.create(status="running", deadline_ms=None)
    finished = AssignJobFactory.create(status="succeeded", deadline_ms=t - 100)
    failed = AssignJobFactory.create(status="failed", deadline_ms=t - 100, max_retries=5)
    untouched = {j.job_id: row(store, j.job_id)
                 for j in (not_yet, no_deadline, finished, failed)}
    heard.clear()
    assert store.sweep_timed_out_assigns(now_ms=t) == {"timed_out": 2, "retried": 1}

    done = row(store, queued_due.job_id)
    assert (done["status"], done["error"], done["deadline_ms"]) == (
        "timed_out", TIMED_OUT_ERROR, None)
    [completed] = events(store, queued_due)
    assert completed.payload["event"] == "completed"
    assert completed.payload["completion_reason"] == "timed_out"
    assert completed.from_agent == queued_due.worker_agent

    retried = row(store, running_due.job_id)
    assert (retried["status"], retried["attempt"], retried["retry_count"]) == ("queued", 2, 1)
    assert retried["error"] == {"kept": True}
    assert retried["deadline_ms"] >= t + 20_000
    [handoff] = handoffs(store, running_due)
    assert handoff.payload["reason"] == "retry" and retried["last_message_id"] == handoff.id
    [event] = events(store, running_due)
    assert (event.payload["event"], event.payload["retry_reason"],
            event.payload["requested_by"]) == ("retry_scheduled", "timed_out", "sweeper")

    for job_id, before in untouched.items():
        assert row(store, job_id) == before
    assert sorted(statuses(heard)) == sorted([
        (queued_due.job_id, "timed_out", 1),
        (running_due.job_id, "timed_out", 1), (running_due.job_id, "queued", 2)])


def test_a_job_retried_by_a_sweep_is_not_swept_again_by_that_sweep(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", timeout_ms=1_000, max_retries=3)
    far = now_ms() + 10**9  # past the deadline of the first attempt
    assert store.sweep_timed_out_assigns(now_ms=far) == {"timed_out": 1, "retried": 1}
    first = row(store, job.job_id)
    assert (first["status"], first["attempt"], first["retry_count"]) == ("queued", 2, 1)
    # The retry is dated from the sweep's now_ms, not from the wall clock.
    assert (first["deadline_ms"], first["updated_at_ms"]) == (far + 1_000, far)
    assert len(handoffs(store, job)) == 2
    assert store.sweep_timed_out_assigns(now_ms=far + 999) == {"timed_out": 0, "retried": 0}
    # A sweep at its deadline does take it.
    assert store.sweep_timed_out_assigns(now_ms=far + 1_000) == {"timed_out": 1,
                                                                  "retried": 1}
    assert row(store, job.job_id)["attempt"] == 3


def test_sweep_of_nothing_due(store: HubStore, heard: Heard) -> None:
    AssignJobFactory.create(status="running", deadline_ms=now_ms() + 60_000)
    heard.clear()
    assert store.sweep_timed_out_assigns() == {"timed_out": 0, "retried": 0}
    assert store.sweep_timed_out_assigns(now_ms=0) == {"timed_out": 0, "retried": 0}
    assert heard == []
    with pytest.raises(ValidationError):
        store.sweep_timed_out_assigns(now_ms="later")  # type: ignore[arg-type]


def test_a_late_result_after_the_sweep_is_stale(store: HubStore) -> None:
    job = running_job(store, max_retries=1)
    store.sweep_timed_out_assigns(now_ms=job.deadline_ms)
    with pytest.raises(StaleAttempt):
        store.report_assign_result(job.job_id, "succeeded", worker_agent="w1", attempt=1)
    assert row(store, job.job_id)["status"] == "queued"


# --- claim_next_assign ---------------------------------------------------------------------

def test_claim_takes_the_highest_priority_then_the_oldest(store: HubStore,
                                                          heard: Heard) -> None:
    t = now_ms()
    low = AssignJobFactory.create(worker_agent="w1", priority=3, created_at_ms=t - 100)
    new_high = AssignJobFactory.create(worker_agent="w1", priority=8, created_at_ms=t - 10)
    old_high = AssignJobFactory.create(worker_agent="w1", priority=8, created_at_ms=t - 50)
    AssignJobFactory.create(worker_agent="w2", priority=9, created_at_ms=t - 500)
    AssignJobFactory.create(worker_agent="w1", priority=9, status="running")
    AssignJobFactory.create(worker_agent="w1", priority=9, status="failed")
    heard.clear()
    order = []
    before = now_ms()
    while (claimed := store.claim_next_assign("w1")) is not None:
        assert claimed.started_at_ms is not None
        assert claimed.status == "running" and claimed.started_at_ms >= before
        assert row(store, claimed.job_id)["status"] == "running"
        order.append(claimed.job_id)
    assert order == [old_high.job_id, new_high.job_id, low.job_id]
    assert statuses(heard) == [(job_id, "running", 1) for job_id in order]


def test_claim_with_nothing_queued(store: HubStore) -> None:
    assert store.claim_next_assign("w1") is None
    with pytest.raises(ValidationError):
        store.claim_next_assign("")


@pytest.mark.parametrize(("status", "column", "call"), [
    ("queued", "attempt", lambda s: s.update_assign_status("j", "running")),
    ("failed", "attempt", lambda s: s.retry_assign("j")),
    ("running", "timeout_ms", lambda s: s.report_assign_result("j", "running")),
    ("failed", "max_retries", lambda s: s.schedule_assign_retry("j")),
])
def test_a_number_column_holding_text_is_a_hubstore_error(
        store: HubStore, status: str, column: str, call: Callable[[HubStore], Any]) -> None:
    """Only a hand edit can put text in a number column (SQLite keeps any type): the
    rules cannot compute with it, and the caller gets a HubStoreError naming the job
    (not Python's TypeError), with the row left as it was."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL's columns keep their types")
    AssignJobFactory.create(job_id="j", status=status, max_retries=2)
    with store.unit_of_work() as uow:
        uow.connection.execute(text(f"UPDATE assign_jobs SET {column} = 'x'"))

    def row() -> list[Any]:
        with store.unit_of_work(write=False) as uow:
            return list(uow.connection.execute(text("SELECT * FROM assign_jobs")).one())

    before = row()
    with pytest.raises(HubStoreError, match=r"assign job 'j' cannot be moved: its row "
                                            r"holds a value of the wrong type") as raised:
        call(store)
    assert type(raised.value) is HubStoreError and isinstance(raised.value.__cause__,
                                                              TypeError)
    assert row() == before


def test_a_put_back_claim_is_queued_again_as_before_the_claim(store: HubStore) -> None:
    from hubstore.services.assigns.moves import put_back_claim

    bare = store.create_assign("lead", "w1", task="t", priority=9)
    dated = store.create_assign("lead", "w1", task="u", priority=1)
    with store.engine.begin() as conn:  # no deadline: the claim sets one
        conn.execute(text("UPDATE assign_jobs SET deadline_ms = NULL WHERE job_id = :j"),
                     {"j": bare.job_id})
    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.job_id == bare.job_id
    assert claimed.started_at_ms == claimed.updated_at_ms
    assert claimed.deadline_ms == claimed.updated_at_ms + claimed.timeout_ms
    assert put_back_claim(store, claimed) is True
    back = store.get_assign(bare.job_id)
    assert back is not None and back.status == "queued"
    assert (back.started_at_ms, back.deadline_ms) == (None, None)
    assert put_back_claim(store, claimed) is False  # it moved since the claim

    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.job_id == bare.job_id
    finished = store.update_assign_status(claimed.job_id, "succeeded")
    assert finished is not None
    assert put_back_claim(store, finished) is False  # only a running job goes back

    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.job_id == dated.job_id
    assert put_back_claim(store, claimed) is True
    back = store.get_assign(dated.job_id)
    assert back is not None and back.status == "queued"
    assert back.deadline_ms == dated.deadline_ms  # its own deadline is kept
