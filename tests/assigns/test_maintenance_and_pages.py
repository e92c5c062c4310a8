"""run_maintenance (sync and async) runs every sweep on a timer; page_assigns lists
every job, page after page, without reading the whole table (issue 29, issue 32 point 5).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore, ValidationError, execution
from hubstore.aio import AsyncHubStore
from hubstore.ids import now_ms
from hubstore.maintenance import arun_maintenance, run_maintenance, sweep_once
from hubstore.models import AssignJob
from hubstore.services.assigns import listing as assign_listing
from hubstore.services.assigns import rescue as timeouts
from hubstore.testing.factories import AssignJobFactory, MessageFactory
from tests.helpers import present, query_plan


def stalled(count: int, **fields: object) -> list[AssignJob]:
    return AssignJobFactory.create_batch(count, worker_agent="w1", status="running",
                                         deadline_ms=now_ms() - 1, **fields)


def test_one_round_runs_every_sweep(store: HubStore) -> None:
    stalled(2, max_retries=1)
    stalled(1, max_retries=0)
    MessageFactory.create(status="queued", expires_at_ms=now_ms() - 1)
    store.insert_human_request("a", "approval", "ok?", deadline_ms=0)
    store.register_agent("gone", "codex", heartbeat_ttl_ms=0)
    assert sweep_once(store) == {
        "agents_offline": 0, "agents_stale": 1, "assigns_retried": 2,
        "assigns_timed_out": 3, "expired_human_requests": 1, "expired_messages": 1,
        "schedules_queued": 0}
    assert sweep_once(store) == {
        "agents_offline": 0, "agents_stale": 0, "assigns_retried": 0, "assigns_timed_out": 0,
        "expired_human_requests": 0, "expired_messages": 0, "schedules_queued": 0}


def test_a_round_takes_every_due_job_batch_after_batch(store: HubStore) -> None:
    stalled(timeouts.SWEEP_BATCH + 30)
    assert sweep_once(store)["assigns_timed_out"] == timeouts.SWEEP_BATCH + 30


def test_run_maintenance_runs_until_stopped(store: HubStore) -> None:
    stop = threading.Event()
    rounds: list[dict[str, int]] = []
    thread = threading.Thread(target=run_maintenance, args=(store, 0.05),
                              kwargs={"stop": stop, "on_round": rounds.append})
    thread.start()
    try:
        time.sleep(0.3)
        [job] = stalled(1)  # made while it runs: taken by a later round
        deadline = time.monotonic() + 5
        while present(store.get_assign(job.job_id)).status != "timed_out":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert len(rounds) >= 3 and sum(r["assigns_timed_out"] for r in rounds) == 1


def test_run_maintenance_counts_its_rounds(store: HubStore) -> None:
    stalled(1)
    assert run_maintenance(store, 0.01, rounds=2)["assigns_timed_out"] == 1


@pytest.mark.parametrize("every_s", [0, -1, "5", None, float("nan")])
def test_a_bad_interval_is_refused(store: HubStore, every_s: object) -> None:
    with pytest.raises(ValidationError, match="every_s"):
        run_maintenance(store, every_s, rounds=1)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_arun_maintenance_runs_on_the_stores_threads(db_url: URL) -> None:
    async with await AsyncHubStore.open(db_url) as store:
        job = await store.create_assign("lead", "w1", status="running",
                                        deadline_ms=now_ms() - 1)
        total = await arun_maintenance(store, 0.01, rounds=3)
        assert total["assigns_timed_out"] == 1
        assert present(await store.get_assign(job.job_id)).status == "timed_out"


# --- page_assigns ----------------------------------------------------------------------

def every_page(store: HubStore, **filters: object) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = store.page_assigns(limit=7, after=after, **filters)  # type: ignore[arg-type]
        pages.append([job.job_id for job in page.jobs])
        if page.next is None:
            return pages
        after = page.next


def test_pages_hold_every_job_once_in_recency_order(store: HubStore) -> None:
    made = [AssignJobFactory.create(worker_agent=f"w{i % 3}", updated_at_ms=1_000 + i // 4,
                                    status=("queued", "running", "failed")[i % 3])
            for i in range(40)]  # (four jobs per updated_at_ms: ties broken by id)
    expected = [job.job_id for job in sorted(
        made, key=lambda j: (j.updated_at_ms, j.job_id), reverse=True)]
    pages = every_page(store)
    assert [len(page) for page in pages] == [7] * 5 + [5]
    assert [job_id for page in pages for job_id in page] == expected
    mine = [j for j in expected if j in {m.job_id for m in made if m.worker_agent == "w1"}]
    assert [job_id for page in every_page(store, worker_agent="w1")
            for job_id in page] == mine
    running = [job.job_id for job in sorted(made, key=lambda j: (j.updated_at_ms, j.job_id),
                                            reverse=True) if job.status == "running"]
    assert [job_id for page in every_page(store, status="running")
            for job_id in page] == running
    assert [j.job_id for j in store.page_assigns(limit=40).jobs] == [
        j.job_id for j in store.list_assigns(limit=40)]


@pytest.mark.parametrize("after", ["", "x", "1:", ":id", "9" * 30 + ":id", 5, ["1:a"]])
def test_a_bad_cursor_is_refused(store: HubStore, after: object) -> None:
    with pytest.raises(ValidationError, match="after"):
        store.page_assigns(after=after)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [0, 1_001, "10", 2.5, True])
def test_a_bad_page_size_is_refused(store: HubStore, limit: object) -> None:
    with pytest.raises(ValidationError, match="limit"):
        store.page_assigns(limit=limit)  # type: ignore[arg-type]


def test_a_page_reads_the_status_index_not_the_table(
        store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statement page_assigns runs, with no worker filter and after a cursor, is
    planned on idx_assign_jobs_status (PostgreSQL: sequential scans priced out)."""
    AssignJobFactory.create_batch(5)
    captured: list[Any] = []
    real = execution.execute

    def keep(uow: Any, statement: Any) -> Any:
        captured.append(statement)
        return real(uow, statement)

    monkeypatch.setattr(assign_listing, "execute", keep)
    store.page_assigns(limit=2, after="9999999999999:z")
    [statement] = captured
    assert "idx_assign_jobs_status" in query_plan(store, statement)
