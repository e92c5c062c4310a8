"""Retention: prune_messages deletes old messages, their inbox rows and dead letters, in
batches found through an index, pausing between them only when each batch is a
transaction of its own."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from hubstore import HubStore, uuidv7
from hubstore.errors import ValidationError
from hubstore.ids import now_ms
from hubstore.models import DeadLetter, Message, MessageInbox, MessageLog, table_of
from hubstore.services import retention
from hubstore.services.stats import counts, plain_counts
from tests.factories import AssignJobFactory
from tests.helpers import query_plan

NOW = 10 ** 12
DAY = 86_400_000


def add_messages(store: HubStore, created: list[int], seed: int = 1) -> list[str]:
    """Messages created at the given times, each with an inbox row; every third one
    also dead-lettered. Returns their ids."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for at in created:
        status = rng.choice(["queued", "acked", "dead_letter", "delivered"])
        rows.append({"id": uuidv7(), "type": "event", "from_agent": "a", "to_agent": "b",
                     "topic": "t", "priority": rng.randint(1, 9), "ttl_ms": 1000,
                     "created_at_ms": at, "expires_at_ms": at + 1000,
                     "correlation_id": "c", "trace_id": "t", "payload_json": {},
                     "status": status})
    with store.unit_of_work() as uow:
        uow.connection.execute(insert(table_of(Message)), rows)
        uow.connection.execute(insert(table_of(MessageInbox)), [
            {"message_id": r["id"], "agent_id": "b", "delivered_at_ms": r["created_at_ms"],
             "attempts": 0} for r in rows])
        uow.connection.execute(insert(table_of(DeadLetter)), [
            {"message_id": r["id"], "reason": "r", "failed_at_ms": r["created_at_ms"]}
            for r in rows[::3]])
    return [r["id"] for r in rows]


def remaining(store: HubStore) -> dict[str, set[str]]:
    with store.unit_of_work(write=False) as uow:
        c = uow.connection
        return {"messages": set(c.scalars(select(Message.id))),
                "inbox": set(c.scalars(select(MessageInbox.message_id))),
                "dead_letters": set(c.scalars(select(DeadLetter.message_id)))}


def assert_figures_exact(store: HubStore) -> None:
    """The trigger-kept figures equal counting the rows, through every figures method."""
    with store.transaction(write=False) as uow:
        plain = plain_counts(uow)
        assert counts(uow) | {"online_agents": 0} == plain | {"online_agents": 0}
    depths = {"urgent": plain["messages_queued_urgent"],
              "normal": plain["messages_queued_normal"], "dlq": plain["dead_letters"]}
    assert store.get_queue_depths() == depths
    hub = store.get_hub_stats()
    assert hub == {"online_agents": 0, "total_messages": plain["messages"],
                   "active_assign_jobs": plain["assign_queued"] + plain["assign_running"],
                   **depths}
    audit = store.get_audit_stats()
    assert audit["total_messages"] == plain["messages"]
    assert audit["dlq"] == plain["dead_letters"]


def test_prune_deletes_strictly_older_messages_with_their_rows(store: HubStore) -> None:
    cutoff = NOW - 30 * DAY
    # Ties at one time straddle the batches; one message sits exactly at the cut-off.
    old_times = [cutoff - 1] * 7 + [cutoff - DAY - i for i in range(40)]
    new_times = [cutoff, cutoff + 1, NOW]
    old = set(add_messages(store, old_times))
    new = set(add_messages(store, new_times, seed=2))
    AssignJobFactory.create(status="running")
    assert store.count_messages_before(30 * DAY, now_ms=NOW) == len(old)

    seen: list[int] = []
    deleted = store.prune_messages(30 * DAY, now_ms=NOW, batch_size=3, progress=seen.append)

    assert deleted == len(old) == sum(seen)
    assert max(seen) <= 3
    left = remaining(store)
    assert left["messages"] == new
    assert left["inbox"] == new
    assert left["dead_letters"] <= new and left["dead_letters"]  # some survive
    assert_figures_exact(store)
    assert store.prune_messages(30 * DAY, now_ms=NOW) == 0


def test_prune_keeps_other_dead_letters_and_figures_after_random_work(store: HubStore) -> None:
    rng = random.Random(5)
    times = [NOW - rng.randrange(0, 60 * DAY) for _ in range(300)]
    ids = add_messages(store, times)
    store.move_to_dead_letter(ids[1], "manual")
    store.sweep_expired(now_ms=NOW)  # queued ones become dead letters (the triggers count)
    orphan = uuidv7()  # a dead letter whose message is gone already is not the prune's
    with store.unit_of_work() as uow:
        uow.connection.execute(insert(table_of(DeadLetter)),
                               {"message_id": orphan, "reason": "r", "failed_at_ms": 1})
    expected = sum(t < NOW - 20 * DAY for t in times)
    assert store.prune_messages(20 * DAY, now_ms=NOW, batch_size=17) == expected
    left = remaining(store)
    assert len(left["messages"]) == len(times) - expected
    assert orphan in left["dead_letters"]
    assert left["dead_letters"] - {orphan} <= left["messages"]
    assert_figures_exact(store)


def test_prune_without_now_uses_the_clock(store: HubStore) -> None:
    from hubstore.ids import now_ms

    add_messages(store, [now_ms() - 2 * DAY, now_ms() + DAY])
    assert store.prune_messages(DAY) == 1
    assert len(remaining(store)["messages"]) == 1


def test_inside_a_unit_of_work_the_prune_is_part_of_its_transaction(store: HubStore) -> None:
    add_messages(store, [NOW - 2 * DAY] * 5)
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        assert uow.prune_messages(DAY, now_ms=NOW, batch_size=2) == 5
        assert not remaining_in(uow)
        raise RuntimeError("roll back")
    assert len(remaining(store)["messages"]) == 5
    assert_figures_exact(store)
    with store.unit_of_work() as uow:
        assert uow.prune_messages(DAY, now_ms=NOW, batch_size=2) == 5
    assert remaining(store) == {"messages": set(), "inbox": set(), "dead_letters": set()}
    assert_figures_exact(store)


def remaining_in(uow: Any) -> int:
    return int(uow.connection.scalar(select(func.count()).select_from(table_of(Message))))


@pytest.mark.parametrize(("args", "says"), [
    ({"older_than_ms": -1}, "older_than_ms must be at least 0"),
    ({"older_than_ms": DAY, "batch_size": 0}, "batch_size must be at least 1"),
    ({"older_than_ms": True}, "older_than_ms must be an integer"),
    ({"older_than_ms": DAY, "now_ms": "soon"}, "now_ms must be an integer"),
])
def test_prune_refuses_bad_arguments(store: HubStore, args: dict[str, Any], says: str) -> None:
    add_messages(store, [NOW - 2 * DAY])
    with pytest.raises(ValidationError, match=says):
        store.prune_messages(**args)
    assert len(remaining(store)["messages"]) == 1


def test_batches_are_found_through_an_index(store: HubStore, backend: str) -> None:
    """Each batch reads one index range (priority, created_at_ms): no table scan."""
    params = {"p_priority": 5, "p_from": 0, "p_before": NOW, "p_limit": 10}
    plan = query_plan(store, retention.BATCH.params(**params))
    if backend == "sqlite":
        assert "USING INDEX idx_messages_priority (priority=? AND created_at_ms>? " \
               "AND created_at_ms<?)" in plan, plan
    else:
        assert "idx_messages_priority" in plan and "Sort" not in plan, plan


def log_rows(store: HubStore) -> list[str]:
    with store.unit_of_work(write=False) as uow:
        return list(uow.connection.scalars(
            select(table_of(MessageLog).c.message_id).order_by(table_of(MessageLog).c.seq)))


def test_prune_deletes_the_log_rows_of_pruned_messages_and_feeds_go_on(
        store: HubStore) -> None:
    """message_log keeps no row of a deleted message; a feed's cursor stays valid."""
    feed = store.message_feed("a1")
    old = [store.audit_log("event", "x", "a1", "t", payload={"n": n}) for n in range(3)]
    assert [m.payload["n"] for m in feed.next(timeout_s=0, max_messages=2)] == [0, 1]
    cursor = feed.cursor
    cutoff = old[-1].created_at_ms + 1
    while now_ms() <= cutoff:  # the messages below are created after the cutoff
        time.sleep(0.001)
    new = [store.audit_log("event", "x", "a1", "t", payload={"n": n}) for n in (3, 4)]
    assert store.prune_messages(0, now_ms=cutoff, batch_size=2) == 3
    assert log_rows(store) == [m.id for m in new]
    # resumed after message 1: message 2 was pruned, the later ones come in order
    resumed = store.message_feed("a1", cursor=cursor)
    assert [m.payload["n"] for m in resumed.next(timeout_s=0)] == [3, 4]
    # everything pruned, the log keeps its newest row (the high-water mark): a cursor at
    # its old end still sees what follows
    end = resumed.cursor
    assert store.prune_messages(0, batch_size=1000) == 2
    assert log_rows(store) == [new[-1].id]
    fresh = store.message_feed("a1")
    later = store.audit_log("event", "x", "a1", "t", payload={"n": 5})
    for reader in (store.message_feed("a1", cursor=end), fresh):
        assert [m.id for m in reader.next(timeout_s=0)] == [later.id]


def pass_time(at_ms: int) -> None:
    """Wait until the clock is past ``at_ms`` (prune deletes what is strictly older)."""
    while now_ms() <= at_ms:
        time.sleep(0.001)


def log_seqs(store: HubStore) -> list[int]:
    with store.unit_of_work(write=False) as uow:
        return list(uow.connection.scalars(
            select(table_of(MessageLog).c.seq).order_by(table_of(MessageLog).c.seq)))


@pytest.mark.parametrize("batch_size", [1, 2, 1000])
def test_a_full_prune_keeps_the_newest_seq_so_no_cursor_skips_what_follows(
        store: HubStore, batch_size: int) -> None:
    """On SQLite seq is the rowid (max + 1): had the trim deleted the newest log row, the
    next message would get a seq at or below a cursor taken before the prune, and that
    cursor would never see it. Each round prunes everything, whatever the batch size."""
    feed = store.message_feed("a1")
    for round_ in range(3):
        sent = [store.audit_log("event", "x", "a1", "t", payload={"n": n}) for n in range(3)]
        assert [m.id for m in feed.next(timeout_s=0)] == [m.id for m in sent]
        before = feed.cursor
        high = log_seqs(store)[-1]
        pass_time(sent[-1].created_at_ms)
        assert store.prune_messages(0, batch_size=batch_size) == 3
        assert log_seqs(store) == [high]  # only the high-water mark is left
        later = store.audit_log("event", "x", "a1", "t", payload={"round": round_})
        assert log_seqs(store) == [high, high + 1]
        assert [m.id for m in store.message_feed("a1", cursor=before).next(timeout_s=0)] \
            == [later.id]
        assert [m.id for m in feed.next(timeout_s=0)] == [later.id]
        pass_time(later.created_at_ms)
        assert store.prune_messages(0, batch_size=batch_size) == 1


def test_the_log_trim_leaves_the_rows_of_kept_messages(store: HubStore) -> None:
    ids = add_messages(store, [NOW - 2 * DAY] * 5 + [NOW] * 5)
    assert store.prune_messages(DAY, now_ms=NOW, batch_size=3) == 5
    assert log_rows(store) == ids[5:]


# --- pauses between batches -------------------------------------------------------


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses prune_messages takes between its batches."""
    from hubstore.services import retention

    taken: list[float] = []
    monkeypatch.setattr(retention, "time", type("Clock", (), {
        "sleep": staticmethod(taken.append), "monotonic": staticmethod(time.monotonic)}))
    return taken


def test_prune_pauses_between_batches_only_as_its_own_transactions(
        store: HubStore, sleeps: list[float]) -> None:
    from hubstore.testing.factories import MessageFactory

    now = 10 ** 12
    MessageFactory.create_batch(6, created_at_ms=now - 10_000)
    with store.unit_of_work():  # a store call joined into an open unit of work
        assert store.prune_messages(1000, now_ms=now, batch_size=2) == 6
    assert sleeps == []
    MessageFactory.create_batch(6, created_at_ms=now - 10_000)
    with store.unit_of_work() as uow:  # called on the unit of work
        assert uow.prune_messages(1000, now_ms=now, batch_size=2) == 6
    assert sleeps == []
    MessageFactory.create_batch(6, created_at_ms=now - 10_000)
    assert store.prune_messages(1000, now_ms=now, batch_size=2) == 6
    assert len(sleeps) == 3  # after each full batch, its own short transaction
    assert store.get_hub_stats()["total_messages"] == 0
