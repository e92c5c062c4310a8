"""Revision 0017 (a limit's running room split in shares): down to 0016 and up again with
limits, shares, running and finished jobs on both dialects, every count kept, 0016's
triggers counting in between, and a limit split again once it is set after the upgrade."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from tests.helpers import present
from tests.reference_ddl import column_names, table_names


def test_down_to_0016_and_up_again_keeps_every_count(db_url: URL, backend: str) -> None:
    shares = 5 if backend == "postgresql" else 1  # 10 // 2 on PostgreSQL's 8 stripes
    with HubStore.open(db_url) as store:
        assert store.set_assign_limit("k", max_running=10).shares == shares
        store.set_assign_limit("r", max_starts=10, per_ms=60_000)
        store.assign_many("lead", "w", [{"task": f"t{i}", "limit_key": "k"} for i in range(7)]
                          + [{"task": "r", "limit_key": "r"}])
        claimed = store.claim_next_assigns("w", 8)
        assert len(claimed) == 8
        for job in claimed[:3]:
            store.finish_assign(job, "succeeded")
        limits = store.get_assign_limits()
        assert (limits["k"].started, limits["k"].running) == (7, 4)
        assert (limits["r"].running, len(limits["r"].starts)) == (1, 1)
    engine = create_engine(db_url)
    try:
        migrations.downgrade(db_url, "0016")
        with engine.begin() as conn:
            assert "assign_limit_shares" not in table_names(conn)
            assert "limit_share" not in column_names(conn)["assign_jobs"]
            rows: dict[str, int] = dict(conn.execute(text(
                "SELECT key, started FROM assign_limits")).all())
            assert rows == {"k": 7, "r": 1}  # the shares' starts, summed
            # 0016's trigger counts a start on the limit's row again
            conn.execute(text("UPDATE assign_jobs SET status = 'running', "
                              "updated_at_ms = updated_at_ms + 1 WHERE job_id = :j"),
                         {"j": claimed[0].job_id})
            assert conn.execute(text("SELECT started FROM assign_limits WHERE key = 'k'")
                                ).scalar_one() == 8
        migrations.upgrade(db_url)
        with engine.connect() as conn:
            spread = conn.execute(text(
                "SELECT share, budget, started FROM assign_limit_shares WHERE key = 'k'"
            )).all()
            assert [tuple(row) for row in spread] == [(0, 10, 8)]  # one share until set
            assert conn.execute(text("SELECT shares FROM assign_limits WHERE key = 'k'")
                                ).scalar_one() == 1
    finally:
        engine.dispose()
    with HubStore.open(db_url) as store:
        limit = store.get_assign_limits()["k"]
        assert (limit.started, limit.running) == (8, 5)
        store.assign_many("lead", "w", [{"task": f"u{i}", "limit_key": "k"}
                                        for i in range(9)])
        assert len(store.claim_next_assigns("w", 10)) == 5  # 5 running, at most 10
        again = store.set_assign_limit("k", max_running=10)
        assert (again.shares, again.running) == (shares, 10)
        store.finish_assign(present(store.get_assign(claimed[3].job_id)), "succeeded")
        assert store.get_assign_limits()["k"].running == 9
        assert len(store.claim_next_assigns("w", 10)) == 1
        assert store.get_assign_limits()["k"].running == 10
