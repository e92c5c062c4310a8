"""Batch calls of the job queue: many jobs enqueued, claimed and reported in one call,
each job claimed exactly once, a failing batch leaving nothing behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.errors import StaleAttempt, ValidationError
from hubstore.models import AssignJob


def test_assign_many_creates_every_job_and_its_dispatch_in_one_go(store: HubStore) -> None:
    jobs = store.assign_many("lead", "w1", [{"task": "a"}, {"task": "b", "priority": 9},
                                            {"task": "c", "payload": {"n": 3}}])
    assert [job.task for job in jobs] == ["a", "b", "c"]
    assert all(job.last_message_id is not None for job in jobs)
    handoffs = {m.payload["assign_job_id"] for m in store.poll_for_agent("w1")}
    assert handoffs == {job.job_id for job in jobs}
    assert [j.job_id for j in store.list_assigns(worker_agent="w1", limit=10)] == [
        j.job_id for j in sorted(jobs, key=lambda j: (j.updated_at_ms, j.job_id),
                                 reverse=True)]


@pytest.mark.parametrize("bad", [[{"task": "ok"}, {"taks": "typo"}],
                                 [{"task": "ok"}, {"task": 5}],
                                 [{"task": "ok"}, "not a mapping"], [], "jobs"])
def test_a_bad_batch_writes_nothing(store: HubStore, bad: object) -> None:
    with pytest.raises(ValidationError):
        store.assign_many("lead", "w1", bad)  # type: ignore[arg-type]
    assert store.list_assigns() == [] and store.poll_for_agent("w1") == []


def test_claim_next_assigns_takes_the_best_due_jobs_in_order(store: HubStore) -> None:
    made = store.assign_many("lead", "w1", [{"task": str(i), "priority": p}
                                            for i, p in enumerate([1, 9, 5, 9, 3])])
    store.create_assign("lead", "w2", task="other worker")
    first = store.claim_next_assigns("w1", 3)
    assert [job.priority for job in first] == [9, 9, 5]
    assert [job.task for job in first] == ["1", "3", "2"]
    assert all(job.status == "running" and job.started_at_ms for job in first)
    rest = store.claim_next_assigns("w1", 10)
    assert [job.task for job in rest] == ["4", "0"]
    assert store.claim_next_assigns("w1", 10) == []
    assert {j.job_id for j in first + rest} == {j.job_id for j in made}
    with pytest.raises(ValidationError, match="limit"):
        store.claim_next_assigns("w1", 0)


def test_report_assign_results_is_all_or_nothing(store: HubStore) -> None:
    store.assign_many("lead", "w1", [{"task": str(i)} for i in range(4)])
    claimed = store.claim_next_assigns("w1", 4)
    good = [{"job_id": job.job_id, "status": "succeeded", "attempt": job.attempt,
             "result": {"i": i}} for i, job in enumerate(claimed[:3])]
    stale = {"job_id": claimed[3].job_id, "status": "succeeded", "attempt": 7}
    with pytest.raises(StaleAttempt):
        store.report_assign_results([*good, stale], worker_agent="w1")
    assert {j.status for j in store.list_assigns(worker_agent="w1")} == {"running"}
    outcomes = store.report_assign_results(good, worker_agent="w1")
    assert [o.event for o in outcomes] == ["completed"] * 3
    assert [o.job.result for o in outcomes] == [{"i": 0}, {"i": 1}, {"i": 2}]
    with pytest.raises(ValidationError, match="unknown"):
        store.report_assign_results([{"job_id": claimed[3].job_id, "state": "x"}])


@pytest.fixture
def second_store(db_url: URL) -> Iterator[HubStore]:
    with HubStore.open(db_url) as other:
        yield other


def test_concurrent_batch_claimers_never_share_a_job(store: HubStore,
                                                     second_store: HubStore) -> None:
    made = store.assign_many("lead", "w1", [{"task": str(i)} for i in range(60)])
    got: list[list[AssignJob]] = [[], []]

    def claimer(hub: HubStore, into: list[AssignJob]) -> None:
        while batch := hub.claim_next_assigns("w1", 7):
            into.extend(batch)

    threads = [threading.Thread(target=claimer, args=(hub, into))
               for hub, into in ((store, got[0]), (second_store, got[1]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [job.job_id for job in got[0] + got[1]]
    assert len(ids) == len(set(ids)) == len(made)


def test_wait_for_assigns_wakes_for_jobs_queued_elsewhere(store: HubStore,
                                                          second_store: HubStore) -> None:
    timer = threading.Timer(0.3, lambda: second_store.assign_many(
        "lead", "w1", [{"task": "x"}, {"task": "y"}]))
    timer.start()
    started = time.monotonic()
    jobs = store.wait_for_assigns("w1", 5, timeout_s=10)
    timer.join()
    assert sorted(job.task for job in jobs) == ["x", "y"]
    assert time.monotonic() - started < 5
    assert store.wait_for_assigns("w1", 5, timeout_s=0.2) == []


def test_the_async_store_has_the_batch_calls(db_url: URL) -> None:
    async def main() -> None:
        async with await AsyncHubStore.open(db_url) as hub:
            jobs = await hub.assign_many("lead", "w1", [{"task": "a"}, {"task": "b"}])
            claimed = await hub.wait_for_assigns("w1", 5, timeout_s=5)
            assert {j.job_id for j in claimed} == {j.job_id for j in jobs}
            outcomes = await hub.report_assign_results(
                [{"job_id": j.job_id, "status": "succeeded", "attempt": j.attempt}
                 for j in claimed], worker_agent="w1")
            assert [o.job.status for o in outcomes] == ["succeeded", "succeeded"]
            assert await hub.claim_next_assigns("w1", 5) == []

    asyncio.run(main())
