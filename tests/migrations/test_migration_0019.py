"""Revision 0019 (PostgreSQL's queued jobs indexed in two halves, without and with a
limit key): down to 0018 and up again with queued, keyed and finished jobs on both
dialects; the claim index's predicate each way, the keyed index only on PostgreSQL,
and claims that take every job once in claim order after each move."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations

CLAIM = "ix_assign_jobs_claim"
KEYED = "ix_assign_jobs_claim_keyed"
SCHEDULED = "ix_assign_jobs_scheduled"


def claim_indexes(url: URL) -> dict[str, str]:
    """The claim indexes of assign_jobs and their predicates (as the database says)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = inspect(conn).get_indexes("assign_jobs")
    finally:
        engine.dispose()
    return {ix["name"]: str(ix.get("dialect_options", {}).get(
                "postgresql_where", ix.get("dialect_options", {}).get("sqlite_where", "")))
            for ix in found if ix["name"] in (CLAIM, KEYED, SCHEDULED)}


def test_down_to_0018_and_up_again(db_url: URL, backend: str) -> None:
    with HubStore.open(db_url) as store:
        store.set_assign_limit("k", max_running=1)
        store.assign_many("lead", "w", [{"task": "free", "priority": 5},
                                        {"task": "keyed", "limit_key": "k", "priority": 7},
                                        {"task": "keyed2", "limit_key": "k", "priority": 6},
                                        {"task": "none", "limit_key": "nolimit"}])
        first = store.claim_next_assign("w")
        assert first is not None and first.task == "keyed"
    postgresql = backend == "postgresql"
    up = claim_indexes(db_url)
    if postgresql:
        assert set(up) == {CLAIM, KEYED, SCHEDULED}
        assert "limit_key IS NULL" in up[CLAIM] and "limit_key IS NOT NULL" in up[KEYED]
    else:
        assert set(up) == {CLAIM}
    migrations.downgrade(db_url, "0018")
    down = claim_indexes(db_url)
    assert set(down) == {CLAIM}
    assert "limit_key" not in down[CLAIM]
    migrations.upgrade(db_url)
    assert claim_indexes(db_url) == up
    with HubStore.open(db_url) as store:
        # "keyed2" waits for k's room; the others in claim order
        assert [job.task for job in store.claim_next_assigns("w", 10)] == ["free", "none"]
        store.finish_assign(first, "succeeded")
        assert [job.task for job in store.claim_next_assigns("w", 10)] == ["keyed2"]
