"""Revision 0021 (PostgreSQL: the earliest active deadline read from an index of its own):
with statistics that know nothing of a burst of queued jobs, the look reads one entry of
``ix_assign_jobs_active_deadline`` where it read every queued job; down to 0020 and up
again on both dialects, every job and the earliest deadline as before."""

from __future__ import annotations

from typing import cast

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.sql import ClauseElement

from hubstore import HubStore, migrations
from hubstore.services.assigns import rescue
from tests.helpers import analyzed

INDEX = "ix_assign_jobs_active_deadline"


def _look(url: URL, without: str | None = None) -> tuple[str, int]:
    """The earliest-deadline look run under EXPLAIN ANALYZE on PostgreSQL (``without``
    that index, dropped in a transaction rolled back): its plan, and the rows its scans
    read in all."""
    statement = cast(ClauseElement, rescue.EARLIEST_DEADLINE.statement)
    engine = create_engine(url)
    sql = str(statement.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    try:
        with engine.connect() as conn:
            if without is not None:
                conn.exec_driver_sql(f"DROP INDEX {without}")
            plan, read = analyzed(conn, sql)
            conn.rollback()
    finally:
        engine.dispose()
    return plan, read


def _earliest(url: URL) -> int | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT min(deadline_ms) FROM assign_jobs WHERE deadline_ms IS NOT NULL "
                "AND status IN ('queued', 'running')")).scalar_one_or_none()
    finally:
        engine.dispose()


def test_down_to_0020_and_up_again(db_url: URL) -> None:
    postgres = db_url.get_backend_name() == "postgresql"
    with HubStore.open(db_url) as store:
        # a burst the statistics have not seen (the database is new: no ANALYZE yet)
        for _ in range(20):
            store.assign_many("lead", "w1", [{"task": "t", "timeout_ms": 60_000}] * 100)
        running = store.claim_next_assign("w1")
        assert running is not None
        store.finish_assign(running, "succeeded")
        jobs = [j.to_dict() for j in store.list_assigns(limit=100)]
    earliest = _earliest(db_url)
    assert earliest is not None
    if postgres:
        plan, read = _look(db_url)
        assert INDEX in plan and read == 1, plan
        # without it, the same statistics send the look through the status index's
        # queued range, every row fetched and sorted
        plan, read = _look(db_url, without=INDEX)
        assert read >= 2_000, plan
    migrations.downgrade(db_url, "0020")
    assert _earliest(db_url) == earliest
    migrations.upgrade(db_url)
    with HubStore.open(db_url) as store:
        assert [j.to_dict() for j in store.list_assigns(limit=100)] == jobs
    assert _earliest(db_url) == earliest
    if postgres:
        plan, read = _look(db_url)
        assert INDEX in plan and read == 1, plan
