"""Jobs that may start only after a given time, and retries that back off: claims and
waits leave a job alone until it is due; a retry with back-off waits twice as long each
time; the reference's getters (to_dict) know nothing of either."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from hubstore import HubStore
from hubstore.errors import ValidationError
from hubstore.ids import now_ms


def make_due(store: HubStore, job_id: str) -> None:
    """Move a job's not_before_ms into the past (as if its time had come)."""
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE assign_jobs SET not_before_ms = :t WHERE job_id = :j"),
                     {"t": now_ms() - 1, "j": job_id})


def test_a_scheduled_job_is_not_claimed_before_its_time(store: HubStore) -> None:
    later = now_ms() + 3_600_000
    scheduled = store.create_assign("lead", "w1", task="later", not_before_ms=later,
                                    priority=9)
    at_once = store.create_assign("lead", "w1", task="now", priority=1)
    assert scheduled.not_before_ms == later
    assert scheduled.deadline_ms == later + scheduled.timeout_ms  # counted from its start
    claimed = store.claim_next_assign("w1")  # the lower priority one: the other waits
    assert claimed is not None and claimed.job_id == at_once.job_id
    assert store.claim_next_assign("w1") is None
    assert store.next_due_ms("w1") == later
    assert store.sweep_timed_out_assigns(now_ms=later - 1) == {"timed_out": 1, "retried": 0}
    make_due(store, scheduled.job_id)
    assert store.next_due_ms("w1") is None
    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.job_id == scheduled.job_id


def test_a_waiter_wakes_when_a_scheduled_job_becomes_due(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", task="soon", not_before_ms=now_ms() + 700)
    started = time.monotonic()
    claimed = store.wait_for_assign("w1", timeout_s=10)
    waited = time.monotonic() - started
    assert claimed is not None and claimed.job_id == job.job_id
    assert 0.5 <= waited <= 2.0, waited  # woke for it, not at the timeout


def test_retries_back_off_twice_as_long_each_time(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", task="flaky", max_retries=3,
                             retry_backoff_ms=60_000)
    assert job.retry_backoff_ms == 60_000 and job.not_before_ms is None
    delays = []
    for attempt in (1, 2):
        if attempt > 1:
            make_due(store, job.job_id)
        claimed = store.claim_next_assign("w1")
        assert claimed is not None and claimed.attempt == attempt
        before = now_ms()
        outcome = store.report_assign_result(job.job_id, "failed", worker_agent="w1",
                                             attempt=attempt)
        assert outcome.event == "retry_scheduled"
        moved = outcome.job
        assert moved.status == "queued" and moved.not_before_ms is not None
        delays.append(moved.not_before_ms - before)
        assert moved.deadline_ms == moved.not_before_ms + moved.timeout_ms
        assert store.claim_next_assign("w1") is None  # backing off
    assert 60_000 <= delays[0] <= 61_000 and 120_000 <= delays[1] <= 121_000, delays


def test_a_swept_timeout_backs_off_too(store: HubStore) -> None:
    job = store.create_assign("lead", "w1", max_retries=1, retry_backoff_ms=5_000)
    assert store.claim_next_assign("w1") is not None
    now = now_ms() + job.timeout_ms + 1
    assert store.sweep_timed_out_assigns(now_ms=now) == {"timed_out": 1, "retried": 1}
    moved = store.get_assign(job.job_id)
    assert moved is not None and moved.status == "queued" and moved.attempt == 2
    assert moved.not_before_ms is not None and moved.not_before_ms > now_ms()


def test_without_back_off_a_retry_is_due_at_once(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", max_retries=1)
    assert store.claim_next_assign("w1") is not None
    outcome = store.report_assign_result(job.job_id, "failed", worker_agent="w1", attempt=1)
    assert outcome.job.not_before_ms is None
    again = store.claim_next_assign("w1")
    assert again is not None and again.attempt == 2


def test_the_reference_getters_leave_hubstores_own_columns_out(store: HubStore) -> None:
    job = store.create_assign("lead", "w1", not_before_ms=now_ms() + 1_000,
                              retry_backoff_ms=10)
    assert "not_before_ms" not in job.to_dict() and "retry_backoff_ms" not in job.to_dict()
    assert set(job.to_dict()) == {
        "job_id", "supervisor_agent", "worker_agent", "topic", "task", "payload", "status",
        "attempt", "retry_count", "max_retries", "priority", "ttl_ms", "timeout_ms",
        "deadline_ms", "trace_id", "correlation_id", "last_message_id", "result", "error",
        "created_at_ms", "updated_at_ms", "started_at_ms", "completed_at_ms",
        "last_retry_at_ms"}


@pytest.mark.parametrize(("field", "value"), [
    ("not_before_ms", "tomorrow"), ("not_before_ms", 2**63), ("not_before_ms", True),
    ("retry_backoff_ms", -1), ("retry_backoff_ms", 1.5), ("retry_backoff_ms", None),
])
def test_bad_schedules_are_refused_before_anything_is_written(
        store: HubStore, field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        store.create_assign("lead", "w1", **{field: value})  # type: ignore[arg-type]
    assert store.list_assigns() == []


def test_a_retry_can_be_scheduled_or_back_off(store: HubStore) -> None:
    job = store.create_assign("lead", "w1", status="failed", max_retries=2)
    before = now_ms()
    moved = store.retry_assign(job.job_id, retry_backoff_ms=30_000)
    assert moved is not None and moved.not_before_ms is not None  # backing off
    assert before + 30_000 <= moved.not_before_ms <= now_ms() + 30_000
    failed = store.update_assign_status(job.job_id, "failed")
    assert failed is not None and failed.not_before_ms == moved.not_before_ms
    later = now_ms() + 3_600_000
    moved = store.retry_assign(job.job_id, not_before_ms=later)  # named: that time
    assert moved is not None and moved.not_before_ms == later
    assert moved.deadline_ms == later + moved.timeout_ms
    with pytest.raises(ValidationError, match="not_before_ms"):
        store.retry_assign(job.job_id, not_before_ms="soon")  # type: ignore[arg-type]
