"""Assign jobs raced by real processes, on a SQLite file and on PostgreSQL.

Each child is a fresh interpreter (the "spawn" start method) that opens its own HubStore
on the test's database, waits at a barrier so that all of them start together, and
sends back what it did and every exception it met. The parent then checks the rows and
the recorded messages: each job claimed once, exactly one consistent final state, at
most one "completed" event, no lost update.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.errors import IllegalTransition, StaleAttempt
from hubstore.ids import now_ms
from hubstore.models import AssignJob, Message

pytestmark = pytest.mark.slow

SPAWN = multiprocessing.get_context("spawn")
#: Generous bounds that only stop a hung test; nothing asserts on time.
BARRIER_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 120.0
#: Refusals a racing reporter may meet; anything else is an error.
EXPECTED_REFUSALS = (StaleAttempt, IllegalTransition)
TIMED_OUT_ERROR = {"message": "assign job timed out"}


@dataclass
class ChildReport:
    """What one child did: its own records, and every unexpected exception."""

    records: list[tuple[Any, ...]] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)


Work = Callable[[HubStore, int, Barrier, ChildReport], None]


def _child(work_name: str, url: str, index: int, start: Barrier, sync: Barrier,
           results: multiprocessing.Queue[tuple[int, ChildReport]]) -> None:
    """Entry point of a child process: open a store, wait for the others, work.

    ``start`` is passed twice by every child and by the parent: once when all are
    ready, once more after the parent's last preparation. ``sync`` is the children's
    own barrier, for work in rounds.
    """
    report = ChildReport()
    try:
        work: Work = globals()[work_name]
        with HubStore.open(url) as store:
            start.wait(BARRIER_TIMEOUT_S)
            start.wait(BARRIER_TIMEOUT_S)
            report.started = time.time()
            work(store, index, sync, report)
            report.finished = time.time()
    except BaseException:
        report.errors.append(traceback.format_exc())
    results.put((index, report))


def run_children(url: URL, work: Work, count: int,
                 before_start: Callable[[], object] = lambda: None) -> list[ChildReport]:
    """Run ``work`` in ``count`` spawned processes, all released at once after
    ``before_start`` ran in the parent; fail on any error they report."""
    start, sync = SPAWN.Barrier(count + 1), SPAWN.Barrier(count)
    results: multiprocessing.Queue[tuple[int, ChildReport]] = SPAWN.Queue()
    text_url = url.render_as_string(hide_password=False)
    processes = [SPAWN.Process(target=_child, args=(work.__name__, text_url, i, start, sync,
                                                    results), daemon=True)
                 for i in range(count)]
    for process in processes:
        process.start()
    reports: dict[int, ChildReport] = {}
    try:
        try:
            start.wait(BARRIER_TIMEOUT_S)  # every child has opened its store
            before_start()
            start.wait(BARRIER_TIMEOUT_S)
        except BaseException:
            start.abort()
            raise
        for _ in processes:
            try:
                index, report = results.get(timeout=RESULT_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"a child sent no report; exit codes "
                            f"{[p.exitcode for p in processes]}")
            reports[index] = report
    finally:
        for process in processes:
            process.join(timeout=BARRIER_TIMEOUT_S)
            if process.is_alive():
                process.kill()
    errors = {i: r.errors for i, r in reports.items() if r.errors}
    assert errors == {}, "\n".join(e for errs in errors.values() for e in errs)
    assert [p.exitcode for p in processes] == [0] * count
    return [reports[i] for i in range(count)]


def refused(report: ChildReport, error: Exception) -> None:
    """Count an expected refusal; anything else is re-raised by the caller."""
    report.refusals[type(error).__name__] += 1


def all_jobs(store: HubStore) -> dict[str, AssignJob]:
    with store.unit_of_work(write=False) as uow:
        return {job.job_id: job for job in uow.session.scalars(select(AssignJob))}


def messages_by_job(store: HubStore) -> dict[str, list[Message]]:
    """Handoffs and supervisor events, grouped by their job, oldest first."""
    grouped: dict[str, list[Message]] = defaultdict(list)
    with store.unit_of_work(write=False) as uow:
        for message in uow.session.scalars(
                select(Message).order_by(Message.created_at_ms, Message.id)):
            job_id = message.payload.get("assign_job_id") or message.payload.get("job_id")
            grouped[job_id].append(message)
    return grouped


def kinds(messages: list[Message]) -> Counter[str]:
    """handoff / progress / completed / retry_scheduled counts."""
    return Counter("handoff" if m.type == "handoff" else m.payload["event"] for m in messages)


def throughput(reports: list[ChildReport], jobs: int) -> float:
    span = max(r.finished for r in reports) - min(r.started for r in reports)
    return jobs / span if span > 0 else float("inf")


# --- 1. claim and complete: six claimers, one worker queue ------------------------------

CLAIM_JOBS = 300
CLAIMERS = 6


def claim_and_complete(store: HubStore, index: int, barrier: Barrier,
                       report: ChildReport) -> None:
    """Claim until the queue is empty; complete each claimed job at once."""
    while (job := store.claim_next_assign("w")) is not None:
        outcome = store.report_assign_result(job.job_id, "succeeded", worker_agent="w",
                                             attempt=job.attempt, result={"by": index})
        report.records.append((job.job_id, job.attempt, outcome.event,
                               outcome.message is not None))


def test_each_job_is_claimed_exactly_once(store: HubStore, db_url: URL,
                                          backend: str) -> None:
    with store.unit_of_work() as uow:
        created = {uow.assign_async("lead", "w", task=f"t{i}", priority=1 + i % 9).job_id
                   for i in range(CLAIM_JOBS)}

    reports = run_children(db_url, claim_and_complete, CLAIMERS)

    claims = [(job_id, i) for i, r in enumerate(reports) for job_id, *_ in r.records]
    claimed = Counter(job_id for job_id, _ in claims)
    assert set(claimed) == created
    assert [job_id for job_id, n in claimed.items() if n != 1] == []
    for r in reports:
        assert all(attempt == 1 and event == "completed" and recorded
                   for _, attempt, event, recorded in r.records)
        assert not r.refusals
    claimer = dict(claims)
    jobs, messages = all_jobs(store), messages_by_job(store)
    for job_id, job in jobs.items():
        assert (job.status, job.attempt, job.result) == (
            "succeeded", 1, {"by": claimer[job_id]}), job_id
        assert kinds(messages[job_id]) == {"handoff": 1, "completed": 1}, job_id
    print(f"\n[{backend}] {CLAIMERS} processes claimed and completed {CLAIM_JOBS} jobs: "
          f"{throughput(reports, CLAIM_JOBS):.0f} jobs/s; per process "
          f"{[len(r.records) for r in reports]}")


# --- 2. conflicting reports: four workers disagree about the same jobs ------------------

CONFLICT_JOBS = 60
REPORTERS = 4
#: What each reporter claims about a job: (status, metadata), rotated per job.
VERDICTS: list[tuple[str, dict[str, str] | None]] = [
    ("succeeded", None), ("failed", None), ("timed_out", None),
    ("completed", {"outcome": "timeout"}),
]
NORMALIZED = {"succeeded": "succeeded", "failed": "failed", "timed_out": "timed_out",
              "completed": "timed_out"}


def report_conflicts(store: HubStore, index: int, barrier: Barrier,
                     report: ChildReport) -> None:
    """Two rounds (attempt 1, then attempt 2): for every job, in an order of this
    process's own, a progress report and then this process's verdict."""
    job_ids = sorted(j.job_id for j in store.list_assigns(worker_agent="w", limit=100))
    order = random.Random(index).sample(range(len(job_ids)), len(job_ids))
    for attempt in (1, 2):
        for n in order:
            job_id = job_ids[n]
            status, metadata = VERDICTS[(index + n) % len(VERDICTS)]
            for reported in ("running", status):
                try:
                    outcome = store.report_assign_result(
                        job_id, reported, worker_agent="w", attempt=attempt,
                        result={"by": index, "attempt": attempt},
                        metadata=metadata if reported == status else None)
                except EXPECTED_REFUSALS as error:
                    refused(report, error)
                    continue
                report.records.append((job_id, attempt, NORMALIZED.get(reported, reported),
                                       outcome.event, outcome.message is not None, index))
        barrier.wait(BARRIER_TIMEOUT_S)  # round 1 is over everywhere before round 2


def test_conflicting_reports_leave_one_consistent_state(store: HubStore, db_url: URL,
                                                        backend: str) -> None:
    with store.unit_of_work() as uow:
        for i in range(CONFLICT_JOBS):
            uow.assign_async("lead", "w", task=f"t{i}", max_retries=1)
    while store.claim_next_assign("w") is not None:
        pass

    reports = run_children(db_url, report_conflicts, REPORTERS)

    accepted = [record for r in reports for record in r.records]
    jobs, messages = all_jobs(store), messages_by_job(store)
    assert len(jobs) == CONFLICT_JOBS
    for job_id, job in jobs.items():
        mine = [rec for rec in accepted if rec[0] == job_id]
        # Exactly one report per attempt moved the job to a final status.
        winners = [rec for rec in mine if rec[3] in ("completed", "retry_scheduled")
                   and rec[4]]
        first = [w for w in winners if w[1] == 1]
        assert len(first) == 1, (job_id, winners)
        _, _, verdict, event, _, by = first[0]
        if verdict == "succeeded":
            assert event == "completed"
            assert (job.status, job.attempt, job.retry_count) == ("succeeded", 1, 0)
            assert job.result == {"by": by, "attempt": 1}
            assert [w for w in winners if w[1] == 2] == []
        else:
            assert event == "retry_scheduled"
            [second] = [w for w in winners if w[1] == 2]
            assert second[3] == "completed"
            assert (job.status, job.attempt, job.retry_count) == (second[2], 2, 1)
            assert job.result == {"by": second[5], "attempt": 2}
        # The recorded messages agree with the accepted reports, one for one.
        expected = Counter({"handoff": 1 + job.retry_count, "completed": 1,
                            "retry_scheduled": job.retry_count,
                            "progress": sum(1 for rec in mine if rec[3] == "progress")})
        assert kinds(messages[job_id]) == +expected, job_id
        # A no-op repeat records nothing; a refused report changes nothing.
        assert all(rec[2] == job.status for rec in mine
                   if rec[3] == "completed" and not rec[4] and rec[1] == job.attempt)
    refusals = sum((r.refusals for r in reports), Counter[str]())
    print(f"\n[{backend}] {REPORTERS} reporters: {len(accepted)} reports accepted, "
          f"refused {dict(refusals)}; final {dict(Counter(j.status for j in jobs.values()))}")


# --- 3. a sweeper races the workers near the deadline ------------------------------------

SWEEP_JOBS = 80
SWEEP_WORKERS = 3
TIMEOUT_MS = 1_000
#: The sweeper's clock runs this far ahead, so that a job whose deadline was set (by its
#: creation, a retry or a progress report) more than SLACK_MS ago is due.
SLACK_MS = 30
STAGGER_MS = 3


def _active(store: HubStore) -> bool:
    return bool(store.list_assigns(statuses=["queued", "running"], limit=1))


def sweep_until_done(store: HubStore, index: int, barrier: Barrier,
                     report: ChildReport) -> None:
    """Sweep, with the clock just past the deadlines, until no job is active."""
    timed_out = retried = sweeps = 0
    while _active(store):
        counts = store.sweep_timed_out_assigns(now_ms=now_ms() + TIMEOUT_MS - SLACK_MS)
        timed_out += counts["timed_out"]
        retried += counts["retried"]
        sweeps += 1
    report.extra = {"timed_out": timed_out, "retried": retried, "sweeps": sweeps}


def work_until_done(store: HubStore, index: int, barrier: Barrier,
                    report: ChildReport) -> None:
    """Claim, report progress, report success; until no job is active."""
    while True:
        job = store.claim_next_assign("w")
        if job is None:
            if not _active(store):
                return
            time.sleep(0.002)  # polling back-off while others hold the remaining jobs
            continue
        for reported in ("running", "succeeded"):
            try:
                outcome = store.report_assign_result(
                    job.job_id, reported, worker_agent="w", attempt=job.attempt,
                    result={"by": index, "attempt": job.attempt})
            except EXPECTED_REFUSALS as error:
                refused(report, error)
                break
            report.records.append((job.job_id, job.attempt, reported, outcome.event,
                                   outcome.message is not None, index))


def sweeper_or_worker(store: HubStore, index: int, barrier: Barrier,
                      report: ChildReport) -> None:
    """Process 0 sweeps; the others work."""
    if index == 0:
        sweep_until_done(store, index, barrier, report)
    else:
        work_until_done(store, index, barrier, report)


def test_sweeper_racing_workers(store: HubStore, db_url: URL, backend: str) -> None:
    with store.unit_of_work() as uow:
        created = [uow.assign_async("lead", "w", task=f"t{i}", max_retries=1,
                                    timeout_ms=TIMEOUT_MS).job_id
                   for i in range(SWEEP_JOBS)]

    def stagger_deadlines() -> None:
        """Just before the start: deadlines one after another, STAGGER_MS apart, so
        that the sweeper catches up with the workers after the first few jobs."""
        start = now_ms()
        with store.unit_of_work() as uow:
            for i, job_id in enumerate(created):
                uow.session.execute(update(AssignJob).where(AssignJob.job_id == job_id)
                                    .values(deadline_ms=start + TIMEOUT_MS + STAGGER_MS * i))

    reports = run_children(db_url, sweeper_or_worker, 1 + SWEEP_WORKERS, stagger_deadlines)

    sweeper, workers = reports[0], reports[1:]
    assert not sweeper.refusals
    accepted = [record for r in workers for record in r.records]
    jobs, messages = all_jobs(store), messages_by_job(store)
    timeouts = retries = 0
    for job_id, job in jobs.items():
        assert job.status in ("succeeded", "timed_out"), job_id
        assert job.retry_count == job.attempt - 1 <= 1
        wins = [rec for rec in accepted if rec[0] == job_id and rec[2] == "succeeded"
                and rec[4]]
        progress = [rec for rec in accepted if rec[0] == job_id and rec[2] == "running"]
        if job.status == "succeeded":
            [(_, attempt, _, event, _, by)] = wins
            assert (attempt, event) == (job.attempt, "completed")
            assert job.result == {"by": by, "attempt": job.attempt}
        else:
            assert wins == []
            assert job.error == TIMED_OUT_ERROR
            timeouts += 1
        retries += job.retry_count
        assert kinds(messages[job_id]) == +Counter({
            "handoff": job.attempt, "retry_scheduled": job.retry_count, "completed": 1,
            "progress": len(progress)}), job_id
        [completed] = [m for m in messages[job_id] if m.payload.get("event") == "completed"]
        assert completed.payload["status"] == job.status
        assert (completed.payload.get("completion_reason") == "timed_out") == (
            job.status == "timed_out")
    # Every timeout and retry the sweeper counted happened, once.
    assert sweeper.extra["timed_out"] == timeouts + retries
    assert sweeper.extra["retried"] == retries
    refusals = sum((r.refusals for r in workers), Counter[str]())
    print(f"\n[{backend}] sweeper vs {SWEEP_WORKERS} workers: "
          f"{dict(Counter(j.status for j in jobs.values()))}, retried {retries}, "
          f"refused {dict(refusals)}, {sweeper.extra['sweeps']} sweeps")
