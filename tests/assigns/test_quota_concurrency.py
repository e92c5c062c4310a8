"""Assign limits are exact under concurrency (issue 30): several processes claim one
worker's jobs of four kinds at once (a key with max_running, one whose running room is
split in shares, a key with a rate, and jobs with no limit), in single and batch claims;
read from the store's own timestamps afterwards, never more than max_running ran at any
instant, never more than max_starts started in any window, every job was done exactly
once, and none was left behind."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore
from tests.helpers import present
from tests.waiting.test_waiting import Child

MAX_RUNNING = 3
#: A limit whose room is split in shares (4 on PostgreSQL; SQLite keeps one).
MAX_SHARED = 8
MAX_STARTS, PER_MS = 20, 400


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


@pytest.mark.slow
def test_limits_hold_with_many_processes_claiming(db_url: URL, backend: str) -> None:
    # (the shared key's jobs first: every worker claims them at the start)
    processes, per_kind = (8, {"s": 600, "a": 600, "b": 200, "u": 1200}) \
        if backend == "postgresql" else (4, {"s": 200, "a": 300, "b": 120, "u": 580})
    with HubStore.open(db_url) as store:
        store.set_assign_limit("a", max_running=MAX_RUNNING)
        store.set_assign_limit("b", max_starts=MAX_STARTS, per_ms=PER_MS)
        shared = store.set_assign_limit("s", max_running=MAX_SHARED)
        assert shared.shares == (4 if backend == "postgresql" else 1)
        children = [Child("quota_worker", db_url, "w", 1 if k % 2 else 5, k)
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
        done = [job_id for child in children for job_id in child.result()["done"]]
        jobs = [present(store.get_assign(job.job_id)) for job in made]
    assert sorted(done) == sorted(job.job_id for job in made)  # each exactly once
    assert {(job.status, job.attempt) for job in jobs} == {("succeeded", 1)}
    stamps = {kind: [(j.started_at_ms or 0, j.completed_at_ms or 0) for j in jobs
                     if j.limit_key == (None if kind == "u" else kind)]
              for kind in per_kind}
    assert most_at_once(stamps["a"]) == MAX_RUNNING  # reached, never passed
    assert most_at_once(stamps["s"]) == MAX_SHARED  # over all its shares
    assert most_in_a_window([start for start, _ in stamps["b"]], PER_MS) == MAX_STARTS
    assert most_at_once(stamps["u"]) > MAX_RUNNING  # the unlimited ran side by side


def test_the_checks_of_this_test_see_a_breach() -> None:
    assert most_at_once([(0, 10), (5, 15), (9, 20)]) == 3
    assert most_at_once([(0, 10), (10, 20)]) == 1  # one ends as the next starts
    assert most_in_a_window([0, 100, 399, 400], 400) == 3
    assert most_in_a_window([0, 1, 2], 400) == 3
