"""The real reference store (triflux 10.17.4, or 7.2.1), run on a database file.

Tests that need it skip, saying why, where node, npm or ``../shared/reference`` is
missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED

DRIVER = Path(__file__).resolve().parent / "reference_calls.mjs"
REFERENCE_SETUP = SHARED / "reference" / "setup.sh"
#: Where the runnable copies are kept between runs: CACHE / "reference-VERSION".
CACHE = Path.home() / ".cache" / "hubstore"


@contextmanager
def _cache_lock() -> Iterator[None]:
    """The cache to this process alone: test processes (pytest-xdist's workers, other
    runs) take turns setting copies up, so none reads a copy another is writing."""
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: one process at a time, hopefully
        yield
        return
    with (CACHE / "reference.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _stamp(folder: Path) -> str:
    """What a copy was made from: each file's path, size and time of the reference."""
    return json.dumps(sorted((str(f.relative_to(folder)), f.stat().st_size,
                              f.stat().st_mtime_ns) for f in folder.rglob("*") if f.is_file()))


def reference_store(version: str = "10.17.4") -> Path:
    """The ``hub`` folder of a runnable copy of the reference store ``version``, made by
    ../shared/reference/setup.sh in CACHE once and reused while the reference's files
    are unchanged. better-sqlite3 (compiled by the first set-up, a minute or two) is
    copied from another version's copy when there is one."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run the reference store")
    if not REFERENCE_SETUP.is_file():
        pytest.skip(f"no reference stores at {REFERENCE_SETUP.parent}")
    source = REFERENCE_SETUP.parent / f"triflux-{version}"
    dest = CACHE / f"reference-{version}"
    ready = dest / "hubstore-ready.json"
    with _cache_lock():
        stamp = _stamp(source) if source.is_dir() else ""
        if ready.is_file() and ready.read_text() == stamp:
            return dest / "hub"
        ready.unlink(missing_ok=True)
        modules = dest / "node_modules"
        if not (modules / "better-sqlite3").exists():
            built = "reference-*/node_modules/better-sqlite3/build/Release/*.node"
            for addon in sorted(CACHE.glob(built)):
                other = addon.parents[3]
                if other != modules:
                    shutil.rmtree(modules, ignore_errors=True)
                    shutil.copytree(other, modules, symlinks=True)
                    break
        done = subprocess.run(["bash", str(REFERENCE_SETUP), str(dest), version],
                              capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            pytest.skip(f"setup.sh could not make the reference store {version}: "
                        f"{done.stderr.strip()[-300:]}")
        hub = Path(done.stdout.strip().splitlines()[-1])
        if hub == dest / "hub":
            ready.write_text(stamp)
        return hub


def reference_hub() -> Path:
    """A runnable copy of the 10.17.4 store (see :func:`reference_store`)."""
    return reference_store("10.17.4")


def run_reference(hub: Path, db: Path, calls: list[list[Any]]) -> list[Any]:
    """Each call (``[method, *arguments]``) on the reference store opened on ``db``, in
    one node process; what each returned."""
    done = subprocess.run(["node", str(DRIVER), str(hub), str(db)], input=json.dumps(calls),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    results: list[Any] = json.loads(done.stdout)
    return results
