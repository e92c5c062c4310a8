"""Unique jobs and periodic jobs (issue 30): an assign with the unique key of a queued
or running job returns that job, race-free and in batches; a schedule queues one job
per tick however many processes run it, and one for the ticks missed while none did."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hubstore import DuplicateKey, HubStore, ValidationError
from hubstore.ids import now_ms
from hubstore.maintenance import sweep_once
from hubstore.models import AssignJob
from hubstore.services.assigns.schedules import latest_tick, next_tick
from tests.helpers import present

# --- unique jobs ---------------------------------------------------------------------


def test_a_unique_key_held_by_a_live_job_returns_that_job(store: HubStore) -> None:
    first = store.assign_async("lead", "w", task="build", unique_key="build-42")
    again = store.assign_async("lead", "w", task="build again", unique_key="build-42")
    assert (first.deduplicated, again.deduplicated) == (False, True)
    assert again.job_id == first.job_id and again.task == "build"
    assert len(store.list_assigns()) == 1
    assert len([m for m in store.get_messages_by_trace(first.trace_id)
                if m.type == "handoff"]) == 1  # dispatched once
    claimed = present(store.claim_next_assign("w"))
    assert store.assign_async("lead", "w", unique_key="build-42").job_id == first.job_id
    store.finish_assign(claimed, "succeeded")
    later = store.assign_async("lead", "w", task="next", unique_key="build-42")
    assert not later.deduplicated and later.job_id != first.job_id  # the key is free


def test_create_assign_and_batches_keep_the_key(store: HubStore) -> None:
    made = store.create_assign("lead", "w", unique_key="k")
    assert store.create_assign("lead", "w", unique_key="k").job_id == made.job_id
    batch = store.assign_many("lead", "w", [{"task": "a", "unique_key": "b1"},
                                            {"task": "b", "unique_key": "b1"},
                                            {"task": "c", "unique_key": "k"},
                                            {"task": "d"}])
    assert [job.deduplicated for job in batch] == [False, True, True, False]
    assert batch[0].job_id == batch[1].job_id and batch[2].job_id == made.job_id
    assert len(store.list_assigns()) == 3


def test_a_unique_key_with_a_job_id_retries_safely(store: HubStore) -> None:
    """The retry of an assign whose outcome was unknown: the same unique key (and job
    id) returns the job while it lives; once it ended, its job_id says it was written."""
    job = store.assign_async("lead", "w", job_id="req-7", unique_key="req-7")
    assert store.assign_async("lead", "w", job_id="req-7", unique_key="req-7").deduplicated
    store.cancel_assign(job.job_id)
    with pytest.raises(DuplicateKey):
        store.assign_async("lead", "w", job_id="req-7", unique_key="req-7")
    assert len(store.list_assigns()) == 1


def test_a_retry_into_a_taken_key_is_refused(store: HubStore) -> None:
    first = store.assign_async("lead", "w", unique_key="k", max_retries=0)
    store.finish_assign(present(store.claim_next_assign("w")), "failed")
    second = store.assign_async("lead", "w", unique_key="k")
    assert not second.deduplicated
    with pytest.raises(DuplicateKey):
        store.schedule_assign_retry(first.job_id, force=True)
    assert present(store.get_assign(first.job_id)).status == "failed"


@pytest.mark.parametrize("key", ["", 5, "k" * 1_001, "a\x00b"])
def test_a_bad_unique_key_is_refused(store: HubStore, key: object) -> None:
    with pytest.raises(ValidationError, match="unique_key"):
        store.assign_async("lead", "w", unique_key=key)  # type: ignore[arg-type]
    assert store.list_assigns() == []


def test_many_stores_assigning_one_key_at_once_make_one_job(db_url: URL) -> None:
    stores = [HubStore.open(db_url) for _ in range(6)]
    try:
        start = threading.Barrier(len(stores))
        got: list[AssignJob] = []

        def assign(store: HubStore) -> None:
            start.wait()
            got.append(store.assign_async("lead", "w", task="once", unique_key="once"))

        threads = [threading.Thread(target=assign, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({job.job_id for job in got}) == 1
        assert sorted(job.deduplicated for job in got) == [False] + [True] * 5
        assert len(stores[0].list_assigns()) == 1
    finally:
        for store in stores:
            store.close()


# --- periodic jobs -------------------------------------------------------------------

def test_ticks_of_a_cron_rule_and_of_an_interval() -> None:
    at = 1_796_299_230_000  # 2026-12-03 12:00:30 UTC
    assert next_tick("*/5 * * * *", None, at) == 1_796_299_500_000  # 12:05
    assert next_tick(None, 60_000, at) == at + 60_000
    assert latest_tick("*/5 * * * *", None, 1_796_299_500_000, 1_796_299_900_000 + 5) \
        == 1_796_299_800_000  # 12:10, the latest of 12:05 and 12:10
    assert latest_tick(None, 1_000, 10_000, 13_500) == 13_000


def test_a_schedule_queues_one_job_per_tick_and_one_for_missed_ticks(store: HubStore) -> None:
    schedule = store.set_assign_schedule("tick", "lead", "w", every_ms=60_000, task="t",
                                         priority=7, limit_key="k")
    first = schedule.next_due_ms
    assert store.run_due_schedules(now_ms=first - 1) == []
    [job] = store.run_due_schedules(now_ms=first)
    assert (job.task, job.priority, job.limit_key, job.supervisor_agent) == (
        "t", 7, "k", "lead")
    assert store.run_due_schedules(now_ms=first) == []  # once per tick
    after_downtime = first + 10 * 60_000 + 5
    [caught_up] = store.run_due_schedules(now_ms=after_downtime)  # ten ticks missed: one
    again = store.get_assign_schedules()["tick"]
    assert (again.last_due_ms, again.last_job_id, again.next_due_ms) == (
        first + 10 * 60_000, caught_up.job_id, after_downtime + 60_000)


def test_many_stores_running_schedules_queue_each_tick_once(db_url: URL) -> None:
    stores = [HubStore.open(db_url) for _ in range(5)]
    try:
        for k in range(8):
            stores[0].set_assign_schedule(f"s{k}", "lead", "w", every_ms=1_000, task=str(k))
        due = now_ms() + 1_500
        start = threading.Barrier(len(stores))
        queued: list[list[AssignJob]] = []

        def run(store: HubStore) -> None:
            start.wait()
            queued.append(store.run_due_schedules(now_ms=due))

        threads = [threading.Thread(target=run, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        tasks = sorted(job.task for jobs in queued for job in jobs)
        assert tasks == [str(k) for k in range(8)]
        assert len(stores[0].list_assigns(limit=100)) == 8
    finally:
        for store in stores:
            store.close()


def test_maintenance_runs_the_schedules(store: HubStore) -> None:
    store.set_assign_schedule("now", "lead", "w", every_ms=1_000, task="t")
    assert sweep_once(store)["schedules_queued"] == 0
    schedule = store.get_assign_schedules()["now"]
    with store.unit_of_work() as uow:  # make it due now
        from sqlalchemy import text

        uow.connection.execute(text("UPDATE assign_schedules SET next_due_ms = 0"))
    assert sweep_once(store)["schedules_queued"] == 1
    assert store.get_assign_schedules()["now"].next_due_ms > schedule.next_due_ms - 1_000


def test_a_tick_the_unique_key_skips_is_not_counted_as_queued(store: HubStore) -> None:
    """schedules_queued counts the jobs queued, not the ticks (issue 40: 14 reported
    against 8 jobs): a tick whose unique key a live job holds queues nothing."""
    store.set_assign_schedule("now", "lead", "w", every_ms=1_000, task="t", unique_key="u")
    due_now = "UPDATE assign_schedules SET next_due_ms = 0"
    with store.unit_of_work() as uow:
        from sqlalchemy import text

        uow.connection.execute(text(due_now))
    assert sweep_once(store)["schedules_queued"] == 1
    with store.unit_of_work() as uow:
        uow.connection.execute(text(due_now))
    assert store.run_due_schedules() == []
    with store.unit_of_work() as uow:
        uow.connection.execute(text(due_now))
    assert sweep_once(store)["schedules_queued"] == 0
    assert len(store.list_assigns()) == 1


@pytest.mark.parametrize(("kwargs", "named"), [
    ({}, "either cron or every_ms"),
    ({"cron": "* * * * *", "every_ms": 1_000}, "either cron or every_ms"),
    ({"cron": "61 * * * *"}, "cron"), ({"cron": 5}, "cron"), ({"cron": ""}, "cron"),
    # six fields: croniter reads the sixth as seconds, so "0 0 3 * * *" would run on the
    # 3rd of each month (issue 40): anything but five fields is refused
    ({"cron": "0 0 3 * * *"}, "exactly five fields .*not 6"),
    ({"cron": "0 3 * *"}, "exactly five fields .*not 4"),
    ({"every_ms": 999}, "every_ms"), ({"every_ms": "1m"}, "every_ms"),
    ({"every_ms": 1_000, "taks": "typo"}, "taks"),
    ({"every_ms": 1_000, "job_id": "fixed"}, "job_id"),
    ({"every_ms": 1_000, "topic": 5}, "topic"),
    ({"every_ms": 1_000, "payload": {"n": float("nan")}}, "payload|JSON|json"),
    ({"every_ms": 1_000, "limit_key": ""}, "limit_key"),
])
def test_a_bad_schedule_is_refused_before_anything_is_written(
        store: HubStore, kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        store.set_assign_schedule("s", "lead", "w", **kwargs)
    assert store.get_assign_schedules() == {}


def test_a_schedule_is_replaced_and_removed(store: HubStore) -> None:
    store.set_assign_schedule("s", "lead", "w", cron="0 3 * * *", task="a")
    store.set_assign_schedule("s", "lead", "w2", every_ms=5_000, task="b")
    [schedule] = store.get_assign_schedules().values()
    assert (schedule.cron, schedule.every_ms, schedule.worker_agent, schedule.job) == (
        None, 5_000, "w2", {"task": "b"})
    assert store.remove_assign_schedule("s") is True
    assert store.remove_assign_schedule("s") is False
