"""SQLite (revision 0009): message inserts are counted by their message_log rows until a
fold moves them into hub_counters, every 64th row; the figures stay exact across it."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from hubstore import HubStore
from hubstore.ids import now_ms
from hubstore.services.stats import counts, plain_counts
from hubstore.types import MessageStatus

STATUSES: list[MessageStatus] = ["queued", "acked", "queued", "dead_letter", "delivered"]


@pytest.fixture
def sqlite_store(store: HubStore, backend: str) -> HubStore:
    if backend != "sqlite":
        pytest.skip("PostgreSQL counts with its deltas (revision 0004)")
    return store


def figures_exact(store: HubStore) -> dict[str, int]:
    with store.transaction(write=False) as uow:
        plain = plain_counts(uow)
        figures = counts(uow)
    assert {k: figures[k] for k in plain} == plain
    return plain


def raw(store: HubStore, sql: str) -> int:
    with store.unit_of_work(write=False) as uow:
        return int(uow.connection.execute(text(sql)).scalar_one())


def folded(store: HubStore) -> int:
    return raw(store, "SELECT value FROM hub_counters WHERE name = 'message_log_folded'")


def test_hub_counters_move_once_per_64_inserts(sqlite_store: HubStore) -> None:
    store = sqlite_store
    start = folded(store)
    sent = 0
    for _ in range(3):
        while (raw(store, "SELECT coalesce(max(seq), 0) FROM message_log") + 1) % 64:
            store.audit_log("event", "x", "a1", "t", priority=1 + sent % 9,
                            status=STATUSES[sent % len(STATUSES)])
            sent += 1
        before = raw(store, "SELECT value FROM hub_counters WHERE name = 'messages'")
        assert figures_exact(store)["messages"] == sent
        store.audit_log("event", "x", "a1", "t", priority=8)  # the 64th: folds
        sent += 1
        assert folded(store) % 64 == 0 and folded(store) > start
        assert raw(store, "SELECT value FROM hub_counters WHERE name = 'messages'") == sent
        assert before < sent
        figures_exact(store)


def test_updates_deletes_and_prune_before_the_fold_keep_the_figures_exact(
        sqlite_store: HubStore) -> None:
    store = sqlite_store
    sent = [store.audit_log("event", "x", f"a{n % 3}", "t", priority=1 + n % 9)
            for n in range(10)]
    assert folded(store) == 0  # all ten are pending
    with store.unit_of_work() as uow:
        uow.connection.execute(text("UPDATE messages SET status = 'acked' WHERE id = :id"),
                               {"id": sent[0].id})
        uow.connection.execute(text("UPDATE messages SET priority = 9 WHERE id = :id"),
                               {"id": sent[1].id})
        uow.connection.execute(text("DELETE FROM messages WHERE id = :id"), {"id": sent[2].id})
    figures_exact(store)
    assert store.sweep_expired(now_ms=sent[-1].expires_at_ms + 1)["messages"] == 8
    figures_exact(store)
    while now_ms() <= sent[-1].created_at_ms:
        time.sleep(0.001)
    assert store.prune_messages(0) == 9
    assert figures_exact(store)["messages"] == 0
    # the trim folded first, then kept only the newest row (the feed's high-water mark)
    assert folded(store) == 10
    assert raw(store, "SELECT count(*) FROM message_log") == 1
    later = store.audit_log("event", "x", "a1", "t")
    assert figures_exact(store)["messages"] == 1
    assert [m.id for m in store.message_feed("a1", cursor="feed1:10").next(timeout_s=0)] == [
        later.id]


def test_the_reference_writing_raw_sql_is_counted(sqlite_store: HubStore) -> None:
    """The trigger counts whoever inserts: a plain multi-row INSERT across a fold."""
    store = sqlite_store
    values = ", ".join(
        f"('r{n}', 'event', 'lead', 'w', 't', {1 + n % 9}, 1, 1, 2, 'c', 'tr', '{{}}', "
        f"'{STATUSES[n % len(STATUSES)]}')" for n in range(150))
    with store.unit_of_work() as uow:
        uow.connection.exec_driver_sql(
            "INSERT INTO messages (id, type, from_agent, to_agent, topic, priority, ttl_ms, "
            "created_at_ms, expires_at_ms, correlation_id, trace_id, payload_json, status) "
            f"VALUES {values}")
    assert folded(store) == 128
    assert figures_exact(store)["messages"] == 150
