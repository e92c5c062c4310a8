"""Cancelling a job, the safe report (finish_assign) and waiting for a result (issue 29).

A cancelled job is terminal: never claimed, retried or reported again; its worker hears
of it at its next touch or report (AssignCancelled); its supervisor gets one
'completed' event with status 'cancelled'. ``wait_for_result`` returns a job once it
has ended, woken by the job's events, sync and async.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hubstore import (
    AssignCancelled,
    AssignNotFound,
    HubStore,
    IllegalTransition,
    StaleAttempt,
    ValidationError,
    WorkerMismatch,
)
from hubstore.aio import AsyncHubStore
from hubstore.health import figure_findings
from hubstore.ids import now_ms
from hubstore.models import AssignJob
from hubstore.testing.factories import AssignJobFactory
from tests.helpers import Heard, present


def events_of(store: HubStore, job: AssignJob) -> list[dict[str, Any]]:
    return [m.payload for m in store.get_messages_by_trace(job.trace_id) if m.type == "event"]


def no_figure_findings(store: HubStore) -> None:
    with store.engine.connect() as conn:
        assert figure_findings(conn) == []


# --- cancel ----------------------------------------------------------------------------

def test_a_cancelled_queued_job_is_never_claimed(store: HubStore, heard: Heard) -> None:
    job = store.assign_async("lead", "w1", task="t", max_retries=3)
    before = store.get_audit_stats()
    cancelled = present(store.cancel_assign(job.job_id, reason="not needed"))
    assert (cancelled.status, cancelled.deadline_ms) == ("cancelled", None)
    assert cancelled.error == {"message": "assign job cancelled", "reason": "not needed"}
    assert cancelled.completed_at_ms is not None
    assert store.claim_next_assign("w1") is None
    assert store.sweep_timed_out_assigns(now_ms=now_ms() + 10**9)["timed_out"] == 0
    [event] = events_of(store, job)
    assert (event["event"], event["status"], event["completion_reason"],
            event["reason"]) == ("completed", "cancelled", "cancelled", "not needed")
    assert [(e["status"], j.job_id) for e, j in heard[-1:]] == [("cancelled", job.job_id)]
    after = store.get_audit_stats()
    assert after["assign_queued"] == before["assign_queued"] - 1
    assert store.get_hub_stats()["active_assign_jobs"] == 0
    no_figure_findings(store)


def test_a_cancelled_running_job_refuses_its_workers_touch_and_report(
        store: HubStore) -> None:
    store.assign_async("lead", "w1")
    job = present(store.claim_next_assign("w1"))
    cancelled = present(store.cancel_assign(job.job_id))
    assert cancelled.error == {"message": "assign job cancelled"}
    with pytest.raises(AssignCancelled):
        store.touch_assign(job.job_id, "w1", job.attempt)
    with pytest.raises(AssignCancelled):
        store.finish_assign(job, "succeeded")
    with pytest.raises(AssignCancelled):
        store.report_assign_result(job.job_id, "failed", worker_agent="w1")
    assert present(store.get_assign(job.job_id)).status == "cancelled"
    assert [e["event"] for e in events_of(store, job)] == ["completed"]


def test_cancelling_twice_changes_nothing(store: HubStore) -> None:
    job = store.assign_async("lead", "w1")
    first = present(store.cancel_assign(job.job_id, reason="a"))
    again = present(store.cancel_assign(job.job_id, reason="b"))
    assert again.error == first.error and again.updated_at_ms == first.updated_at_ms
    assert len(events_of(store, job)) == 1


def test_a_job_that_ended_cannot_be_cancelled(store: HubStore) -> None:
    store.assign_async("lead", "w1")
    job = present(store.claim_next_assign("w1"))
    store.finish_assign(job, "succeeded")
    with pytest.raises(IllegalTransition):
        store.cancel_assign(job.job_id)
    assert present(store.get_assign(job.job_id)).status == "succeeded"
    assert store.cancel_assign("no-such-job") is None


def test_a_cancelled_job_is_never_run_again(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", max_retries=3)
    store.cancel_assign(job.job_id)
    with pytest.raises(IllegalTransition):
        store.schedule_assign_retry(job.job_id, force=True)
    with pytest.raises(IllegalTransition):
        store.retry_assign(job.job_id)
    with pytest.raises(IllegalTransition):
        store.update_assign_status(job.job_id, "running")
    assert present(store.get_assign(job.job_id)).status == "cancelled"


def test_cancel_inside_a_rolled_back_unit_of_work_leaves_the_job(
        store: HubStore, heard: Heard) -> None:
    job = store.assign_async("lead", "w1")
    heard.clear()
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        uow.cancel_assign(job.job_id)
        raise RuntimeError("changed my mind")
    assert present(store.get_assign(job.job_id)).status == "queued"
    assert heard == [] and events_of(store, job) == []


@pytest.mark.parametrize("reason", [5, "x\ud800", "a\x00b"])
def test_a_bad_reason_is_refused_before_anything_is_written(store: HubStore,
                                                            reason: Any) -> None:
    job = store.assign_async("lead", "w1")
    with pytest.raises(ValidationError, match="reason"):
        store.cancel_assign(job.job_id, reason=reason)
    assert present(store.get_assign(job.job_id)).status == "queued"


def race(calls: dict[str, Callable[[], object]]) -> dict[str, Any]:
    """Run the calls at the same moment, one thread each: each one's "done", or the
    class of the hub error it raised."""
    start = threading.Barrier(len(calls))
    outcomes: dict[str, Any] = {}

    def run(name: str, call: Callable[[], object]) -> None:
        start.wait()
        try:
            call()
            outcomes[name] = "done"
        except (IllegalTransition, AssignCancelled) as error:
            outcomes[name] = type(error)

    threads = [threading.Thread(target=run, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_a_cancel_racing_a_report_has_one_winner(db_url: URL) -> None:
    """Rounds of a cancel and a final report on the same running job, at the same time
    from two stores: one wins, the other is told (IllegalTransition for the cancel,
    AssignCancelled for the report), and the supervisor hears one 'completed'."""
    with HubStore.open(db_url) as canceller, HubStore.open(db_url) as worker:
        for _ in range(12):
            canceller.assign_async("lead", "w1")
            job = present(worker.claim_next_assign("w1"))
            outcomes = race({
                "cancel": partial(canceller.cancel_assign, job.job_id),
                "report": partial(worker.finish_assign, job, "succeeded")})
            final = present(worker.get_assign(job.job_id))
            if final.status == "cancelled":
                assert outcomes == {"cancel": "done", "report": AssignCancelled}
            else:
                assert final.status == "succeeded"
                assert outcomes == {"cancel": IllegalTransition, "report": "done"}
            assert [e["event"] for e in events_of(worker, job)] == ["completed"]
        no_figure_findings(worker)


# --- finish_assign ---------------------------------------------------------------------

def test_finish_assign_reports_with_the_jobs_own_worker_and_attempt(store: HubStore) -> None:
    store.assign_async("lead", "w1", max_retries=1)
    job = present(store.claim_next_assign("w1"))
    outcome = store.finish_assign(job, "failed", error={"e": 1})
    assert outcome.event == "retry_scheduled" and outcome.job.attempt == 2
    with pytest.raises(StaleAttempt):  # the same (now stale) job object again
        store.finish_assign(job, "succeeded")
    again = present(store.claim_next_assign("w1"))
    done = store.finish_assign(again, "succeeded", result={"ok": True})
    assert (done.event, done.job.status, done.job.result) == ("completed", "succeeded",
                                                              {"ok": True})


def test_a_repeated_final_report_is_a_no_op_and_a_conflicting_one_raises(
        store: HubStore) -> None:
    """Issue 40: a second finish_assign with another result was silently ignored. The
    identical report again changes and records nothing; one with another result or
    error (or another end) raises IllegalTransition, and the first report stands."""
    store.assign_async("lead", "w1")
    job = present(store.claim_next_assign("w1"))
    first = store.finish_assign(job, "succeeded", result={"n": 1.0, "items": ("a", "b")})
    events = events_of(store, job)
    again = store.finish_assign(job, "succeeded", result={"n": 1, "items": ["a", "b"]})
    assert again.event == "completed" and again.job.updated_at_ms == first.job.updated_at_ms
    for conflicting in ({"result": {"n": 2}}, {"result": {"n": 1, "items": ["a", "b"]},
                                               "error": {"late": True}}):
        with pytest.raises(IllegalTransition, match="the first report stands"):
            store.finish_assign(job, "succeeded", **conflicting)
    with pytest.raises(IllegalTransition, match="the first report stands"):
        store.report_assign_result(job.job_id, "succeeded", "w1", result={"n": 3})
    with pytest.raises(IllegalTransition, match="the first report stands"):
        store.report_assign_results([{"job_id": job.job_id, "status": "succeeded",
                                      "result": {"n": 3}}], worker_agent="w1")
    with pytest.raises(IllegalTransition):
        store.finish_assign(job, "failed", error={"e": 1})
    assert present(store.get_assign(job.job_id)).result == {"n": 1.0, "items": ["a", "b"]}
    assert events_of(store, job) == events


def test_finish_assign_of_another_workers_job_is_refused(store: HubStore) -> None:
    store.assign_async("lead", "w1")
    job = present(store.claim_next_assign("w1"))
    forged = AssignJob(job_id=job.job_id, worker_agent="w2", attempt=job.attempt)
    with pytest.raises(WorkerMismatch):
        store.finish_assign(forged, "succeeded")


@pytest.mark.parametrize("job", [None, "job-id", {"job_id": "x"}])
def test_finish_assign_takes_a_job(store: HubStore, job: Any) -> None:
    with pytest.raises(ValidationError, match="AssignJob"):
        store.finish_assign(job, "succeeded")


# --- wait_for_result -------------------------------------------------------------------

def test_wait_for_result_returns_at_once_for_a_job_that_ended(store: HubStore) -> None:
    job = store.assign_async("lead", "w1")
    store.cancel_assign(job.job_id)
    start = time.monotonic()
    assert present(store.wait_for_result(job.job_id, timeout_s=5)).status == "cancelled"
    assert time.monotonic() - start < 1


def test_wait_for_result_wakes_when_another_store_finishes_the_job(db_url: URL) -> None:
    with HubStore.open(db_url) as supervisor, HubStore.open(db_url) as worker:
        job = supervisor.assign_async("lead", "w1", max_retries=1)

        def work() -> None:
            time.sleep(0.3)
            claimed = present(worker.claim_next_assign("w1"))
            worker.finish_assign(claimed, "failed", error={"first": True})  # retried
            time.sleep(0.3)
            again = present(worker.claim_next_assign("w1"))
            worker.finish_assign(again, "succeeded", result={"n": 2})

        thread = threading.Thread(target=work)
        thread.start()
        try:
            done = present(supervisor.wait_for_result(job.job_id, timeout_s=10))
        finally:
            thread.join()
        assert (done.status, done.attempt, done.result) == ("succeeded", 2, {"n": 2})


def test_wait_for_result_times_out_with_none(store: HubStore) -> None:
    job = store.assign_async("lead", "w1")
    start = time.monotonic()
    assert store.wait_for_result(job.job_id, timeout_s=0.4) is None
    waited = time.monotonic() - start
    assert 0.4 <= waited < 0.9


def test_wait_for_result_of_an_unknown_job_raises(store: HubStore) -> None:
    with pytest.raises(AssignNotFound):
        store.wait_for_result("no-such-job", timeout_s=0)


def test_wait_for_result_ends_a_dead_workers_job_itself(store: HubStore) -> None:
    """No claimer, no sweeper: the job's deadline passes, and the wait times it out."""
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=0,
                                      deadline_ms=now_ms() + 500)
    done = present(store.wait_for_result(stalled.job_id, timeout_s=10))
    assert done.status == "timed_out"
    assert now_ms() - (stalled.deadline_ms or 0) < 2_000


@pytest.mark.asyncio
async def test_async_wait_for_result_and_cancel(db_url: URL) -> None:
    async with await AsyncHubStore.open(db_url) as store:
        job = await store.assign_async("lead", "w1")
        assert await store.wait_for_result(job.job_id, timeout_s=0.2) is None

        async def cancel_later() -> None:
            await store.run_sync(lambda s: time.sleep(0.2))
            await store.cancel_assign(job.job_id, reason="async")

        import asyncio

        task = asyncio.create_task(cancel_later())
        done = present(await store.wait_for_result(job.job_id, timeout_s=10))
        await task
        assert (done.status, done.error) == ("cancelled", {"message": "assign job cancelled",
                                                           "reason": "async"})
        async with store.unit_of_work() as uow:
            assert (await uow.get_assign(job.job_id)) is not None
