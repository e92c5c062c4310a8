"""Batch claims that meet limit keys in opposite orders (issue 41): each takes its
keys' shares in one order (the keys'), so that two of them never wait for each other
in a cycle, which PostgreSQL breaks by failing one (DatabaseBusy)."""

from __future__ import annotations

import threading

from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.errors import DatabaseBusy

ROUNDS = 40


def test_batch_claims_meeting_keys_in_opposite_orders_never_deadlock(db_url: URL) -> None:
    """Worker w1's next jobs are of keys a, b, c, d, e, w2's of e, d, c, b, a (by
    priority); both batch-claim at once and report their jobs done in one call, round
    after round, every key with room for all of them. No call fails, and every job is
    claimed once."""
    with HubStore.open(db_url) as lead:
        for key in ("a", "b"):
            lead.set_assign_limit(key, max_running=3)  # (one share: waited for)
        for key in ("c", "d"):  # (a rate: the limit's row locked, and its one share)
            lead.set_assign_limit(key, max_running=1_000, max_starts=10_000, per_ms=1_000)
        lead.set_assign_limit("e", max_running=1_000)  # (shares: skipped when held)
    orders = {"w1": ("a", "b", "c", "d", "e"), "w2": ("e", "d", "c", "b", "a")}
    errors: list[BaseException] = []
    claimed: dict[str, list[str]] = {"w1": [], "w2": []}
    start = threading.Barrier(2)

    def claimer(worker: str) -> None:
        with HubStore.open(db_url) as store:
            for _ in range(ROUNDS):
                store.assign_many("lead", worker, [
                    {"task": key, "limit_key": key, "priority": 9 - rank}
                    for rank, key in enumerate(orders[worker])])
                try:
                    start.wait(timeout=30)
                    jobs = store.claim_next_assigns(worker, 5)
                    store.report_assign_results(
                        [{"job_id": job.job_id, "status": "succeeded",
                          "attempt": job.attempt} for job in jobs], worker_agent=worker)
                except (DatabaseBusy, threading.BrokenBarrierError) as exc:
                    errors.append(exc)
                    start.abort()
                    return
                claimed[worker] += [job.task for job in jobs]

    threads = [threading.Thread(target=claimer, args=(w,)) for w in orders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not [e for e in errors if isinstance(e, DatabaseBusy)], errors
    assert errors == []
    for worker, order in orders.items():
        assert sorted(claimed[worker]) == sorted(order * ROUNDS)
