"""The real reference store (triflux 10.17.4, under node), run on a database file.

Tests that need it skip, saying why, where node, npm or ``../shared/reference`` is
missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED

DRIVER = Path(__file__).resolve().parent / "reference_calls.mjs"
REFERENCE_SETUP = SHARED / "reference" / "setup.sh"


def reference_hub() -> Path:
    """A runnable copy of the 10.17.4 store, cached in the temp folder between runs."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run the reference store")
    if not REFERENCE_SETUP.is_file():
        pytest.skip(f"no reference stores at {REFERENCE_SETUP.parent}")
    dest = Path(tempfile.gettempdir()) / f"hubstore-reference-10.17.4-{os.getuid()}"
    done = subprocess.run(["bash", str(REFERENCE_SETUP), str(dest), "10.17.4"],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        pytest.skip(f"setup.sh could not make the reference store: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def run_reference(hub: Path, db: Path, calls: list[list[Any]]) -> list[Any]:
    """Each call (``[method, *arguments]``) on the reference store opened on ``db``, in
    one node process; what each returned."""
    done = subprocess.run(["node", str(DRIVER), str(hub), str(db)], input=json.dumps(calls),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    results: list[Any] = json.loads(done.stdout)
    return results
