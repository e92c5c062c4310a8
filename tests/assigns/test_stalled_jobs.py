"""Stalled jobs come back by themselves (issue 29): a running job past its deadline is
timed out and retried (or finished, its retries spent) by the next claim of any worker,
with no sweep called, and a waiting worker wakes when such a job becomes due again.
A job whose worker keeps touching it is never taken back."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore, StaleAttempt
from hubstore.ids import now_ms
from hubstore.services.assigns import rescue as timeouts
from hubstore.testing.factories import AssignJobFactory
from hubstore.transaction import Transaction
from tests.helpers import Heard, present
from tests.waiting.test_waiting import Child

#: How late a rescue may come after the job's deadline (issue 29: "no later than its
#: deadline plus 2 s").
RESCUE_BOUND_MS = 2_000


def events_of(store: HubStore, trace_id: str) -> list[str]:
    return [m.payload["event"] for m in store.get_messages_by_trace(trace_id)
            if m.type == "event"]


def test_a_claim_takes_back_a_stalled_job_as_its_next_attempt(store: HubStore) -> None:
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=1,
                                      deadline_ms=now_ms() - 1, timeout_ms=60_000)
    job = present(store.claim_next_assign("w1"))  # no sweep called
    assert (job.job_id, job.attempt, job.retry_count, job.status) == (
        stalled.job_id, 2, 1, "running")
    assert events_of(store, job.trace_id) == ["retry_scheduled"]
    with pytest.raises(StaleAttempt):  # the dead worker's late report
        store.report_assign_result(job.job_id, "succeeded", worker_agent="w1", attempt=1)


def test_a_stalled_job_with_no_retry_left_ends_timed_out(store: HubStore) -> None:
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=0,
                                      deadline_ms=now_ms() - 1)
    assert store.claim_next_assign("w1") is None
    job = present(store.get_assign(stalled.job_id))
    assert (job.status, job.error, job.deadline_ms) == (
        "timed_out", {"message": "assign job timed out"}, None)
    [event] = [m for m in store.get_messages_by_trace(job.trace_id) if m.type == "event"]
    assert (event.payload["event"], event.payload["status"],
            event.payload["completion_reason"]) == ("completed", "timed_out", "timed_out")


def test_any_workers_claim_takes_back_another_workers_stalled_job(store: HubStore) -> None:
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=1,
                                      deadline_ms=now_ms() - 1)
    assert store.claim_next_assigns("w2", 5) == []
    job = present(store.get_assign(stalled.job_id))
    assert (job.status, job.attempt, job.worker_agent) == ("queued", 2, "w1")


def test_a_claim_leaves_jobs_whose_deadline_is_ahead_alone(store: HubStore) -> None:
    ahead = AssignJobFactory.create(worker_agent="w1", status="running",
                                    deadline_ms=now_ms() + 60_000)
    assert store.claim_next_assign("w1") is None
    assert present(store.get_assign(ahead.job_id)).status == "running"
    assert store.db.rescue_at_ms <= ahead.deadline_ms  # looked again by then at the latest


def test_claims_look_for_stalled_jobs_at_most_once_an_interval(
        store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    looks: list[int] = []
    real = timeouts.earliest_deadline

    def counted(uow: Transaction) -> int | None:
        looks.append(1)
        return real(uow)

    monkeypatch.setattr(timeouts, "earliest_deadline", counted)
    start = time.monotonic()
    for _ in range(20):
        assert store.claim_next_assign("w1") is None
    elapsed_ms = (time.monotonic() - start) * 1000
    # The first claim looks; the next look is due RESCUE_INTERVAL_MS later.
    assert 1 <= len(looks) <= 1 + elapsed_ms // timeouts.RESCUE_INTERVAL_MS
    looks.clear()
    store.db.rescue_at_ms = 0  # the interval passed
    assert store.claim_next_assign("w1") is None
    assert len(looks) == 1


def test_a_waiting_worker_wakes_when_a_stalled_job_becomes_due(store: HubStore) -> None:
    deadline = now_ms() + 700
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=1,
                                      deadline_ms=deadline)
    job = present(store.wait_for_assign("w1", timeout_s=10))
    assert (job.job_id, job.attempt) == (stalled.job_id, 2)
    assert deadline <= now_ms() <= deadline + RESCUE_BOUND_MS


@pytest.mark.slow
def test_a_killed_workers_job_goes_to_another_worker_after_its_deadline(
        db_url: URL) -> None:
    """kill -9 of a worker mid-job: another process of the same worker gets the job as
    attempt 2 no later than its deadline plus 2 s, without any sweep call; the dead
    worker's report is refused; the supervisor hears 'completed' once."""
    with HubStore.open(db_url) as store:
        feed = store.message_feed("lead")
        child = Child("crash_claimer", db_url, "w1")
        child.ready()
        job = store.assign_async("lead", "w1", task="crash", timeout_ms=1_000, max_retries=2)
        try:
            assert child.line() == {"job_id": job.job_id, "attempt": 1}
        finally:
            child.proc.kill()  # SIGKILL: no clean-up of any kind
            child.proc.wait()
        deadline = present(store.get_assign(job.job_id)).deadline_ms
        assert deadline is not None
        taken = present(store.wait_for_assign("w1", timeout_s=10))
        assert now_ms() <= deadline + RESCUE_BOUND_MS
        assert (taken.job_id, taken.attempt) == (job.job_id, 2)
        with pytest.raises(StaleAttempt):
            store.report_assign_result(job.job_id, "succeeded", worker_agent="w1",
                                       attempt=1)
        assert store.finish_assign(taken, "succeeded").event == "completed"
        heard = [m.payload["event"] for m in feed.next(timeout_s=1)]
        assert heard == ["retry_scheduled", "completed"]
        assert feed.next(timeout_s=0.3) == []


@pytest.mark.slow
def test_a_job_its_worker_keeps_touching_is_never_taken_back(db_url: URL) -> None:
    """A 1 s job touched every 0.1 s for 5 s, while another process claims and sweeps
    all along: never timed out, finished on its first attempt."""
    with HubStore.open(db_url) as store:
        child = Child("toucher", db_url, "w1", 5.0, 0.1)
        child.ready()
        job = store.assign_async("lead", "w1", task="long", timeout_ms=1_000, max_retries=3)
        assert child.line() == {"job_id": job.job_id}
        while child.proc.poll() is None:
            assert store.claim_next_assign("w1") is None
            assert store.sweep_timed_out_assigns()["timed_out"] == 0
            store.db.rescue_at_ms = 0  # every claim looks
            time.sleep(0.05)
        result = child.result()
        assert result["touches"] >= 20 and result["event"] == "completed"
        done = present(store.get_assign(job.job_id))
        assert (done.status, done.attempt, done.retry_count) == ("succeeded", 1, 0)
        assert events_of(store, job.trace_id) == ["completed"]


def test_a_touch_moves_the_deadline_of_the_running_attempt(store: HubStore) -> None:
    store.assign_async("lead", "w1", timeout_ms=5_000)
    job = present(store.claim_next_assign("w1"))
    before = now_ms()
    touched = store.touch_assign(job.job_id, "w1", job.attempt)
    assert touched.deadline_ms is not None
    assert before + 5_000 <= touched.deadline_ms <= now_ms() + 5_000
    assert touched.updated_at_ms >= before and touched.status == "running"
    longer = store.touch_assign(job.job_id, "w1", job.attempt, extend_ms=60_000)
    assert longer.deadline_ms is not None and longer.deadline_ms >= before + 60_000
    assert events_of(store, job.trace_id) == []  # a heartbeat, not a report


def test_a_touch_from_an_attempt_that_was_taken_back_is_stale(store: HubStore) -> None:
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=1,
                                      deadline_ms=now_ms() - 1)
    present(store.claim_next_assign("w1"))  # attempt 2 now
    with pytest.raises(StaleAttempt):
        store.touch_assign(stalled.job_id, "w1", 1)


def test_a_touch_of_a_job_that_ended_is_stale(store: HubStore) -> None:
    store.assign_async("lead", "w1")
    job = present(store.claim_next_assign("w1"))
    store.finish_assign(job, "succeeded")
    with pytest.raises(StaleAttempt, match="succeeded, not running"):
        store.touch_assign(job.job_id, "w1", job.attempt)


def test_the_sweep_dates_a_retry_from_its_now(store: HubStore, heard: Heard) -> None:
    job = store.assign_async("lead", "w1", timeout_ms=2_000, max_retries=1,
                             retry_backoff_ms=500)
    later = now_ms() + 3_600_000
    assert store.sweep_timed_out_assigns(now_ms=later) == {"timed_out": 1, "retried": 1}
    retried = present(store.get_assign(job.job_id))
    assert (retried.not_before_ms, retried.deadline_ms, retried.last_retry_at_ms,
            retried.updated_at_ms) == (later + 500, later + 500 + 2_000, later, later)


def test_many_claimers_rescue_each_stalled_job_once(db_url: URL) -> None:
    """Four stores (as four processes would) claim at once while 30 jobs stall: each is
    retried exactly once."""
    stores = [HubStore.open(db_url) for _ in range(4)]
    try:
        jobs = [AssignJobFactory.build(worker_agent="w1", status="running", max_retries=5,
                                       deadline_ms=now_ms() - 1) for _ in range(30)]
        with stores[0].unit_of_work() as uow:
            uow.session.add_all(jobs)
        start = threading.Barrier(len(stores))

        def claim(store: HubStore) -> None:
            start.wait()
            store.claim_next_assigns("nobody", 1)

        threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for job in jobs:
            again = present(stores[0].get_assign(job.job_id))
            assert (again.status, again.attempt, again.retry_count) == ("queued", 2, 1)
            assert events_of(stores[0], again.trace_id) == ["retry_scheduled"]
    finally:
        for store in stores:
            store.close()
