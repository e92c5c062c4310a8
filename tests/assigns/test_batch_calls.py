"""Batch calls of the job queue: many jobs enqueued, claimed and reported in one call,
each job claimed exactly once, a failing batch leaving nothing behind."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.errors import StaleAttempt, ValidationError
from hubstore.models import AssignJob
from tests.helpers import engine_statements, present


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
                                 [{"task": "ok", 1: "a key of another type", (2,): "x"}],
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


# --- one statement for a batch, the general path where a report needs it --------------

def _strip(row: dict[str, object], *keys: str) -> dict[str, object]:
    return {k: v for k, v in row.items() if k not in keys}


def test_assign_many_writes_the_rows_assign_async_writes(store: HubStore) -> None:
    """PostgreSQL: the jobs and their handoffs in one statement (no BEGIN or COMMIT)."""
    fields: dict[str, Any] = {
        "task": "t", "payload": {"n": [1, 2.5, "x"]}, "priority": 8, "max_retries": 2,
        "timeout_ms": 5_000, "trace_id": "tr", "correlation_id": "co"}
    one = store.assign_async("lead", "w1", **fields)
    seen = engine_statements(store)
    many = store.assign_many("lead", "w1", [fields, {**fields, "task": "u"}])
    if store.dialect == "postgresql":
        assert seen == ["WITH"]
    ids = ("job_id", "last_message_id", "created_at_ms", "updated_at_ms", "deadline_ms")
    assert _strip(many[0].to_dict(), *ids) == _strip(one.to_dict(), *ids)
    assert many[1].task == "u"
    for job in (one, *many):
        assert present(store.get_assign(job.job_id)).to_dict() == job.to_dict()
    handoffs = [present(store.get_message(str(job.last_message_id))) for job in (one, *many)]
    shown = [_strip(m.to_dict(), "id", "created_at_ms", "expires_at_ms") for m in handoffs]
    for job, message in zip((one, *many), shown, strict=True):
        assert isinstance(message["payload"], dict)
        assert message["payload"]["assign_job_id"] == job.job_id
        message["payload"] = _strip(message["payload"], "assign_job_id", "task")
    assert shown[0] == shown[1] == shown[2]


def _claimed(store: HubStore, count: int, **fields: object) -> list[AssignJob]:
    store.assign_many("lead", "w1", [{"task": str(i), **fields} for i in range(count)])
    return store.claim_next_assigns("w1", count)


def test_a_batch_of_routine_reports_is_one_statement(store: HubStore) -> None:
    jobs = _claimed(store, 3)
    seen = engine_statements(store)
    outcomes = store.report_assign_results(
        [{"job_id": j.job_id, "status": "succeeded", "attempt": j.attempt,
          "result": {"i": i}} for i, j in enumerate(jobs)], worker_agent="w1")
    if store.dialect == "postgresql":
        assert seen == ["WITH"]  # autocommit: no BEGIN, no COMMIT
    assert [o.job.job_id for o in outcomes] == [j.job_id for j in jobs]
    assert [(o.event, o.job.status, o.job.result) for o in outcomes] == [
        ("completed", "succeeded", {"i": i}) for i in range(3)]
    for outcome in outcomes:
        assert present(store.get_assign(outcome.job.job_id)).to_dict() == outcome.job.to_dict()
        message = present(outcome.message)
        stored = present(store.get_message(message.id))
        assert stored.to_dict() == message.to_dict()
        assert stored.payload["event"] == "completed"
        assert stored.payload["result"] == outcome.job.result
    assert [j.status for j in store.list_assigns(worker_agent="w1")] == ["succeeded"] * 3


def test_reports_that_need_the_general_path_are_taken_in_order(store: HubStore) -> None:
    once, retried = _claimed(store, 2, max_retries=1)[::-1]
    store.report_assign_result(once.job_id, "succeeded", attempt=once.attempt)
    outcomes = store.report_assign_results([
        {"job_id": once.job_id, "status": "succeeded"},  # the same report again: no-op
        {"job_id": retried.job_id, "status": "failed", "error": {"e": 1}},  # a retry
    ], worker_agent="w1")
    assert [o.event for o in outcomes] == ["completed", "retry_scheduled"]
    assert outcomes[0].message is None
    again = present(store.get_assign(retried.job_id))
    assert (again.status, again.retry_count, again.attempt) == ("queued", 1, 2)
    twice = store.report_assign_results(  # one job twice in a batch: the second is a no-op
        [{"job_id": j.job_id, "status": "succeeded"} for j in [*_claimed(store, 1)] * 2])
    assert [o.event for o in twice] == ["completed", "completed"]
    assert twice[0].message is not None and twice[1].message is None
    statuses = sorted(j.status for j in store.list_assigns(worker_agent="w1"))
    assert statuses == ["queued", "succeeded", "succeeded"]


@pytest.mark.parametrize("bad", [[{"status": "succeeded"}], [{"job_id": "x"}],
                                 [{"job_id": "x", "status": "failed", 1: "y", (2,): "z"}],
                                 [{"job_id": "x", "status": "succeeded"}, {"status": "failed"}],
                                 [{"job_id": "x", "status": "succeeded"},
                                  {"job_id": "y", "status": "bogus"}]])
def test_a_bad_report_anywhere_in_a_batch_is_refused_first(
        store: HubStore, bad: list[dict[str, str]]) -> None:
    [job] = _claimed(store, 1)
    with pytest.raises(ValidationError, match=r"report|status"):
        store.report_assign_results([{"job_id": job.job_id, "status": "succeeded"}, *bad])
    assert present(store.get_assign(job.job_id)).status == "running"


def test_batch_reporters_crossing_the_same_jobs_finish_each_once(
        store: HubStore, second_store: HubStore) -> None:
    """Two reporters send the same final reports in opposite orders, many rounds: the
    jobs are locked in one order, so neither waits for the other for ever, and each job
    ends with one 'completed' event."""
    for _ in range(15):
        jobs = _claimed(store, 4)
        reports = [{"job_id": j.job_id, "status": "succeeded"} for j in jobs]
        errors: list[BaseException] = []

        def report(hub: HubStore, batch: list[dict[str, object]],
                   errors: list[BaseException]) -> None:
            try:
                hub.report_assign_results(batch)
            except BaseException as exc:  # (told to the test's thread below)
                errors.append(exc)

        threads = [threading.Thread(target=report, args=(store, reports, errors)),
                   threading.Thread(target=report, args=(second_store, reports[::-1], errors))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == [] and not any(t.is_alive() for t in threads)
        for job in jobs:
            events = [m for m in store.get_messages_by_trace(job.trace_id)
                      if m.type == "event" and m.payload.get("event") == "completed"]
            assert len(events) == 1


def _explained(store: HubStore, call: Callable[[], object], marker: str) -> str:
    """The plan of the statement holding ``marker`` that ``call`` made the store run,
    explained (and run again) in a transaction rolled back, with sequential scans
    priced out: on a small table a scan is the planner's cheapest way either way, so
    the plan shows how the statement finds its rows once the table is not small."""
    ran: list[tuple[str, Any]] = []

    def capture(_c: object, _cur: object, statement: str, parameters: Any,
                *_: object) -> None:
        if marker in statement:
            ran.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        call()
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    [(statement, parameters)] = ran
    with store.engine.connect() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(row[0] for row in conn.exec_driver_sql(
            f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {statement}", parameters))
        conn.rollback()
    return plan


def _many_active_jobs(store: HubStore) -> list[AssignJob]:
    """600 active jobs of another worker, then 10 of w1's, claimed; analyzed."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite takes a batch job by job, each by key")
    store.assign_many("lead", "other", [{"task": str(i)} for i in range(600)])
    store.claim_next_assigns("other", 300)
    store.assign_many("lead", "w1", [{"task": str(i)} for i in range(40)])
    with store.unit_of_work() as uow:
        uow.connection.exec_driver_sql("ANALYZE assign_jobs")
    return store.claim_next_assigns("w1", 10)


def _by_key(plan: str) -> bool:
    """Whether the plan looks jobs up by their ids (the primary key, job_id = ANY)."""
    return bool(re.search(r"Index Cond: \(job_id = ANY", plan))


def test_a_batch_claim_finds_its_jobs_by_key_however_many_are_queued(
        store: HubStore) -> None:
    """PostgreSQL: the claim picks by the claim index, then updates by primary key; an
    IN semi-join was planned as a scan of every queued job."""
    _many_active_jobs(store)
    plan = _explained(store, lambda: store.claim_next_assigns("w1", 10), "UPDATE")
    assert "Index Scan using ix_assign_jobs_claim" in plan and _by_key(plan), plan


def test_a_batch_report_finds_its_jobs_by_key_however_many_are_active(
        store: HubStore) -> None:
    """PostgreSQL: the batch report looks its jobs up by primary key; a join on the
    reports alone was planned as a scan of every active job (each batch reading them
    all)."""
    jobs = _many_active_jobs(store)
    plan = _explained(store, lambda: store.report_assign_results(
        [{"job_id": j.job_id, "status": "succeeded"} for j in jobs]), "jsonb_to_recordset")
    assert _by_key(plan) and "idx_assign_jobs_status" not in plan, plan


def _fetched_by(store: HubStore, call: Callable[[Any], Any]) -> tuple[int, Any]:
    """The rows of assign_jobs ``call(uow)`` fetched through indexes
    (pg_stat_xact_user_tables: this transaction's own count, exact), and what it
    returned."""
    count = text("SELECT coalesce(sum(idx_tup_fetch), 0) "
                 "FROM pg_stat_xact_user_tables WHERE relname = 'assign_jobs'")
    with store.unit_of_work() as uow:
        before = uow.connection.execute(count).scalar_one()
        got = call(uow)
        return int(uow.connection.execute(count).scalar_one() - before), got


@pytest.mark.parametrize("batch", [1, 10])
def test_claims_and_reports_read_a_few_rows_a_job_on_a_table_never_analyzed(
        store: HubStore, batch: int) -> None:
    """PostgreSQL, on a jobs table no ANALYZE has seen (a new hub, a benchmark): after
    hundreds of claims, whose claimed rows leave dead entries in the claim and status
    indexes, a claim and a batch report still find their jobs by key. A status guard
    beside the keys made the planner read every queued (or active) job instead: a
    thousand rows a job."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite takes a batch job by job, each by key")
    for first in range(0, 800, 100):
        store.assign_many("lead", "w1", [{"task": str(i)} for i in range(first, first + 100)])
    for _ in range(30):
        done = store.claim_next_assigns("w1", 10)
        store.report_assign_results([{"job_id": j.job_id, "status": "succeeded"}
                                     for j in done], worker_agent="w1")
    store.db.rescue_at_ms = 2**62  # (the look for stalled jobs, once a second, aside)
    fetched, claimed = _fetched_by(store, lambda uow: uow.claim_next_assigns("w1", batch))
    assert len(claimed) == batch and fetched <= 5 * batch + 10, fetched
    reported, _ = _fetched_by(store, lambda uow: uow.report_assign_results(
        [{"job_id": j.job_id, "status": "succeeded"} for j in claimed], worker_agent="w1"))
    assert reported <= 5 * batch + 10, reported
