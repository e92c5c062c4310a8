"""Figures: what the reference counts, and the counters that replace its table scans."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from hubstore import HubStore
from hubstore.services.stats import counts, plain_counts
from tests.factories import AgentFactory, AssignJobFactory, DeadLetterFactory, MessageFactory
from tests.helpers import query_plan


def test_hub_and_audit_stats(store: HubStore) -> None:
    AgentFactory.create(status="online")
    AgentFactory.create(status="stale")
    for priority, status in ((7, "queued"), (9, "queued"), (6, "queued"), (8, "acked")):
        MessageFactory.create(priority=priority, status=status)
    DeadLetterFactory.create()
    for status in ("queued", "running", "running", "failed", "timed_out", "succeeded"):
        AssignJobFactory.create(status=status)
    assert store.get_queue_depths() == {"urgent": 2, "normal": 1, "dlq": 1}
    assert store.get_hub_stats() == {"online_agents": 1, "total_messages": 4,
                                     "active_assign_jobs": 3, "urgent": 2, "normal": 1,
                                     "dlq": 1}
    assert store.get_audit_stats() == {"online_agents": 1, "total_messages": 4, "dlq": 1,
                                       "assign_queued": 1, "assign_running": 2,
                                       "assign_failed": 1, "assign_timed_out": 1}


def test_delivery_stats_count_recent_acked_messages(store: HubStore) -> None:
    now = 10 ** 12
    MessageFactory.create(status="acked", created_at_ms=now - 1000)
    MessageFactory.create(status="acked", created_at_ms=now - 300_000)
    MessageFactory.create(status="queued", created_at_ms=now)
    assert store.get_delivery_stats(now_ms=now) == {"total_deliveries": 1, "avg_delivery_ms": 0}


def test_counters_equal_plain_counts_after_random_writes(store: HubStore) -> None:
    """The fast path (SQLite trigger counters) returns exactly what counting returns."""
    rng = random.Random(7)
    messages: list[str] = []
    jobs: list[str] = []
    for step in range(300):
        op = rng.randrange(8)
        if op == 0 or not messages:
            messages.append(store.audit_log("event", "a", "b", "t",
                                            priority=rng.randint(1, 9),
                                            status=rng.choice(["queued", "acked"])).id)
        elif op == 1:
            store.update_message_status(rng.choice(messages),
                                        rng.choice(["queued", "delivered", "dead_letter"]))
        elif op == 2:
            store.move_to_dead_letter(rng.choice(messages), "r")
        elif op == 3:
            jobs.append(store.create_assign("lead", "w", status=rng.choice(
                ["queued", "running", "failed"])).job_id)
        elif op == 4 and jobs:
            job = store.get_assign(rng.choice(jobs))
            assert job is not None
            if job.status in ("queued", "running"):
                store.update_assign_status(job.job_id, rng.choice(["running", "succeeded",
                                                                   "timed_out"]))
        elif op == 5:
            store.sweep_expired(now_ms=10 ** 14)
        elif op == 6:
            with store.unit_of_work() as uow:  # writes the reference's way, in SQL
                uow.session.execute(text(
                    "UPDATE messages SET priority = :p WHERE id = :id"),
                    {"p": rng.randint(1, 9), "id": rng.choice(messages)})
        else:
            with store.unit_of_work() as uow:
                uow.session.execute(text("DELETE FROM messages WHERE id = :id"),
                                    {"id": messages.pop(rng.randrange(len(messages)))})
        if step % 50 == 0:
            _assert_counters_match(store)
    _assert_counters_match(store)


def test_counters_survive_the_references_insert_or_replace(store: HubStore, backend: str) -> None:
    if backend != "sqlite":
        return
    with store.unit_of_work() as uow:
        for _ in range(3):  # the reference re-dead-letters with INSERT OR REPLACE
            uow.session.execute(text(
                "INSERT OR REPLACE INTO dead_letters (message_id, reason, failed_at_ms) "
                "VALUES ('m1', 'r', 1)"))
    assert store.get_queue_depths()["dlq"] == 1
    _assert_counters_match(store)


def test_assign_counters_stay_exact_through_multi_row_and_unchanged_status_updates(
        store: HubStore) -> None:
    """PostgreSQL counts a status change per row (revision 0010): a multi-row UPDATE, an
    UPDATE that leaves the status alone and one that sets it to itself count right."""
    for status in ("queued", "queued", "running", "failed", "queued"):
        store.create_assign("lead", "w", status=status)
    for sql in ("UPDATE assign_jobs SET status = 'running' WHERE status = 'queued'",
                "UPDATE assign_jobs SET updated_at_ms = updated_at_ms + 1",
                "UPDATE assign_jobs SET status = status",
                "UPDATE assign_jobs SET status = CASE WHEN status = 'running' "
                "THEN 'succeeded' ELSE 'queued' END"):
        with store.unit_of_work() as uow:
            uow.session.execute(text(sql))
        _assert_counters_match(store)
    with store.transaction(write=False) as uow:
        counted = counts(uow)
    assert (counted["assign_succeeded"], counted["assign_queued"]) == (4, 1)


def _assert_counters_match(store: HubStore) -> None:
    with store.transaction(write=False) as uow:
        assert counts(uow) | {"online_agents": 0} == plain_counts(uow) | {"online_agents": 0}


def test_postgresql_deltas_fold_into_the_counters(store: HubStore, backend: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if backend != "postgresql":
        assert not store.features.counter_deltas  # SQLite's row triggers need no fold
        return
    from hubstore.services import stats

    monkeypatch.setattr(stats, "FOLD_AT", 5)
    for i in range(12):
        store.audit_log("event", "a", "b", "t", priority=1 + i % 9)
    store.create_assign("lead", "w")
    with store.unit_of_work(write=False) as uow:
        pending = uow.connection.scalar(text("SELECT count(*) FROM hub_counter_deltas"))
    assert pending >= 5
    before = store.get_hub_stats()  # reads, then folds
    with store.unit_of_work(write=False) as uow:
        assert uow.connection.scalar(text("SELECT count(*) FROM hub_counter_deltas")) == 0
    assert store.get_hub_stats() == before == {
        "online_agents": 0, "total_messages": 12, "active_assign_jobs": 1, "urgent": 3,
        "normal": 9, "dlq": 0}
    _assert_counters_match(store)


def test_postgresql_fold_vacuums_the_rows_it_deleted(store: HubStore, backend: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """After a fold, the deltas table keeps no dead rows for later reads to scan."""
    if backend != "postgresql":
        assert not store.features.counter_deltas
        return
    from hubstore.services import stats

    monkeypatch.setattr(stats, "FOLD_AT", 50)
    with store.engine.begin() as conn:
        # An autovacuum at work on the table would make the fold's VACUUM (SKIP_LOCKED)
        # step aside, and this test measure autovacuum instead.
        conn.exec_driver_sql(
            "ALTER TABLE hub_counter_deltas SET (autovacuum_enabled = false)")
    for i in range(300):
        store.audit_log("event", "a", "b", "t", priority=1 + i % 9)
    size = text("SELECT pg_relation_size('hub_counter_deltas')")
    with store.unit_of_work(write=False) as uow:
        assert uow.connection.scalar(size) > 0
    figures = store.get_hub_stats()  # reads, folds, and once committed, vacuums
    with store.unit_of_work(write=False) as uow:
        # A DELETE alone leaves the pages in place; VACUUM truncates the emptied table.
        assert uow.connection.scalar(size) == 0
    assert figures["total_messages"] == 300
    assert store.get_hub_stats() == figures


def test_expiry_sweep_reads_one_range_of_the_queued_index(store: HubStore, backend: str) -> None:
    """sweep_expired reads the partial idx_messages_expires (queued messages only, since
    revision 0011): no scan, and no walk over messages that expired long ago."""
    from hubstore.dialects import dialect_for
    from hubstore.services.stats import expire_queued

    plan = query_plan(store, expire_queued(dialect_for(backend), 90_000_000))
    if backend == "sqlite":
        assert "USING INDEX idx_messages_expires (expires_at_ms<?)" in plan, plan
    else:
        assert "idx_messages_expires" in plan, plan


def test_expiry_sweep_finds_a_message_queued_again(store: HubStore) -> None:
    """A message that left the queue and came back re-enters the partial index: the
    sweep dead-letters it once it is due, as it does one that never left."""
    now = 90_000_000
    back = MessageFactory.create(expires_at_ms=now - 10, status="acked")
    stays_acked = MessageFactory.create(expires_at_ms=now - 10, status="acked")
    assert store.sweep_expired(now_ms=now)["messages"] == 0
    assert store.update_message_status(back.id, "queued")
    assert store.sweep_expired(now_ms=now)["messages"] == 1
    assert [m.status for m in (store.get_message(back.id), store.get_message(stays_acked.id))
            if m is not None] == ["dead_letter", "acked"]
