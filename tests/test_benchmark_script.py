"""The benchmark script runs end to end and reports what it claims to (no timing asserted).

Each run is a tiny one (a few operations) in a database of the test's own, through the
script's command line, as the README runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_store.py"
WORKLOADS = {
    "register_agent", "heartbeat", "audit_log", "poll_for_agent", "assign_lifecycle",
    "reflexion_learn", "reflexion_lookup_ctx", "sweep_and_stats",
}
SCALING_WORKLOADS = {"poll_for_agent", "sweep_and_stats", "reflexion_learn"}


def bench(url: URL, *args: str) -> dict[str, Any]:
    """Run the script with --json-only; its one stdout line, parsed."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", url.render_as_string(hide_password=False),
         "--json-only", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    payload: dict[str, Any] = json.loads(lines[0])
    return payload


def test_standard_run_reports_every_workload_beside_the_reference(empty_url: URL) -> None:
    payload = bench(empty_url, "-n", "4", "--repeat", "1")
    assert set(payload["results"]) == WORKLOADS
    assert all(rate > 0 for rate in payload["results"].values())
    assert payload["reference"]["poll_for_agent"] == 1_180
    assert set(payload["reference"]) == WORKLOADS
    assert payload["yardstick_ops_per_s"] > 0


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
    payload = bench(empty_url, "--claim", "--processes", "2", "--jobs", "40")
    assert payload["ok"] is True, payload["errors"]
    assert payload["checks"] == {
        "claimed_total": 40, "claimed_once": True, "all_claimed": True, "all_succeeded": True,
    }
    assert sum(payload["per_process"]) == 40
    assert payload["statuses"] == {"succeeded": 40}


def test_a_database_with_rows_is_refused_without_reset(db_url: URL) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", db_url.render_as_string(hide_password=False),
         "-n", "2", "--repeat", "1", "--json-only"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2
    assert "refusing to run" in done.stderr
    assert done.stdout == ""
