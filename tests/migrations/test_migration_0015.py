"""Revision 0015 (the console's reads): each worker's queued and running jobs kept by
triggers through every move a job makes, whoever makes it (hubstore, raw SQL, the
reference store); down to 0014 and up again with rows, the counts counted again;
dead letters read newest first from their index."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import URL, Engine, make_url

from hubstore import HubStore, health, migrations
from hubstore.health import figure_findings
from hubstore.models import DeadLetter
from hubstore.services.stats import fold_deltas, jobs_by_worker
from tests.factories import MessageFactory
from tests.helpers import present, query_plan
from tests.reference_ddl import column_names, schema_objects, snapshot, table_names
from tests.reference_runner import reference_hub, run_reference


def depths(store: HubStore) -> dict[str, tuple[int, int]]:
    """Every worker's (queued, running) as the counts say."""
    with store.transaction(write=False) as uow:
        return {w: (q, r) for w, q, r in jobs_by_worker(uow, 1_000)}


def counted(engine: Engine) -> dict[str, tuple[int, int]]:
    """Every worker's (queued, running), by counting the jobs."""
    with engine.connect() as conn:
        return {str(w): (int(q), int(r)) for w, q, r in conn.execute(text(
            "SELECT worker_agent, sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END), "
            "sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) FROM assign_jobs "
            "WHERE status IN ('queued', 'running') GROUP BY worker_agent"))}


def agree(store: HubStore) -> dict[str, tuple[int, int]]:
    """The counts, checked against the jobs and by ``db check``'s figure checks."""
    kept = depths(store)
    assert kept == counted(store.engine)
    with store.engine.connect() as conn:
        assert figure_findings(conn) == []
    return kept


def test_the_counts_follow_every_move_of_a_job(store: HubStore) -> None:
    first = store.assign_async("lead", "w1", max_retries=1)
    store.assign_many("lead", "w2", [{"task": "a"}, {"task": "b"}, {"task": "c"}])
    store.create_assign("lead", "w3", status="running")
    assert agree(store) == {"w1": (1, 0), "w2": (3, 0), "w3": (0, 1)}
    claimed = present(store.claim_next_assign("w1"))
    store.report_assign_result(claimed.job_id, "running", worker_agent="w1",
                               attempt=claimed.attempt, metadata={"progress": 1})
    assert agree(store)["w1"] == (0, 1)
    store.finish_assign(claimed, "failed")  # retried: queued again
    assert agree(store)["w1"] == (1, 0)
    again = present(store.claim_next_assign("w1"))
    store.finish_assign(again, "succeeded")
    assert "w1" not in agree(store)  # a worker with none has no row
    batch = store.claim_next_assigns("w2", 2)
    store.cancel_assign(batch[0].job_id)
    store.cancel_assign(store.list_assigns(worker_agent="w2", status="queued")[0].job_id)
    assert agree(store)["w2"] == (0, 1)
    with store.engine.begin() as conn:  # raw SQL: a job handed to another worker, one
        conn.execute(text("UPDATE assign_jobs SET worker_agent = 'w4' "  # deleted
                          "WHERE job_id = :j"), {"j": batch[1].job_id})
        conn.execute(text("DELETE FROM assign_jobs WHERE worker_agent = 'w3'"))
    assert agree(store) == {"w4": (0, 1)}
    assert store.get_assign(first.job_id) is not None


def fold(store: HubStore) -> None:
    """PostgreSQL: the deltas folded into the counts now (as a busy hub's reads do)."""
    if store.dialect == "postgresql":
        fold_deltas(store.engine)


def test_the_counts_survive_the_fold_and_rank_the_busiest_first(store: HubStore) -> None:
    for worker, jobs in (("w-a", 3), ("w-b", 5), ("w-c", 1)):
        store.assign_many("lead", worker, [{} for _ in range(jobs)])
    present(store.claim_next_assign("w-c"))
    fold(store)
    assert list(agree(store)) == ["w-b", "w-a", "w-c"]
    with store.transaction(write=False) as uow:
        assert jobs_by_worker(uow, 2) == [("w-b", 5, 0), ("w-a", 3, 0)]
    for job in store.claim_next_assigns("w-b", 5):
        store.finish_assign(job, "succeeded")
    fold(store)
    assert "w-b" not in agree(store)


def test_down_to_0014_and_up_again(db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        store.assign_many("lead", "w1", [{}, {}])
        running = store.assign_async("lead", "w2")
        present(store.claim_next_assign("w2"))
        store.move_to_dead_letter(store.audit_log("event", "lead", "w1", "t").id, "boom")
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            # (the columns of revisions 0017 and 0020 go on the way down)
            later = {"limit_share", "timeout_from", "claimed_by"}
            kept = [c for c in column_names(conn)["assign_jobs"] if c not in later]
            schema, before = schema_objects(conn), snapshot(conn, columns={"assign_jobs": kept})
        migrations.downgrade(db_url, "0014")
        with engine.connect() as conn:
            assert not {"assign_worker_counts", "assign_worker_count_deltas"} & table_names(
                conn)
            assert snapshot(conn) == before  # no job, message or dead letter changed
            assert figure_findings(conn) == []
        with engine.begin() as conn:  # jobs move below 0015: nobody counts them
            conn.execute(text("UPDATE assign_jobs SET status = 'succeeded' "
                              "WHERE job_id = :j"), {"j": running.job_id})
        migrations.upgrade(db_url)
        with engine.connect() as conn:
            assert schema_objects(conn) == schema
        with HubStore.open(db_url) as store:
            assert agree(store) == {"w1": (2, 0)}  # counted again by the upgrade
            present(store.claim_next_assign("w1"))
            assert agree(store) == {"w1": (1, 1)}  # and the triggers are back
    finally:
        engine.dispose()


def test_the_reference_store_moves_jobs_and_the_counts_follow(tmp_path: Path) -> None:
    hub = reference_hub()
    path = tmp_path / "hub.db"
    url = f"sqlite:///{path}"
    with HubStore.open(url, auto_migrate=True) as store:
        job = store.assign_async("lead", "w", task="theirs to finish")
        claimed = present(store.claim_next_assign("w"))
        store.assign_async("lead", "w", task="still queued")
    _, theirs = run_reference(hub, path, [
        ["updateAssignStatus", claimed.job_id, "succeeded"],
        ["createAssign", {"supervisor_agent": "lead", "worker_agent": "v", "task": "t"}],
    ])
    with HubStore.open(url) as store:
        assert agree(store) == {"w": (1, 0), "v": (1, 0)}
        assert present(store.get_assign(job.job_id)).status == "succeeded"
        assert theirs["worker_agent"] == "v"
    assert health.check(make_url(url)) == []


def test_dead_letters_are_read_newest_first_from_their_index(store: HubStore) -> None:
    messages = [MessageFactory.create() for _ in range(5)]
    for message in messages:
        store.move_to_dead_letter(message.id, "boom")
    letters = store.get_dead_letters(limit=3)
    assert [d.failed_at_ms for d in letters] == sorted(
        (d.failed_at_ms for d in letters), reverse=True)
    everything = sorted(store.get_dead_letters(limit=10),
                        key=lambda d: (d.failed_at_ms, d.message_id), reverse=True)
    assert [d.message_id for d in letters] == [d.message_id for d in everything[:3]]
    plan = query_plan(store, select(DeadLetter).order_by(
        DeadLetter.failed_at_ms.desc(), DeadLetter.message_id.desc()).limit(3))
    assert "ix_dead_letters_failed" in plan and "TEMP B-TREE" not in plan, plan
