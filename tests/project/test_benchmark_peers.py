"""The peers lane (``bench_store.py --peers``) runs end to end, counts every job, and
says what it measured (no timing asserted).

Each run is a tiny one (2 workers, 20 jobs, 1 repeat) on the test's own PostgreSQL
server database, through the script's command line, as the README runs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib import util
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore
from tests.conftest import PostgresDatabases

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_store.py"
HEADS = ["enqueue 1/call", "enqueue 10/call", "claim+complete 1/claim",
         "claim+complete 10/claim"]
TINY = ["--processes", "2", "--jobs", "20", "--repeat", "1"]


@pytest.fixture
def server(postgres: PostgresDatabases) -> Iterator[URL]:
    """The lane's --url: an empty database of the test's own (only connected to); the
    lane's own databases, named after it, must all be gone afterwards."""
    url = postgres.create("hubstore_peers")
    with postgres.admin.connect() as conn:  # the server's own durability, as the lane's
        conn.execute(text(f'ALTER DATABASE "{url.database}" RESET synchronous_commit'))
    yield url
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            left = conn.execute(text("SELECT datname FROM pg_database WHERE datname LIKE "
                                     ":prefix"), {"prefix": f"{url.database}_peers_%"}).all()
    finally:
        engine.dispose()
    postgres.drop(url)
    assert left == [], f"the lane left its databases behind: {left}"


def peers(url: URL, *args: str) -> tuple[dict[str, Any], str]:
    """Run the lane; its JSON line, parsed, and the table after it."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--peers", "--url",
         url.render_as_string(hide_password=False), *TINY, *args],
        capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    first, _, table = done.stdout.partition("\n")
    payload: dict[str, Any] = json.loads(first)
    return payload, table


def assert_each_job_once(payload: dict[str, Any], system: str) -> None:
    runs = [run for run in payload["runs"] if run["system"] == system]
    assert runs and all(run["ok"] and not run["errors"] for run in runs), runs
    for run in runs:
        assert run["checks"] and all(run["checks"].values()), run
        assert run["checks"]["enqueued_distinct"] and run["checks"]["unlogged_tables"]
        assert run["checks"]["sessions_synchronous_commit"]
        if f"claim_{run['mode']}" in run["rates"]:
            assert run["checks"]["handlers_given_each_job_once"]
            assert sum(run["per_worker"]) == 20 and len(run["per_worker"]) == 2


def test_peers_lane_with_hubstore_alone_completes_each_job_once(server: URL) -> None:
    payload, table = peers(server, "--systems", "hubstore")
    assert payload["mode"] == "peers" and payload["ok"] is True
    assert (payload["jobs"], payload["processes"], payload["repeat"]) == (20, 2, 1)
    assert_each_job_once(payload, "hubstore")
    hub = payload["results"]["hubstore"]
    assert hub["enqueue_1"]["median"] > 0 and hub["claim_1"]["median"] > 0
    calls = payload["systems"]["hubstore"]["calls"]
    assert calls["enqueue_1"] == "assign_async"
    assert calls["claim_1"] == "claim_next_assign + report_assign_result"
    # the batch lanes: measured once HubStore has the calls, n/a until then
    assert (hub["enqueue_10"] is None) == (not hasattr(HubStore, "assign_many"))
    assert (hub["claim_10"] is None) == (not hasattr(HubStore, "claim_next_assigns"))
    assert payload["ratios"] == {}
    lines = table.splitlines()
    assert all(head in lines[1] for head in HEADS)
    assert lines[3].startswith("hubstore ")
    if hub["claim_10"] is None:
        assert lines[3].split()[-1] == "n/a"
    assert "durability: synchronous_commit=" in table
    assert "left as they are for every system" in table
    assert "each job completed exactly once: yes" in table


@pytest.mark.slow
def test_peers_lane_runs_each_installed_peer_beside_hubstore(server: URL) -> None:
    """pgqueuer and procrastinate where installed (the bench-peers extra), each skipped
    with the reason where not; every job of every run completed exactly once."""
    payload, table = peers(server)
    assert payload["ok"] is True
    assert_each_job_once(payload, "hubstore")
    # read work per job, from the server's own counters (a claim reads at least its job)
    assert payload["results"]["hubstore"]["fetched_per_job_1"] >= 1
    assert "tuples fetched per job (pg_stat_database)" in table
    for peer, module in (("pgqueuer", "asyncpg"), ("procrastinate", "procrastinate")):
        about = payload["systems"][peer]
        if util.find_spec(peer) is None or util.find_spec(module) is None:
            assert "bench-peers" in about["skipped"]
            assert f"{peer}: skipped" in table
            assert peer not in payload["ratios"]
            continue
        assert about["skipped"] is None and about["version"]
        assert_each_job_once(payload, peer)
        results = payload["results"][peer]
        assert results["enqueue_1"]["median"] > 0 and results["claim_1"]["median"] > 0
        assert results["enqueue_10"]["median"] > 0  # both have a batch enqueue
        ratio = payload["ratios"][peer]["claim_1"]
        assert ratio["of_medians"] == pytest.approx(
            payload["results"]["hubstore"]["claim_1"]["median"] / results["claim_1"]["median"],
            rel=0.01)
        assert any(line.startswith(f"hubstore / {peer} ") for line in table.splitlines())
    procrastinate = payload["systems"]["procrastinate"]
    if procrastinate["skipped"] is None:  # no batch claim: n/a, its batch jobs only queued
        assert procrastinate["calls"]["claim_10"] is None
        assert payload["results"]["procrastinate"]["claim_10"] is None


def _refused(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), "--peers", *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_peers_lane_needs_a_postgresql_server_and_hubstore(tmp_path: Path) -> None:
    assert "PostgreSQL server" in _refused("--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert "PostgreSQL server" in _refused()
    assert "holding hubstore" in _refused(
        "--url", "postgresql+psycopg://postgres@127.0.0.1/postgres", "--systems", "pgqueuer")


def test_a_failed_check_fails_the_run_loudly(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    lane = importlib.import_module("bench.peers")
    args = argparse.Namespace(
        url="postgresql+psycopg://postgres@127.0.0.1/postgres", jobs=20, processes=2,
        repeat=1, json_only=False, durability={
            "version": "15", "synchronous_commit": "on", "synchronous_commit_source":
            "default", "fsync": "on", "fsync_source": "default"})
    systems = {"hubstore": {"version": "0", "skipped": None, "calls": {
        "enqueue_1": "assign_async", "enqueue_10": None, "claim_1": "claim", "claim_10": None}}}
    run = {"system": "hubstore", "mode": 1, "repeat": 1, "rates": {"enqueue_1": 1.0,
           "claim_1": 1.0}, "errors": [], "ok": False,
           "checks": {"handlers_given_each_job_once": False, "unlogged_tables": True,
                      "sessions_synchronous_commit": True},
           "seen": {"handlers_given_each_job_once": {"got": 21, "want": 20}}}
    assert lane.report(args, systems, [run], args.durability) == 1
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[0])["ok"] is False
    assert "each job completed exactly once: NO" in out
    assert "FAILED: hubstore mode 1 repeat 1: handlers_given_each_job_once" in out
