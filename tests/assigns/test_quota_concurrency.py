"""Assign limits are exact under concurrency (issue 30): several processes claim one
worker's jobs of three kinds at once (a key with max_running, a key with a rate, and
jobs with no limit), and apart, those of a key whose running room is split in shares,
in single and batch claims; read from the store's own timestamps afterwards, never more
than max_running ran at any instant, never more than max_starts started in any window,
every job was done exactly once, and none was left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore
from tests.helpers import present
from tests.waiting.test_waiting import Child

MAX_RUNNING = 3
#: A limit whose room is split in shares (4 on PostgreSQL).
MAX_SHARED = 8
MAX_STARTS, PER_MS = 10, 500


def most_at_once(intervals: list[tuple[int, int]]) -> int:
    """The most intervals [start, end) that hold one instant."""
    events = sorted([(start, 1) for start, _ in intervals]
                    + [(end, -1) for _, end in intervals])  # (an end before a start)
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def most_in_a_window(starts: list[int], window: int) -> int:
    """The most starts in any window (t - window, t]."""
    ordered = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def run_workers(db_url: URL, folder: Path, processes: int, per_kind: dict[str, int],
                work_ms: int) -> dict[str, list[tuple[int, int]]]:
    """``processes`` workers (every other one claiming 5 at a time; each job
    ``work_ms`` / 2 to ``work_ms`` of work) claim and finish the jobs of each kind (its
    limit key; "u": none), queued in that order while they claim (a file in ``folder``
    tells them when all are); checked done exactly once, then each kind's (start, end) stamps."""
    all_queued = folder / "all-queued"
    with HubStore.open(db_url) as store:
        children = [Child("quota_worker", db_url, "w", 1 if k % 2 else 5, k, work_ms,
                          all_queued)
                    for k in range(processes)]
        for child in children:
            child.ready()
        made = []
        for kind, count in per_kind.items():  # queued while the workers claim
            key = None if kind == "u" else kind
            for first in range(0, count, 100):
                made += store.assign_many("lead", "w", [
                    {"task": f"{kind}{i}", "limit_key": key}
                    for i in range(first, min(count, first + 100))])
        all_queued.touch()
        done = [job_id for child in children for job_id in child.result()["done"]]
        jobs = [present(store.get_assign(job.job_id)) for job in made]
    assert sorted(done) == sorted(job.job_id for job in made)  # each exactly once
    assert {(job.status, job.attempt) for job in jobs} == {("succeeded", 1)}
    return {kind: [(j.started_at_ms or 0, j.completed_at_ms or 0) for j in jobs
                   if j.limit_key == (None if kind == "u" else kind)]
            for kind in per_kind}


@pytest.mark.slow
def test_limits_hold_with_many_processes_claiming(db_url: URL, backend: str,
                                                  tmp_path: Path) -> None:
    with HubStore.open(db_url) as store:
        store.set_assign_limit("a", max_running=MAX_RUNNING)
        store.set_assign_limit("b", max_starts=MAX_STARTS, per_ms=PER_MS)
    # (the rated jobs first, so that every worker presses on the rate as they start; jobs
    # of 10 to 20 ms: long beside a claim, even on a loaded machine, so that the workers
    # press on the running limit too and the unlimited jobs overlap)
    processes, per_kind = ((8, {"b": 100, "a": 400, "u": 800}) if backend == "postgresql"
                           else (4, {"b": 60, "a": 200, "u": 400}))
    stamps = run_workers(db_url, tmp_path, processes, per_kind, work_ms=20)
    assert most_at_once(stamps["a"]) == MAX_RUNNING  # reached, never passed
    assert most_in_a_window([start for start, _ in stamps["b"]], PER_MS) == MAX_STARTS
    assert most_at_once(stamps["u"]) > MAX_RUNNING  # the unlimited ran side by side


@pytest.mark.slow
def test_a_limit_split_in_shares_holds_with_many_processes_claiming(
        db_url: URL, backend: str, tmp_path: Path) -> None:
    """A limit whose running room is split in shares (PostgreSQL: 8 in 4 shares of 2;
    SQLite keeps one share, here of 4), claimed by many processes at once: reached, and
    never passed over all its shares together."""
    most = MAX_SHARED if backend == "postgresql" else 4
    with HubStore.open(db_url) as store:
        shared = store.set_assign_limit("s", max_running=most)
        assert shared.shares == (4 if backend == "postgresql" else 1)
    # (jobs of 20 to 40 ms, so that the workers hold more than the limit lets run)
    processes, count = (8, 400) if backend == "postgresql" else (4, 200)
    stamps = run_workers(db_url, tmp_path, processes, {"s": count}, work_ms=40)
    assert most_at_once(stamps["s"]) == most


def test_the_checks_of_this_test_see_a_breach() -> None:
    assert most_at_once([(0, 10), (5, 15), (9, 20)]) == 3
    assert most_at_once([(0, 10), (10, 20)]) == 1  # one ends as the next starts
    assert most_in_a_window([0, 100, 399, 400], 400) == 3
    assert most_in_a_window([0, 1, 2], 400) == 3
