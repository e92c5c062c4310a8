"""The benchmark script runs end to end and reports what it claims to (no timing asserted).

Each run is a tiny one (a few operations) in a database of the test's own, through the
script's command line, as the README runs it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore
from tests.reference_runner import reference_store

CHECKOUT = Path(__file__).resolve().parents[2]
SCRIPT = CHECKOUT / "benchmarks" / "bench_store.py"
PERFORMANCE = CHECKOUT / "docs" / "performance.md"
WORKLOADS = {
    "register_agent", "heartbeat", "audit_log", "poll_for_agent", "assign_lifecycle",
    "reflexion_learn", "reflexion_lookup_ctx", "sweep_and_stats",
}
SCALING_WORKLOADS = {"poll_for_agent", "sweep_and_stats", "reflexion_learn"}


# 100 agents, 3 simulated seconds: per second 10 heartbeats, 50 polls, 50 audit messages,
# 2 assign lifecycles (3 calls each), 1 learn, 1 lookup and 2 figure reads; one sweep at
# t = 0.
HUB_CALLS_3S = 3 * (10 + 50 + 50 + 2 * 3 + 1 + 1 + 2) + 1


def bench(url: URL, *args: str) -> dict[str, Any]:
    """Run the script with --json-only; its one stdout line, parsed."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", url.render_as_string(hide_password=False),
         "--json-only", *args],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    payload: dict[str, Any] = json.loads(lines[0])
    return payload


def refused(url: URL, *args: str, script: Path = SCRIPT) -> str:
    """Run a benchmark script expecting its command line refused (exit 2); its stderr."""
    done = subprocess.run(
        [sys.executable, str(script), "--url", url.render_as_string(hide_password=False),
         *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_standard_run_reports_every_workload_beside_the_published_figures(
        empty_url: URL) -> None:
    payload = bench(empty_url, "-n", "4", "--repeat", "1")
    assert set(payload["results"]) == WORKLOADS
    assert all(rate > 0 for rate in payload["results"].values())
    assert payload["reference_source"] == "published"
    assert payload["reference"]["poll_for_agent"] == 1_180
    assert set(payload["reference"]) == WORKLOADS
    assert payload["yardstick_ops_per_s"] > 0


def test_repeats_report_min_median_max(empty_url: URL) -> None:
    payload = bench(empty_url, "-n", "3", "--repeat", "3", "--workloads", "heartbeat")
    assert set(payload["spread"]) == {"heartbeat"}  # register_agent ran, not reported
    low, mid, high = (payload["spread"]["heartbeat"][k] for k in ("min", "median", "max"))
    assert 0 < low <= mid <= high
    assert payload["results"]["heartbeat"] == mid


def _count(url: URL, table: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def _copies(url: URL, repeats: int) -> list[URL]:
    if url.get_backend_name() == "sqlite":
        return [url.set(database=f"{url.database}.r{k}") for k in range(1, repeats + 1)]
    return [url.set(database=f"{url.database}_r{k}") for k in range(1, repeats + 1)]


def _drop_pg(urls: list[URL]) -> None:
    admin = create_engine(urls[0].set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for url in urls:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)'))
    finally:
        admin.dispose()


def test_every_repeat_starts_from_the_same_preloaded_state(empty_url: URL) -> None:
    """The template keeps the preload only; each repeat's copy got the preload plus one
    repeat's messages (not the messages of the repeats before it)."""
    copies = _copies(empty_url, 2)
    try:
        bench(empty_url, "-n", "5", "--repeat", "2", "--preload", "60",
              "--workloads", "audit_log", "--keep-db")
        assert _count(empty_url, "messages") == 60
        assert [_count(copy, "messages") for copy in copies] == [65, 65]
    finally:
        if empty_url.get_backend_name() == "postgresql":
            _drop_pg(copies)


def test_preloaded_run_loads_the_background_rows(empty_url: URL) -> None:
    payload = bench(empty_url, "-n", "3", "--repeat", "1", "--preload", "60",
                    "--workloads", "poll_for_agent,sweep_and_stats")
    assert payload["preload"] == 60
    assert set(payload["results"]) == {"poll_for_agent", "sweep_and_stats"}
    assert "reference" not in payload  # the reference measured 0 and 100,000 rows only


def test_scaling_reports_each_scale_and_what_is_kept(empty_url: URL) -> None:
    payload = bench(empty_url, "--scaling", "--scales", "24,48", "-n", "3", "--repeat", "1")
    assert payload["scales"] == [24, 48]
    assert set(payload["results"]) == {"24", "48"}
    assert set(payload["kept"]) == SCALING_WORKLOADS
    for name in SCALING_WORKLOADS:
        rates = [payload["results"][scale][name] for scale in ("24", "48")]
        assert payload["kept"][name] == pytest.approx(rates[1] / rates[0], abs=1e-4)


def test_claim_mode_claims_every_job_once(empty_url: URL) -> None:
    payload = bench(empty_url, "--claim", "--processes", "2", "--jobs", "40", "--repeat", "2")
    assert payload["ok"] is True, payload["errors"]
    rates = [run["jobs_per_s"] for run in payload["runs"]]
    assert len(rates) == 2 and all(run["checks"]["claimed_once"] for run in payload["runs"])
    assert payload["jobs_per_s_spread"] == {"min": min(rates), "max": max(rates),
                                            "median": payload["jobs_per_s"]}
    assert payload["checks"] == {
        "claimed_total": 40, "claimed_once": True, "all_claimed": True, "all_succeeded": True,
    }
    assert sum(payload["per_process"]) == 40
    assert payload["statuses"] == {"succeeded": 40}
    per_job = payload["per_job"]
    assert per_job["jobs"] == 40 and per_job["all_claimed"] is True
    assert per_job["statements"] >= 2  # a claim and a finish at least
    assert per_job["commits"] >= 1
    if empty_url.get_backend_name() == "postgresql":
        # issue 11: a claim and a finish, one autocommit statement each, and no ping
        # before a connection in steady use (the trace may catch one idle-spell ping)
        assert per_job["commits"] == pytest.approx(2, abs=0.1)
        assert per_job["commits"] <= per_job["round_trips"] <= 4
    assert "trace" in per_job["method"]


def test_claim_mode_beside_a_lane_without_the_worker_counts(empty_url: URL) -> None:
    """Revision 0015's per-worker count triggers, taken away on the lane's databases (the
    run fails if they are not there to take), its runs paired with hubstore's."""
    payload = bench(empty_url, "--claim", "--processes", "1", "--jobs", "20", "--repeat",
                    "2", "--claim-lanes", "no-worker-counts")
    assert payload["ok"] is True, payload["errors"]
    lane = payload["no-worker-counts_runs"]
    assert len(lane) == 2 and all(run["statuses"] == {"succeeded": 20} for run in lane)
    for what in ("jobs_per_s", "enqueue_jobs_per_s"):
        pairs = sorted(mine[what] / theirs[what]
                       for mine, theirs in zip(lane, payload["runs"], strict=True))
        assert payload[f"no-worker-counts_paired_{what}_share"] == pytest.approx(
            (pairs[0] + pairs[1]) / 2, rel=1e-3)
    assert all(run["enqueue_jobs_per_s"] > 0 for run in payload["runs"])


def test_claim_mode_with_the_raw_driver_lane_claims_every_job_once(empty_url: URL) -> None:
    """The psycopg-alone claimers run hubstore's statements: each job claimed once and
    finished (succeeded, with its completed event), as hubstore's own claimers do."""
    if empty_url.get_backend_name() != "postgresql":
        assert "PostgreSQL (psycopg) only" in refused(empty_url, "--claim", "--raw-driver")
        return
    payload = bench(empty_url, "--claim", "--processes", "2", "--jobs", "30", "--repeat", "1",
                    "--raw-driver")
    assert payload["ok"] is True, payload["errors"]
    (raw,) = payload["raw_driver_runs"]
    assert raw["checks"] == {"claimed_total": 30, "claimed_once": True, "all_claimed": True,
                             "all_succeeded": True}
    assert raw["statuses"] == {"succeeded": 30} and sum(raw["per_process"]) == 30
    assert payload["share_of_raw"] == pytest.approx(
        payload["jobs_per_s"] / raw["jobs_per_s"], rel=1e-3)
    (bare,) = payload["bare_queue_runs"]  # the anchor below both: two bare statements
    assert bare["checks"]["claimed_once"] and bare["checks"]["all_claimed"]
    assert bare["statuses"] == {"succeeded": 30}
    assert payload["raw_share_of_bare"] == pytest.approx(
        raw["jobs_per_s"] / bare["jobs_per_s"], rel=1e-3)
    engine = create_engine(empty_url)
    try:  # the last run's database: the raw lane's 30 jobs (then the counted run's)
        with engine.connect() as conn:
            jobs, unmatched = conn.execute(text(
                "SELECT count(*), count(*) FILTER (WHERE status <> 'succeeded' OR (SELECT "
                "count(*) FROM messages m WHERE m.payload_json->>'job_id' = j.job_id AND "
                "m.payload_json->>'event' = 'completed') <> 1) FROM assign_jobs j")).one()
    finally:
        engine.dispose()
    assert jobs >= 30 and unmatched == 0  # each job succeeded, with one completed event


def layout_script(name: str, url: URL, *args: str) -> dict[str, Any] | None:
    """Run a PostgreSQL layout benchmark (``--json-only``); its JSON line. On SQLite: it
    refuses the URL, and None."""
    script = SCRIPT.with_name(name)
    if url.get_backend_name() != "postgresql":
        assert "must be a PostgreSQL database" in refused(url, script=script)
        return None
    done = subprocess.run(
        [sys.executable, str(script), "--url", url.render_as_string(False), *args,
         "--repeat", "1", "--json-only"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def test_pg_claim_costs_measures_each_layout_variant(empty_url: URL) -> None:
    payload = layout_script("pg_claim_costs.py", empty_url, "--processes", "2", "--jobs", "20")
    if payload is None:
        return
    assert list(payload["runs"]) == [
        "hubstore's layout", "without the counter triggers", "without the message_log stamp",
        "without either", "without either, 3 message indexes fewer"]
    assert all(len(rates) == 1 and rates[0] > 0 for rates in payload["runs"].values())
    engine = create_engine(empty_url)
    try:  # the last variant's database: its triggers and indexes are gone, its jobs done
        with engine.connect() as conn:
            triggers = set(conn.execute(text(
                "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN "
                "('messages'::regclass, 'assign_jobs'::regclass)")).scalars())
            jobs = conn.execute(text(
                "SELECT count(*) FILTER (WHERE status = 'succeeded') FROM assign_jobs")).scalar()
    finally:
        engine.dispose()
    assert not triggers & {"trg_hub_messages_insert", "trg_hub_assign_jobs_update",
                           "trg_hub_message_log"}
    assert jobs == 20


def test_pg_enqueue_costs_runs_every_lane_and_checks_the_rows(empty_url: URL) -> None:
    payload = layout_script("pg_enqueue_costs.py", empty_url, "--jobs", "25", "--batch", "10")
    if payload is None:
        return
    lanes = ["hubstore", "psycopg alone, hubstore's layout", "psycopg alone, no triggers",
             "psycopg alone, no triggers, 7 indexes fewer"]
    assert list(payload["runs"]) == lanes + (["pgqueuer"] if payload["pgqueuer"] else [])
    assert all(len(rates) == 1 and rates[0] > 0
               for per in payload["runs"].values() for rates in per.values())
    engine = create_engine(empty_url)
    try:  # the last lane's database: pgqueuer's 25 rows, or the stripped layout's jobs
        with engine.connect() as conn:
            table = "pgqueuer" if payload["pgqueuer"] else "assign_jobs"
            rows = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()
    finally:
        engine.dispose()
    assert rows == 25


def test_hub_mode_runs_the_same_mix_at_each_history_size(empty_url: URL) -> None:
    payload = bench(empty_url, "--hub", "--scales", "0,60", "--agents", "100",
                    "--seconds", "3", "--budget", "600", "--repeat", "1")
    assert payload["scales"] == [0, 60]
    for scale in ("0", "60"):
        (run,) = payload["results"][scale]["hubstore_runs"]
        assert run["sim_seconds"] == 3 and run["ops"] == HUB_CALLS_3S
        assert run["agent_seconds_per_s"] > 0
        assert payload["results"][scale]["hubstore"]["median"] == run["agent_seconds_per_s"]


def _bench_module(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A module of the script's package ``bench``, imported as the script imports it
    (benchmarks/ is not a package: its folder goes first on sys.path)."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    return importlib.import_module(f"bench.{name}")


def test_raw_driver_lane_does_the_hubs_work_as_hubstore_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The anchor is only worth its figure if it does the same work: its polls return
    the rows hubstore's poll returns, in order; its audit_log writes a message hubstore
    reads back field for field; its heartbeat moves the lease hubstore reads."""
    raw_driver = _bench_module("raw_driver", monkeypatch)
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    with HubStore.open(url, auto_migrate=True) as store:
        store.register_agent("a", "codex", topics=["t.x"])
        store.register_agent("b", "codex", topics=["t.y"])
        raw = raw_driver.RawDriverHub(store)
        written = [raw.audit_log(type="event", from_agent="b", to_agent=to, topic=topic,
                                 payload={"k": k, "s": "é"})
                   for k, (to, topic) in enumerate(
                       [("a", "t.q"), ("topic:t.x", "t.x"), ("b", "t.q"),
                        ("topic:t.y", "t.y"), ("a", "t.y")] * 8)]
        message = store.get_message(written[0])
        assert message is not None
        assert (message.type, message.from_agent, message.to_agent, message.topic,
                message.payload, message.status, message.priority) == (
            "event", "b", "a", "t.q", {"k": 0, "s": "é"}, "queued", 5)
        assert message.expires_at_ms - message.created_at_ms == 300_000
        # a: 16 sent to it and 8 to topic:t.x, cut at 20; b: 8 and 8 to topic:t.y
        for agent, count in (("a", 20), ("b", 16)):
            ours = store.poll_for_agent(agent)
            rows = raw.poll_for_agent(agent)
            assert len(rows) == count
            assert [m.id for m in ours] == [row[0] for row in rows]
            assert [m.payload for m in ours] == [row[11] for row in rows]
        before = store.get_agent("a")
        assert before is not None
        raw.refresh_lease("a")
        after = store.get_agent("a")
        assert after is not None
        assert after.last_seen_ms >= before.last_seen_ms
        assert after.lease_expires_ms == after.last_seen_ms + 30_000
        assert after.lease_expires_ms != before.lease_expires_ms


def test_standard_run_with_the_raw_driver_lane(empty_url: URL) -> None:
    if empty_url.get_backend_name() != "sqlite":
        assert "SQLite files only" in refused(empty_url, "--raw-driver")
        return
    payload = bench(empty_url, "-n", "5", "--repeat", "2", "--raw-driver")
    raw_lane = {"heartbeat", "audit_log", "poll_for_agent"}
    assert set(payload["raw_driver"]) == set(payload["share_of_raw"]) == raw_lane
    for name in raw_lane:
        spread = payload["raw_driver_spread"][name]
        assert 0 < spread["min"] <= spread["median"] == payload["raw_driver"][name]
        assert payload["share_of_raw"][name] == pytest.approx(
            payload["results"][name] / payload["raw_driver"][name], rel=2e-3)
    assert set(payload["results"]) == WORKLOADS  # hubstore's own run is unchanged


def test_hub_mode_with_the_raw_driver_lane_runs_the_same_mix(empty_url: URL) -> None:
    if empty_url.get_backend_name() != "sqlite":
        assert "SQLite files only" in refused(empty_url, "--hub", "--raw-driver")
        return
    payload = bench(empty_url, "--hub", "--scales", "0", "--agents", "100", "--seconds", "3",
                    "--budget", "600", "--repeat", "1", "--raw-driver")
    entry = payload["results"]["0"]
    (ours,) = entry["hubstore_runs"]
    (raw,) = entry["raw_driver_runs"]
    assert raw["sim_seconds"] == ours["sim_seconds"] == 3
    assert raw["ops"] == ours["ops"] == HUB_CALLS_3S
    assert entry["share_of_raw"] == pytest.approx(
        ours["agent_seconds_per_s"] / raw["agent_seconds_per_s"], rel=1e-3)


def test_hub_mode_with_an_operation_count_reports_rss(empty_url: URL) -> None:
    payload = bench(empty_url, "--hub", "--scales", "0", "--ops", "800", "--repeat", "1")
    (run,) = payload["results"]["0"]["hubstore_runs"]
    assert run["ops"] >= 800
    assert run["rss_after_warmup_bytes"] > 0 and run["rss_peak_bytes"] >= run["rss_bytes"]
    assert run["rss_flat"] == (abs(run["rss_bytes"] / run["rss_after_warmup_bytes"] - 1) <= 0.1)


def test_async_is_measured_or_skipped_with_a_note(empty_url: URL) -> None:
    payload = bench(empty_url, "-n", "3", "--repeat", "1", "--async",
                    "--workloads", "heartbeat")
    try:
        importlib.import_module("hubstore.aio")
    except ImportError:
        assert "not importable" in payload["async_note"]
        assert "async" not in payload
    else:
        assert payload["async"]["heartbeat"] > 0


# --- side by side with the reference store (node + a triflux hub/ folder)


@pytest.fixture(scope="session")
def reference_hub() -> Path:
    """A runnable reference hub folder: $HUBSTORE_REFERENCE_HUB, else 7.2.1 made with
    ../shared/reference/setup.sh (cached under ~/.cache/hubstore); skipped without."""
    given = os.environ.get("HUBSTORE_REFERENCE_HUB")
    if given:
        return Path(given)
    return reference_store("7.2.1")


def test_reference_runs_beside_hubstore_on_the_same_rows(empty_url: URL,
                                                        reference_hub: Path) -> None:
    payload = bench(empty_url, "-n", "4", "--repeat", "2", "--preload", "60",
                    "--reference", str(reference_hub))
    assert payload["reference_source"] == "measured"
    assert set(payload["reference"]) == set(payload["results"]) == WORKLOADS
    for name in WORKLOADS:
        assert payload["reference"][name] > 0
        assert payload["ratio"][name] == pytest.approx(
            payload["results"][name] / payload["reference"][name], rel=1e-2)
        spread = payload["reference_spread"][name]
        assert spread["min"] <= spread["median"] <= spread["max"]


def test_reference_template_holds_the_same_background_rows(empty_url: URL,
                                                           reference_hub: Path) -> None:
    copies = _copies(empty_url, 1)
    payload: dict[str, Any] = {}
    try:
        payload = bench(empty_url, "-n", "2", "--repeat", "1", "--preload", "60",
                        "--workloads", "heartbeat", "--reference", str(reference_hub),
                        "--keep-db")
        ref = sqlite3.connect(payload["reference_template"])
        try:
            for table in ("messages", "reflexion_entries", "assign_jobs", "agents"):
                (count,) = ref.execute(f"SELECT count(*) FROM {table}").fetchone()
                assert count == _count(empty_url, table), table
            (version,) = ref.execute(
                "SELECT value FROM _meta WHERE key = 'schema_version'").fetchone()
            assert version == "3"  # made by the reference's own createStore
        finally:
            ref.close()
    finally:
        if empty_url.get_backend_name() == "postgresql":
            _drop_pg(copies)
        if payload:
            shutil.rmtree(Path(payload["reference_template"]).parent, ignore_errors=True)


def test_reference_hub_mix_makes_the_same_calls(empty_url: URL, reference_hub: Path) -> None:
    payload = bench(empty_url, "--hub", "--scales", "60", "--agents", "100", "--seconds", "3",
                    "--budget", "600", "--repeat", "1", "--reference", str(reference_hub))
    entry = payload["results"]["60"]
    (hub_run,), (ref_run,) = entry["hubstore_runs"], entry["reference_runs"]
    assert ref_run["sim_seconds"] == hub_run["sim_seconds"] == 3
    assert ref_run["ops"] == hub_run["ops"] == HUB_CALLS_3S
    assert entry["ratio"] == pytest.approx(
        entry["hubstore"]["median"] / entry["reference"]["median"], rel=1e-2)


def test_a_database_with_rows_is_refused_without_reset(db_url: URL) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", db_url.render_as_string(hide_password=False),
         "-n", "2", "--repeat", "1", "--json-only"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2
    assert "refusing to run" in done.stderr
    assert done.stdout == ""


def _performance_commands() -> list[list[str]]:
    """The ``python benchmarks/...`` command lines docs/performance.md shows (a shell
    block's continued lines joined), each as its words after ``python``."""
    text = PERFORMANCE.read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
             for line in block.replace("\\\n", " ").splitlines()]
    lines += re.findall(r"`(python benchmarks/[^`]+)`", text)
    return [shlex.split(line)[1:] for line in lines if line.startswith("python ")]


def test_every_command_on_the_performance_page_is_the_scripts_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each table on docs/performance.md names the command that reproduces it: the
    script exists and takes those options (argparse exits on an unknown one)."""
    cli = _bench_module("cli", monkeypatch)
    commands = _performance_commands()
    assert len([c for c in commands if c[0] == "benchmarks/bench_store.py"]) >= 5
    for command in commands:
        assert (CHECKOUT / command[0]).is_file(), command
        if command[0] == "benchmarks/bench_store.py":
            cli.build_parser("").parse_args(command[1:])
    named = set(re.findall(r"benchmarks/\w+\.py", PERFORMANCE.read_text(encoding="utf-8")))
    assert named and all((CHECKOUT / name).is_file() for name in named), named


def test_the_instruction_script_runs_every_operation_on_its_own_database(
        db_url: URL) -> None:
    """benchmarks/bench_instructions.py without valgrind: each operation's database is
    filled, then the counted calls all succeed (a call that failed would end the run)."""
    script = importlib.import_module("benchmarks.bench_instructions")
    url = db_url.render_as_string(hide_password=False)
    for operation in script.OPERATIONS:
        if operation != "claim":  # (one database for all: finish's jobs are claimed)
            script.setup(url, operation)
        script.child(url, operation, 3)
    with HubStore.open(db_url) as store:
        assert len(store.list_assigns(status="succeeded", limit=100)) == 3  # finish
        assert len(store.list_reflexion()) == 3  # learn
