"""Revision 0016 (a limit's finished jobs counted on release rows of their own): down to
0015 and up again with limits, running and finished jobs on both dialects, every count
and the latest release time kept, and 0014's triggers counting again in between."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from tests.helpers import present
from tests.reference_ddl import table_names


def test_down_to_0015_and_up_again_keeps_every_count(db_url: URL, backend: str) -> None:
    stripes = 8 if backend == "postgresql" else 1
    with HubStore.open(db_url) as store:
        store.set_assign_limit("k", max_running=5)
        store.set_assign_limit("r", max_starts=10, per_ms=60_000)
        store.assign_many("lead", "w", [{"task": f"t{i}", "limit_key": "k"} for i in range(4)])
        claimed = store.claim_next_assigns("w", 4)
        for job in claimed[:2]:
            store.finish_assign(job, "succeeded")
        ended = max(present(store.get_assign(job.job_id)).updated_at_ms
                    for job in claimed[:2])
        assert store.get_assign_limits()["k"].running == 2
    engine = create_engine(db_url)
    try:
        migrations.downgrade(db_url, "0015")
        with engine.begin() as conn:
            assert "assign_limit_releases" not in table_names(conn)
            rows: dict[str, int] = dict(conn.execute(text(
                "SELECT key, running FROM assign_limits")).all())
            assert rows == {"k": 2, "r": 0}
            assert conn.execute(text("SELECT released_at_ms FROM assign_limits "
                                     "WHERE key = 'k'")).scalar_one() == ended
            conn.execute(text("UPDATE assign_jobs SET status = 'succeeded', "
                              "updated_at_ms = :at WHERE job_id = :j"),
                         {"j": claimed[2].job_id, "at": ended + 5})  # 0014's trigger

            assert conn.execute(text("SELECT running FROM assign_limits "
                                     "WHERE key = 'k'")).scalar_one() == 1
        migrations.upgrade(db_url)
        with engine.connect() as conn:
            spread = conn.execute(text(
                "SELECT stripe, released, released_at_ms FROM assign_limit_releases "
                "WHERE key = 'k' ORDER BY stripe")).all()
        assert [(stripe, released) for stripe, released, _ in spread] == [
            (n, 0) for n in range(stripes)]
        assert spread[0][2] == ended + 5  # the latest release time, kept
    finally:
        engine.dispose()
    with HubStore.open(db_url) as store:
        limit = store.get_assign_limits()["k"]
        assert (limit.started, limit.running) == (1, 1)
        store.assign_many("lead", "w", [{"task": f"u{i}", "limit_key": "k"}
                                        for i in range(6)])
        assert len(store.claim_next_assigns("w", 10)) == 4  # 1 running, at most 5
        store.finish_assign(present(store.get_assign(claimed[3].job_id)), "succeeded")
        assert store.get_assign_limits()["k"].running == 4
