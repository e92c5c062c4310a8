"""The reference hub store (triflux hub/store.mjs), run under node by reference_driver.mjs,
and its published figures (shown when it is not run side by side).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.databases import copy_sqlite_file

NODE_TIMEOUT_S = 3_600
#: The node script that runs the workloads on the reference store (beside bench_store.py).
DRIVER = Path(__file__).resolve().parents[1] / "reference_driver.mjs"

# Published reference figures (triflux hub/store.mjs, better-sqlite3, on another machine),
# ops/s, median of 3, 1000 ops, with 0 and with 100,000 background rows. Shown only when
# the reference is not run side by side (--reference), and labelled as such.
REFERENCE_PRELOADS = (0, 100_000)
REFERENCE: dict[str, tuple[float, float]] = {
    "register_agent": (7_200, 26_400),
    "heartbeat": (28_200, 32_800),
    "audit_log": (8_900, 10_900),
    "poll_for_agent": (1_180, 54),
    "assign_lifecycle": (2_120, 2_380),
    "reflexion_learn": (5_200, 2_500),
    "reflexion_lookup_ctx": (12_000, 27_600),
    "sweep_and_stats": (3_900, 32),
}


def reference_for(preload_rows: int) -> dict[str, float] | None:
    if preload_rows not in REFERENCE_PRELOADS:
        return None
    column = REFERENCE_PRELOADS.index(preload_rows)
    return {name: figures[column] for name, figures in REFERENCE.items()}


class ReferenceFailed(RuntimeError):
    """The node driver of the reference store failed or could not start."""


@dataclass(frozen=True)
class Reference:
    """A reference hub folder (store.mjs, reflexion.mjs) run by reference_driver.mjs."""

    hub_dir: Path
    node: str = "node"

    @classmethod
    def check(cls, hub_dir: str) -> Reference:
        """The folder, if node and both modules are there; else ReferenceFailed saying why."""
        path = Path(hub_dir).expanduser().resolve()
        missing = [name for name in ("store.mjs", "reflexion.mjs") if not (path / name).is_file()]
        if missing:
            raise ReferenceFailed(f"{path} has no {' or '.join(missing)} (expected a triflux "
                                  "hub/ folder, e.g. from ../shared/reference/setup.sh DIR)")
        node = shutil.which("node")
        if node is None:
            raise ReferenceFailed("node is not on PATH (the reference store runs under node)")
        return cls(path, node)

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run(
            [self.node, str(DRIVER)], input=json.dumps({**spec, "hub_dir": str(self.hub_dir)}),
            capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False,
        )
        if done.returncode != 0:
            raise ReferenceFailed(f"reference driver failed ({done.returncode}): {done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    def init(self, path: Path) -> None:
        """Create an empty reference database at `path`, the reference's own way."""
        self.run({"mode": "init", "db": str(path)})


def reference_copy(template: Path, k: int) -> Path:
    dest = template.with_name(f"{template.name}.r{k}")
    copy_sqlite_file(template, dest)
    return dest
