"""The public signatures catch misspelt fields and enum values under a type checker.

One mypy run (its API, strict) over a snippet: each line marked ``# bad`` must be
reported, and no other line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

SNIPPET = '''
from hubstore import HubStore
from hubstore.types import AssignEvent
from hubstore.models import AssignJob

store = HubStore.open("sqlite:///hub.db")
job = store.create_assign("lead", "w", task="t")
store.create_assign("lead", "w", taks="t")  # bad
store.update_assign_status(job.job_id, "running", deadline_ms=5)
store.update_assign_status(job.job_id, "runing")  # bad
store.update_assign_status(job.job_id, "failed", eror="x")  # bad
store.retry_assign(job.job_id, max_retries=2)
store.save_pipeline_state("team", phase="exec", fix_attempt=1)
store.save_pipeline_state("team", phse="exec")  # bad
store.register_agent("a", "codex")
store.register_agent("a", "codx")  # bad
store.audit_log("event", "a", "b", "t")
store.audit_log("evnt", "a", "b", "t")  # bad
store.patch_reflexion("id", solution="s", confidence=0.9)
store.patch_reflexion("id", soluton="s")  # bad
store.patch_reflexion("id", type="adaptive")
store.patch_reflexion("id", type="adaptiv")  # bad
store.update_human_request(request_id="r", state="accepted")
store.update_human_request(request_id="r", state="acepted")  # bad
store.get_human_request(request_id="r")


def listener(event: AssignEvent, job: AssignJob) -> None:
    print(event["job_id"], event["status"], job.attempt)


def wrong(event: AssignEvent, job: AssignJob) -> None:
    print(event["jobid"])  # bad


store.on_assign_status_change(listener)
'''


def test_mypy_reports_the_misspelt_lines_only(tmp_path: Path) -> None:
    source = tmp_path / "snippet.py"
    source.write_text(SNIPPET)
    root = Path(__file__).resolve().parents[2]
    out, err, _ = api.run([
        "--strict", "--no-error-summary", "--hide-error-context", "--show-error-codes",
        "--config-file", str(root / "pyproject.toml"),
        "--cache-dir", str(root / ".mypy_cache"), str(source)])
    assert not err, err
    # By file name: for an unchanged snippet, mypy's cache reports the errors under the
    # path of the run that first checked it (another tmp_path).
    reported = {int(m.group(1)) for m in re.finditer(r"snippet\.py:(\d+): error", out)}
    expected = {n for n, line in enumerate(SNIPPET.splitlines(), 1) if line.endswith("# bad")}
    assert reported == expected, out
