"""Revision 0014 (quotas, unique jobs, schedules): down and up again on both dialects,
refused while a queued or running job has a key to keep; the reference store keeps
working on such a file, its moves of a limited job counted by the triggers."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, health, migrations
from hubstore.health import figure_findings
from tests.helpers import present
from tests.reference_ddl import column_names, schema_objects, snapshot, table_names
from tests.reference_runner import reference_hub, run_reference


def test_down_to_0013_and_up_again(db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        store.set_assign_limit("k", max_running=1)
        store.set_assign_schedule("s", "lead", "w", every_ms=60_000)
        live = store.assign_async("lead", "w", limit_key="k", unique_key="u")
        done = store.assign_async("lead", "w2", task="done", limit_key="k")
        store.cancel_assign(done.job_id)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            schema, before = schema_objects(conn), snapshot(conn)
        with pytest.raises(Exception, match="0014"):
            migrations.downgrade(db_url, "0013")
        with engine.connect() as conn:
            assert snapshot(conn) == before  # refused: nothing changed
        with HubStore.open(db_url) as store:
            store.cancel_assign(live.job_id)
        migrations.downgrade(db_url, "0013")
        with engine.connect() as conn:
            assert not {"assign_limits", "assign_schedules"} & table_names(conn)
            assert "limit_key" not in column_names(conn)["assign_jobs"]
            assert figure_findings(conn) == []
            jobs = {row[0] for row in conn.execute(text("SELECT job_id FROM assign_jobs"))}
        assert jobs == {live.job_id, done.job_id}
        migrations.upgrade(db_url)
        with engine.connect() as conn:
            assert schema_objects(conn) == schema
        with HubStore.open(db_url) as store:
            assert store.get_assign_limits() == {} and store.get_assign_schedules() == {}
            store.set_assign_limit("k", max_running=1)
            store.assign_many("lead", "w", [{"limit_key": "k"}, {"limit_key": "k"}])
            assert len(store.claim_next_assigns("w", 5)) == 1  # the triggers are back
    finally:
        engine.dispose()


def test_the_reference_store_moves_a_limited_job_and_the_count_follows(
        tmp_path: Path) -> None:
    hub = reference_hub()
    path = tmp_path / "hub.db"
    url = f"sqlite:///{path}"
    with HubStore.open(url, auto_migrate=True) as store:
        store.set_assign_limit("codex", max_running=1)
        job = store.assign_async("lead", "w", limit_key="codex")
        claimed = present(store.claim_next_assign("w"))
        assert store.get_assign_limits()["codex"].running == 1
    got, finished, theirs = run_reference(hub, path, [
        ["getAssign", job.job_id],
        ["updateAssignStatus", claimed.job_id, "succeeded"],
        ["createAssign", {"supervisor_agent": "lead", "worker_agent": "w", "task": "t"}],
    ])
    assert got["status"] == "running" and finished["status"] == "succeeded"
    with HubStore.open(url) as store:
        assert store.get_assign_limits()["codex"].running == 0  # the trigger saw it
        written = present(store.get_assign(theirs["job_id"]))
        assert (written.limit_key, written.unique_key) == (None, None)
    assert health.check(make_url(url)) == []

