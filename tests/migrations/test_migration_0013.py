"""Revision 0013: the status check takes 'cancelled', on hubstore's tables and on a
triflux file's (the check inline, unnamed), with no table rebuilt; down again, cancelled
jobs become failed and nothing else changes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, migrations
from hubstore.health import figure_findings
from hubstore.ids import now_ms
from tests.helpers import present
from tests.reference_ddl import build_legacy, schema_objects, snapshot


def _assign_jobs_sql(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' "
                                "AND name = 'assign_jobs'").fetchone()[0])


def test_down_to_0012_cancelled_jobs_become_failed_and_nothing_else_changes(
        db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        cancelled = store.assign_async("lead", "w1", task="c")
        store.cancel_assign(cancelled.job_id, reason="no longer")
        kept = [store.assign_async("lead", "w1", task="q"),
                store.create_assign("lead", "w1", status="failed", error={"e": 1})]
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            schema, rows = schema_objects(conn), snapshot(conn)
        migrations.downgrade(db_url, "0012")
        with engine.connect() as conn:
            after = snapshot(conn)
            assert figure_findings(conn) == []
            status: dict[str, str] = dict(conn.execute(
                text("SELECT job_id, status FROM assign_jobs")).all())
        assert status[cancelled.job_id] == "failed"
        assert {job.job_id: status[job.job_id] for job in kept} == {
            kept[0].job_id: "queued", kept[1].job_id: "failed"}
        assert {t: r for t, r in after.items() if t != "assign_jobs"} == {
            t: r for t, r in rows.items() if t != "assign_jobs"}
        with pytest.raises(Exception, match=r"(?i)check"), engine.begin() as conn:
            conn.execute(text("UPDATE assign_jobs SET status = 'cancelled'"))
        migrations.upgrade(db_url)
        with engine.connect() as conn:
            assert schema_objects(conn) == schema
            assert figure_findings(conn) == []
        with HubStore.open(db_url) as store:
            job = present(store.get_assign(cancelled.job_id))
            assert (job.status, job.error) == ("failed", {"message": "assign job cancelled",
                                                          "reason": "no longer"})
            again = store.cancel_assign(kept[0].job_id)
            assert again is not None and again.status == "cancelled"
    finally:
        engine.dispose()


@pytest.mark.parametrize("version", [3, 4])
def test_a_triflux_files_inline_check_is_widened_in_place(tmp_path: Path,
                                                          version: int) -> None:
    """An adopted file keeps its own CREATE statement (as 0012 left it), its status list
    one value longer, and gets it back byte for byte when downgraded."""
    path = tmp_path / "triflux.db"
    url = make_url(f"sqlite:///{path}")
    build_legacy(url, version)
    migrations.upgrade(url, "0012")
    original = _assign_jobs_sql(path)
    assert "CHECK (status IN ('queued','running','succeeded','failed','timed_out'))" in original
    migrations.upgrade(url, "0013")
    widened = _assign_jobs_sql(path)
    assert widened == original.replace("'timed_out')", "'timed_out', 'cancelled')")
    migrations.upgrade(url)
    with HubStore.open(url) as store:
        job = store.assign_async("lead", "w1")
        assert present(store.cancel_assign(job.job_id)).status == "cancelled"
    migrations.downgrade(url, "0012")
    assert _assign_jobs_sql(path) == original
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_connection_open_during_the_upgrade_sees_the_new_check(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    migrations.upgrade(f"sqlite:///{path}", "0012")
    before = sqlite3.connect(path, isolation_level=None)  # open across the upgrade
    try:
        before.execute("SELECT count(*) FROM assign_jobs").fetchone()  # schema read
        migrations.upgrade(f"sqlite:///{path}")
        now = now_ms()
        before.execute(
            "INSERT INTO assign_jobs (job_id, supervisor_agent, worker_agent, status, "
            "trace_id, correlation_id, created_at_ms, updated_at_ms) "
            "VALUES ('j', 'lead', 'w', 'cancelled', 't', 'c', ?, ?)", (now, now))
    finally:
        before.close()


def test_postgresql_keeps_the_checks_name(empty_url: URL, backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("PostgreSQL names an inline check itself")
    build_legacy(empty_url, 4)
    engine = create_engine(empty_url)
    query = text("SELECT conname FROM pg_constraint WHERE conrelid = 'assign_jobs'::regclass "
                 "AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%timed_out%'")
    try:
        with engine.connect() as conn:
            [name] = conn.execute(query).scalars().all()
        migrations.upgrade(empty_url)
        with engine.connect() as conn:
            assert conn.execute(query).scalars().all() == [name]
            definition = conn.execute(text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
                {"n": name}).scalar_one()
        assert "'cancelled'" in definition
        migrations.downgrade(empty_url, "0012")
        with engine.connect() as conn:
            assert conn.execute(query).scalars().all() == [name]
    finally:
        engine.dispose()
