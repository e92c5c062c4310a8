"""Provider quotas (issue 30): assign limits as data, exact room per key in every claim
path, waiting for room, and the operators' view. The many-process proof of exactness
is tests/assigns/test_quota_concurrency.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from hubstore import HubStore, ValidationError
from hubstore.aio import AsyncHubStore
from hubstore.ids import now_ms
from hubstore.models import AssignJob
from hubstore.services.assigns.limits import split_running_room
from hubstore.services.assigns.listing import waiting_reason
from tests.helpers import present


def running(store: HubStore, key: str) -> int:
    return store.get_assign_limits()[key].running


def queue(store: HubStore, count: int, worker: str = "w", **fields: Any) -> list[AssignJob]:
    return store.assign_many("lead", worker, [{"task": f"t{i}", **fields}
                                              for i in range(count)])


# --- limits as data -------------------------------------------------------------------

def test_a_limit_is_set_read_replaced_and_removed(store: HubStore) -> None:
    limit = store.set_assign_limit("codex", max_running=2)
    assert limit.to_dict() == {"key": "codex", "max_running": 2, "max_starts": None,
                               "per_ms": None, "running": 0, "recent_starts": 0}
    store.set_assign_limit("gemini", max_starts=60, per_ms=60_000)
    assert list(store.get_assign_limits()) == ["codex", "gemini"]
    replaced = store.set_assign_limit("codex", max_running=5, max_starts=10, per_ms=1_000)
    assert (replaced.max_running, replaced.max_starts, replaced.per_ms) == (5, 10, 1_000)
    assert store.remove_assign_limit("codex") is True
    assert store.remove_assign_limit("codex") is False
    assert list(store.get_assign_limits()) == ["gemini"]


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"max_running": 0}, "max_running"), ({"max_running": -1}, "max_running"),
    ({"max_running": 2.5}, "max_running"), ({"max_running": True}, "max_running"),
    ({"max_starts": 5}, "max_starts and per_ms go together"),
    ({"per_ms": 1_000}, "max_starts and per_ms go together"),
    ({"max_starts": 0, "per_ms": 1_000}, "max_starts"),
    ({"max_starts": 5, "per_ms": 0}, "per_ms"),
    ({}, "a limit needs max_running"),
    ({"max_running": 1, "key": ""}, "key"), ({"max_running": 1, "key": "k" * 201}, "key"),
    ({"max_running": 1, "key": 5}, "key"), ({"max_running": 1, "key": "a\x00"}, "key"),
])
def test_a_bad_limit_is_refused_before_anything_is_written(store: HubStore,
                                                           kwargs: dict[str, Any],
                                                           named: str) -> None:
    kwargs.setdefault("key", "codex")
    with pytest.raises(ValidationError, match=named):
        store.set_assign_limit(**kwargs)
    assert store.get_assign_limits() == {}


@pytest.mark.parametrize("limit_key", ["", 5, "k" * 201, ["codex"]])
def test_a_job_with_a_bad_limit_key_is_refused(store: HubStore, limit_key: object) -> None:
    with pytest.raises(ValidationError, match="limit_key"):
        store.assign_async("lead", "w", limit_key=limit_key)  # type: ignore[arg-type]
    assert store.list_assigns() == []


def test_the_running_count_follows_every_move(store: HubStore) -> None:
    """Triggers count the key's running jobs whoever moves them: a claim, a finish, a
    progress report (no change), a cancel, a timeout, a store-level move, raw SQL."""
    store.set_assign_limit("k", max_running=10)
    jobs = queue(store, 6, limit_key="k", max_retries=0)
    claimed = store.claim_next_assigns("w", 6)
    assert running(store, "k") == 6
    store.finish_assign(claimed[0], "running")  # still running
    assert running(store, "k") == 6
    store.finish_assign(claimed[0], "succeeded")
    store.cancel_assign(claimed[1].job_id)
    store.update_assign_status(claimed[2].job_id, "failed")
    store.sweep_timed_out_assigns(now_ms=now_ms() + 10**9)  # times out the other three
    assert running(store, "k") == 0
    with store.unit_of_work() as uow:  # as the reference store would write it
        uow.connection.execute(text(
            "UPDATE assign_jobs SET status = 'running' WHERE job_id = :j"),
            {"j": jobs[3].job_id})
    assert running(store, "k") == 1
    with store.unit_of_work() as uow:
        uow.connection.execute(text("DELETE FROM assign_jobs WHERE job_id = :j"),
                               {"j": jobs[3].job_id})
    assert running(store, "k") == 0


def test_setting_a_limit_counts_its_jobs_anew(store: HubStore) -> None:
    queue(store, 3, limit_key="k")
    claimed = store.claim_next_assigns("w", 3)  # no limit yet: not counted
    assert len(claimed) == 3
    limit = store.set_assign_limit("k", max_running=2, max_starts=5, per_ms=60_000)
    assert (limit.running, limit.recent_starts(now_ms())) == (3, 3)
    queue(store, 1, limit_key="k")
    assert store.claim_next_assign("w") is None  # 3 running, at most 2


def releases(store: HubStore, key: str) -> dict[int, int]:
    """The key's release rows: {stripe: released}."""
    with store.unit_of_work(write=False) as uow:
        rows = uow.connection.execute(text(
            "SELECT stripe, released FROM assign_limit_releases WHERE key = :k"), {"k": key})
        return {int(stripe): int(released) for stripe, released in rows}


def test_finished_jobs_are_counted_apart_from_the_row_claims_lock(store: HubStore) -> None:
    """Starts count on the key's row, ends on its release rows (8 on PostgreSQL, picked
    by the finishing transaction; 1 on SQLite); running is the one less the other. Setting the limit
    again counts anew; removing it removes its release rows."""
    stripes = 8 if store.dialect == "postgresql" else 1
    assert store.set_assign_limit("k", max_running=100).running == 0
    assert releases(store, "k") == dict.fromkeys(range(stripes), 0)
    queue(store, 40, limit_key="k")
    claimed = store.claim_next_assigns("w", 40)
    for job in claimed[:30]:
        store.finish_assign(job, "succeeded")
    limit = store.get_assign_limits()["k"]
    assert (limit.started, limit.running) == (40, 10)
    spread = releases(store, "k")
    assert sum(spread.values()) == 30
    if stripes > 1:  # 30 transactions land on more than one of 8 rows
        assert len([n for n in spread.values() if n]) > 1
    again = store.set_assign_limit("k", max_running=100)
    assert (again.started, again.running) == (10, 10)
    assert releases(store, "k") == dict.fromkeys(range(stripes), 0)
    assert store.remove_assign_limit("k") is True
    assert releases(store, "k") == {}


def test_a_finish_does_not_wait_for_a_claim_holding_the_key(db_url: URL, backend: str
                                                            ) -> None:
    """A claim holds its key's row until it commits; a job of that key finishing
    meanwhile goes through (PostgreSQL: transactions side by side)."""
    if backend != "postgresql":
        pytest.skip("SQLite runs one writer at a time: a finish waits for any claim")
    with HubStore.open(db_url) as store, HubStore.open(db_url) as other:
        store.set_assign_limit("k", max_running=5)
        queue(store, 2, limit_key="k")
        first = present(store.claim_next_assign("w"))
        with store.unit_of_work() as uow:
            second = present(uow.claim_next_assign("w"))  # the key's row locked
            finished = []
            thread = threading.Thread(target=lambda: finished.append(
                other.finish_assign(first, "succeeded")))
            thread.start()
            thread.join(timeout=10)
            assert finished and finished[0].job.status == "succeeded"
        store.finish_assign(second, "succeeded")
        assert running(store, "k") == 0


def shares(store: HubStore, key: str) -> list[tuple[int, int | None, int]]:
    """The key's shares: (share, budget, started), in share order."""
    with store.unit_of_work(write=False) as uow:
        rows = uow.connection.execute(text(
            "SELECT share, budget, started FROM assign_limit_shares WHERE key = :k "
            "ORDER BY share"), {"k": key})
        return [(int(share), budget, int(started)) for share, budget, started in rows]


@pytest.mark.parametrize(("max_running", "rated", "running", "budgets"), [
    (None, True, 0, [None]), (3, False, 0, [3]), (5, True, 0, [5]),
    (10, False, 0, [2, 2, 2, 2, 2]), (10, False, 4, [6, 1, 1, 1, 1]),
    (10, False, 10, [10, 0, 0, 0, 0]), (10, False, 11, [10]),
    (10**9, False, 3, [124_999_999 * -7 + 10**9] + [124_999_999] * 7),
])
def test_the_running_room_splits_in_shares(max_running: int | None, rated: bool,
                                           running: int, budgets: list[int | None]) -> None:
    """Up to 8 shares of at least 2, share 0 holding the running jobs; one share with a
    rate, without max_running, or with more running than it allows."""
    split = split_running_room(max_running, rated, running, 8)
    assert split == budgets
    if max_running is not None:
        assert sum(b or 0 for b in split) == max_running
    assert split[0] is None or split[0] >= min(running, max_running or 0)


def test_claims_take_room_from_several_shares_and_count_it(store: HubStore) -> None:
    """A limit of 10 has 5 shares of 2 on PostgreSQL (1 on SQLite); a batch claim takes
    room from as many as it needs, each share counting the jobs started in it, and never
    more than the limit; a job that stops running forgets its share, and a later start
    outside claims counts on share 0."""
    postgresql = store.dialect == "postgresql"
    assert store.set_assign_limit("k", max_running=10).shares == (5 if postgresql else 1)
    jobs = queue(store, 12, limit_key="k", max_retries=0)
    claimed = store.claim_next_assigns("w", 7)
    assert len(claimed) == 7 and running(store, "k") == 7
    counts = shares(store, "k")
    assert sum(started for _, _, started in counts) == 7
    assert all(started <= (budget or 0) for _, budget, started in counts)
    if postgresql:
        assert len([started for _, _, started in counts if started]) >= 4  # 2 apiece
        assert {job.limit_share for job in claimed} == {
            share for share, _, started in counts if started}
    else:
        assert {job.limit_share for job in claimed} == {0}
    assert len(store.claim_next_assigns("w", 10)) == 3  # the limit's last 3
    assert store.claim_next_assign("w") is None
    store.finish_assign(claimed[0], "succeeded")
    assert present(store.get_assign(claimed[0].job_id)).limit_share is None
    assert running(store, "k") == 9
    before = shares(store, "k")[0][2]
    with store.unit_of_work() as uow:  # a start outside claims (as the reference's)
        uow.connection.execute(text(
            "UPDATE assign_jobs SET status = 'running' WHERE job_id = :j"),
            {"j": claimed[0].job_id})
    assert running(store, "k") == 10
    assert shares(store, "k")[0][2] == before + 1
    assert {job.job_id for job in jobs} >= {job.job_id for job in claimed}


# --- room in every claim path -----------------------------------------------------------

def test_a_claim_starts_a_job_only_with_room_under_its_key(store: HubStore) -> None:
    store.set_assign_limit("codex", max_running=2)
    jobs = queue(store, 4, limit_key="codex")
    first = store.claim_next_assigns("w", 10)
    assert [j.job_id for j in first] == [j.job_id for j in jobs[:2]]  # in claim order
    assert store.claim_next_assign("w") is None
    assert store.claim_next_assigns("w", 10) == []
    assert [j.status for j in store.list_assigns(limit=10)].count("queued") == 2
    store.finish_assign(first[0], "succeeded")
    again = present(store.claim_next_assign("w"))
    assert again.job_id == jobs[2].job_id


def test_a_full_key_holds_up_neither_other_keys_nor_unlimited_jobs(store: HubStore) -> None:
    store.set_assign_limit("codex", max_running=1)
    store.set_assign_limit("gemini", max_running=1)
    codex = queue(store, 3, limit_key="codex", priority=9)  # first in claim order
    gemini = queue(store, 2, limit_key="gemini", priority=8)
    free = queue(store, 2, priority=1)
    taken = store.claim_next_assigns("w", 10)
    assert {j.job_id for j in taken} == {codex[0].job_id, gemini[0].job_id,
                                         free[0].job_id, free[1].job_id}
    assert store.claim_next_assign("w") is None


def test_one_at_a_time_a_full_key_is_skipped(store: HubStore) -> None:
    store.set_assign_limit("codex", max_running=1)
    codex = queue(store, 2, limit_key="codex", priority=9)
    other = queue(store, 1, priority=1)
    assert present(store.claim_next_assign("w")).job_id == codex[0].job_id
    assert present(store.claim_next_assign("w")).job_id == other[0].job_id
    assert store.claim_next_assign("w") is None


def test_a_rate_limit_starts_at_most_max_starts_in_any_window(store: HubStore) -> None:
    store.set_assign_limit("gemini", max_starts=3, per_ms=1_000)
    queue(store, 5, limit_key="gemini")
    started = store.claim_next_assigns("w", 10)
    assert len(started) == 3
    for job in started:
        store.finish_assign(job, "succeeded")  # running room does not matter here
    assert store.claim_next_assign("w") is None
    time.sleep(1.05)
    assert len(store.claim_next_assigns("w", 10)) == 2


def test_a_job_without_a_limit_row_is_unlimited(store: HubStore) -> None:
    queue(store, 3, limit_key="nobody-set-this")
    assert len(store.claim_next_assigns("w", 10)) == 3


def test_a_waiting_worker_wakes_when_room_frees(db_url: URL) -> None:
    with HubStore.open(db_url) as store, HubStore.open(db_url) as other:
        store.set_assign_limit("k", max_running=1)
        queue(store, 2, limit_key="k")
        held = present(store.claim_next_assign("w"))
        got: list[AssignJob | None] = []
        thread = threading.Thread(target=lambda: got.append(
            other.wait_for_assign("w", timeout_s=10)))
        thread.start()
        time.sleep(0.3)
        assert got == []  # waiting: the limit holds the second job
        finished_at = time.monotonic()
        store.finish_assign(held, "succeeded")
        thread.join()
        assert got[0] is not None and time.monotonic() - finished_at < 2


def test_a_waiting_worker_wakes_when_the_rate_window_moves_on(store: HubStore) -> None:
    store.set_assign_limit("r", max_starts=1, per_ms=800)
    queue(store, 2, limit_key="r")
    first = present(store.claim_next_assign("w"))
    start = time.monotonic()
    second = present(store.wait_for_assign("w", timeout_s=10))
    waited = time.monotonic() - start
    assert second.job_id != first.job_id
    assert 0.5 <= waited < 3  # the window reopened 800 ms after the first start


@pytest.mark.asyncio
async def test_async_claims_keep_the_limit(db_url: URL) -> None:
    async with await AsyncHubStore.open(db_url) as store:
        await store.set_assign_limit("k", max_running=2)
        await store.assign_many("lead", "w", [{"task": str(i), "limit_key": "k"}
                                              for i in range(4)])
        first = await store.wait_for_assigns("w", 10, timeout_s=1)
        assert len(first) == 2
        assert await store.wait_for_assign("w", timeout_s=0.2) is None
        await store.finish_assign(first[0], "succeeded")
        assert await store.wait_for_assign("w", timeout_s=5) is not None


# --- what operators see ------------------------------------------------------------------

def test_hub_stats_show_each_limit_only_where_limits_exist(store: HubStore) -> None:
    assert "assign_limits" not in store.get_hub_stats()  # the reference's figures
    store.set_assign_limit("codex", max_running=2)
    queue(store, 3, limit_key="codex")
    store.claim_next_assigns("w", 3)
    assert store.get_hub_stats()["assign_limits"] == {"codex": {
        "max_running": 2, "max_starts": None, "per_ms": None, "running": 2,
        "recent_starts": 0}}


def test_a_held_job_says_which_limit_holds_it(store: HubStore) -> None:
    store.set_assign_limit("codex", max_running=1)
    store.set_assign_limit("gemini", max_starts=1, per_ms=60_000)
    queue(store, 2, worker="c", limit_key="codex")
    queue(store, 2, worker="g", limit_key="gemini")
    store.claim_next_assign("c")
    store.claim_next_assign("g")
    limits, now = store.get_assign_limits(), now_ms()
    reasons = {job.task + job.worker_agent: waiting_reason(
        {**job.to_dict(), "not_before_ms": job.not_before_ms, "limit_key": job.limit_key,
         "retry_backoff_ms": job.retry_backoff_ms}, limits, now)
        for job in store.list_assigns(status="queued")}
    assert reasons == {"t1c": (None, "limit codex: 1/1 running"),
                       "t1g": (None, "limit gemini: 1/1 starts in 1m")}
