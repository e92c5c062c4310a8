"""Who holds a job, and a timeout that counts the run only (issue 40 points 11 and 4,
revision 0020).

Every claim records its claimer in ``claimed_by``: the id the worker gives
(``claimed_by=``), else the claiming process's ``host:pid``. A job made with
``timeout_from="claim"`` has no deadline while queued, so time in the queue never spends
a retry or times it out; each claim starts its ``timeout_ms``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, ValidationError, migrations
from hubstore.aio import AsyncHubStore
from hubstore.ids import now_ms
from tests.helpers import present

HERE = f"{socket.gethostname()}:{os.getpid()}"


# --- the claimer -------------------------------------------------------------------------

def test_a_claim_records_this_process_by_default(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", task="t")
    assert job.claimed_by is None
    claimed = present(store.claim_next_assign("w1"))
    assert claimed.claimed_by == HERE
    assert present(store.get_assign(job.job_id)).claimed_by == HERE


def test_a_worker_names_its_claims(store: HubStore) -> None:
    for i in range(4):
        store.assign_async("lead", "w1", task=f"t{i}")
    one = present(store.claim_next_assign("w1", claimed_by="worker-7 (pod a)"))
    two = store.claim_next_assigns("w1", 2, claimed_by="worker-8")
    waited = present(store.wait_for_assign("w1", timeout_s=1, claimed_by="worker-9"))
    assert [one.claimed_by, *(j.claimed_by for j in two), waited.claimed_by] == [
        "worker-7 (pod a)", "worker-8", "worker-8", "worker-9"]
    listed = {job.job_id: job.claimed_by for job in store.list_assigns()}
    assert listed[one.job_id] == "worker-7 (pod a)"


def test_the_latest_claim_names_the_claimer_and_a_finish_keeps_it(store: HubStore) -> None:
    store.assign_async("lead", "w1", task="t", max_retries=1)
    first = present(store.claim_next_assign("w1", claimed_by="a"))
    store.finish_assign(first, "failed", error={"m": "boom"})
    retried = present(store.get_assign(first.job_id))
    assert (retried.status, retried.claimed_by) == ("queued", "a")
    second = present(store.claim_next_assign("w1", claimed_by="b"))
    done = store.finish_assign(second, "succeeded").job
    assert (done.status, done.claimed_by) == ("succeeded", "b")


@pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800", 7, b"w"])
def test_a_bad_claimer_is_refused_and_nothing_is_claimed(store: HubStore, bad: object) -> None:
    job = store.assign_async("lead", "w1", task="t")
    with pytest.raises(ValidationError, match="claimed_by"):
        store.claim_next_assign("w1", claimed_by=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="claimed_by"):
        store.claim_next_assigns("w1", claimed_by=bad)  # type: ignore[arg-type]
    assert present(store.get_assign(job.job_id)).status == "queued"


def test_a_claim_from_another_process_names_that_process(store: HubStore,
                                                         db_url: URL) -> None:
    job = store.assign_async("lead", "w1", task="t")
    code = ("import sys; from hubstore import HubStore\n"
            "with HubStore.open(sys.argv[1]) as s:\n"
            "    print(s.claim_next_assign('w1').claimed_by)\n")
    run = subprocess.run([sys.executable, "-c", code,
                          db_url.render_as_string(hide_password=False)],
                         capture_output=True, text=True, timeout=120, check=True)
    host, pid = run.stdout.strip().rsplit(":", 1)
    assert host == socket.gethostname() and int(pid) != os.getpid()
    assert present(store.get_assign(job.job_id)).claimed_by == run.stdout.strip()


def test_the_async_store_records_claimers(db_url: URL) -> None:
    async def main() -> list[str | None]:
        async with await AsyncHubStore.open(db_url) as store:
            for i in range(3):
                await store.assign_async("lead", "w1", task=f"t{i}")
            one = await store.claim_next_assign("w1")
            two = await store.claim_next_assigns("w1", 1, claimed_by="aw")
            three = await store.wait_for_assign("w1", timeout_s=1, claimed_by="aw2")
            return [present(one).claimed_by, two[0].claimed_by, present(three).claimed_by]

    assert asyncio.run(main()) == [HERE, "aw", "aw2"]


# --- the run timeout ---------------------------------------------------------------------

def test_by_default_time_in_the_queue_counts_as_in_the_reference(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", task="t", timeout_ms=5_000)
    assert job.timeout_from == "create"
    assert job.deadline_ms == job.created_at_ms + 5_000
    swept = store.sweep_timed_out_assigns(now_ms=job.created_at_ms + 6_000)
    assert swept["timed_out"] == 1


def test_a_run_timeout_never_expires_in_the_queue(store: HubStore) -> None:
    job = store.assign_async("lead", "w1", task="t", timeout_ms=5_000,
                             timeout_from="claim", max_retries=1)
    assert (job.timeout_from, job.deadline_ms) == ("claim", None)
    later = job.created_at_ms + 10**9
    assert store.sweep_timed_out_assigns(now_ms=later) == {"timed_out": 0, "retried": 0}
    assert present(store.get_assign(job.job_id)).status == "queued"
    claimed = present(store.claim_next_assign("w1"))
    assert claimed.started_at_ms is not None
    assert claimed.deadline_ms == claimed.started_at_ms + 5_000
    # The run times out 5 s after the claim, is retried, and waits queued without a
    # deadline again; the next claim starts the next run's timeout.
    swept = store.sweep_timed_out_assigns(now_ms=claimed.started_at_ms + 6_000)
    assert swept == {"timed_out": 1, "retried": 1}
    queued = present(store.get_assign(job.job_id))
    assert (queued.status, queued.attempt, queued.deadline_ms) == ("queued", 2, None)
    again = present(store.claim_next_assign("w1"))
    assert again.deadline_ms == present(again.started_at_ms) + 5_000


def test_a_run_timeout_on_every_call_that_makes_jobs(store: HubStore) -> None:
    made = [store.create_assign("lead", "w1", task="a", timeout_from="claim"),
            *store.assign_many("lead", "w1", [{"task": "b", "timeout_from": "claim"},
                                              {"task": "c"}])]
    assert [(j.timeout_from, j.deadline_ms is None) for j in made] == [
        ("claim", True), ("claim", True), ("create", False)]
    explicit = store.assign_async("lead", "w1", task="d", timeout_from="claim",
                                  deadline_ms=now_ms() + 60_000)
    assert explicit.deadline_ms is not None  # a deadline given is kept


def test_a_manual_retry_of_a_run_timeout_job_waits_without_a_deadline(store: HubStore) -> None:
    store.assign_async("lead", "w1", task="t", timeout_from="claim", max_retries=2)
    claimed = present(store.claim_next_assign("w1"))
    store.finish_assign(claimed, "failed")
    queued = present(store.get_assign(claimed.job_id))
    assert (queued.status, queued.deadline_ms) == ("queued", None)


@pytest.mark.parametrize("bad", ["run", "", None, 1, "CLAIM"])
def test_a_bad_timeout_from_is_refused(store: HubStore, bad: object) -> None:
    with pytest.raises(ValidationError, match="timeout_from"):
        store.assign_async("lead", "w1", task="t", timeout_from=bad)  # type: ignore[arg-type]
    assert store.list_assigns() == []


# --- revision 0020 -----------------------------------------------------------------------

def test_down_to_0019_and_up_again_keeps_every_job(db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        done = present(store.claim_next_assign(
            store.assign_async("lead", "w1", task="t").worker_agent, claimed_by="x"))
        store.finish_assign(done, "succeeded")
        runs = store.assign_async("lead", "w2", task="u", timeout_from="claim")
    with pytest.raises(RuntimeError, match="time their run from the claim"):
        migrations.downgrade(db_url, "0019")
    assert migrations.current(db_url) == migrations.head()  # refused: nothing moved
    with HubStore.open(db_url) as store:
        store.cancel_assign(runs.job_id)
    migrations.downgrade(db_url, "0019")
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM assign_jobs")).scalar_one() == 2
            # A job the reference would write (it names its own columns only).
            conn.execute(text(
                "INSERT INTO assign_jobs (job_id, supervisor_agent, worker_agent, status, "
                "trace_id, correlation_id, created_at_ms, updated_at_ms) VALUES "
                "('ref-1', 'lead', 'w3', 'queued', 't', 'c', 1, 1)"))
            conn.commit()
    finally:
        engine.dispose()
    migrations.upgrade(db_url)
    with HubStore.open(db_url) as store:
        jobs = {job.job_id: job for job in store.list_assigns()}
        assert jobs[done.job_id].claimed_by is None  # (below 0020 nobody recorded it)
        assert jobs["ref-1"].timeout_from == "create"
        assert len(jobs) == 3
