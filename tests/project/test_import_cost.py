"""``import hubstore`` stays cheap (issue 26): what it loads, and the benchmark script.

No timing is asserted here: benchmarks/bench_import.py measures it (the figures are in
docs/performance.md); these tests check what the import loads and that the script runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import hubstore

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_import.py"


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_hubstore_loads_neither_sqlalchemy_nor_the_tools() -> None:
    loaded = json.loads(run_python(
        "import json, sys\n"
        "import hubstore\n"
        "print(json.dumps(sorted(sys.modules)))\n"))
    heavy = {"sqlalchemy", "alembic", "click", "rich", "psycopg", "platformdirs",
             "importlib.metadata", "hubstore.store", "hubstore.models"}
    assert not heavy & set(loaded)


def test_the_public_names_are_imported_on_first_use() -> None:
    for name in hubstore.__all__:
        assert getattr(hubstore, name) is not None, name
    assert set(hubstore.__all__) <= set(dir(hubstore))
    assert hubstore.HubStore.__module__ == "hubstore.store"
    assert isinstance(hubstore.__version__, str) and hubstore.__version__
    try:
        hubstore.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
    # a submodule is still found by `from hubstore import <module>`
    assert run_python("from hubstore import migrations, HubStore, uuidv7\n"
                      "print(migrations.__name__, HubStore.__name__, len(uuidv7()))\n"
                      ).split() == ["hubstore.migrations", "HubStore", "36"]


def test_bench_import_runs_in_quick_mode() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json-only"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    result = json.loads(lines[0])
    assert result["rounds"] == 3 and result["anchor"] == "sqlalchemy"
    assert set(result["median_ms"]) == {"sqlalchemy", "hubstore", "HubStore", "hubstore.aio"}
    assert all(ms > 0 for ms in result["median_ms"].values())
    assert result["vs_anchor"]["sqlalchemy"] == 1.0
