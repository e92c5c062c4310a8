"""How long ``import hubstore`` takes, beside ``import sqlalchemy`` in the same run.

Each measurement is a fresh interpreter (``python -c``) that times one import statement
with ``time.perf_counter`` (interpreter start-up excluded); the statements take turns,
round after round, so that a slow moment of the machine touches them all alike. One
round is run first and discarded (it writes the .pyc files a first import compiles).
The table gives min, median and max in milliseconds, and each median as a multiple of
the anchor's (``import sqlalchemy``, which every hubstore import includes one way or
another).

Usage::

    python benchmarks/bench_import.py                  # 15 rounds
    python benchmarks/bench_import.py --repeat 31 --why  # and the heaviest modules
    python benchmarks/bench_import.py --quick --json-only  # a smoke test (3 rounds)

A fresh interpreter puts the current directory first on ``sys.path``: run from a
checkout, it imports that checkout's ``hubstore``. To measure another tree, run from
elsewhere: ``cd /tmp && PYTHONPATH=/path/to/tree python .../bench_import.py``.

Output: one JSON line on stdout, then (unless ``--json-only``) a readable table and,
with ``--why``, the modules that cost ``import hubstore`` and ``from hubstore import
HubStore`` the most (``python -X importtime``, cumulative microseconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

ANCHOR = "sqlalchemy"
#: name -> the statement timed.
STATEMENTS = {
    ANCHOR: "import sqlalchemy",
    "hubstore": "import hubstore",
    "HubStore": "from hubstore import HubStore",
    "hubstore.aio": "import hubstore.aio",
}
_TIMER = ("import time\n_t0 = time.perf_counter()\n{statement}\n"
          "print(time.perf_counter() - _t0)\n")


def time_once(statement: str) -> float:
    """Seconds one fresh interpreter takes to run ``statement``."""
    done = subprocess.run([sys.executable, "-c", _TIMER.format(statement=statement)],
                          capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{statement!r} failed:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def measure(repeat: int) -> dict[str, list[float]]:
    """Each statement's times in milliseconds, ``repeat`` rounds (after a warm-up)."""
    for statement in STATEMENTS.values():
        time_once(statement)
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(repeat):
        for name, statement in STATEMENTS.items():
            times[name].append(time_once(statement) * 1000)
    return times


def heaviest(statement: str, top: int) -> list[tuple[str, int]]:
    """The ``top`` modules with the largest cumulative import time (µs), from
    ``python -X importtime`` (the ``hubstore`` package itself, the whole, left out)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", statement],
                          capture_output=True, text=True, check=False, timeout=120)
    found: list[tuple[str, int]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split("|"))
        if cumulative.isdigit() and name != "hubstore":
            found.append((name, int(cumulative)))
    found.sort(key=lambda item: -item[1])
    return found[:top]


def summary(times: dict[str, list[float]]) -> dict[str, Any]:
    anchor = statistics.median(times[ANCHOR])
    return {
        "python": sys.version.split()[0],
        "rounds": len(times[ANCHOR]),
        "anchor": ANCHOR,
        "median_ms": {name: round(statistics.median(t), 2) for name, t in times.items()},
        "spread_ms": {name: {"min": round(min(t), 2), "max": round(max(t), 2)}
                      for name, t in times.items()},
        "vs_anchor": {name: round(statistics.median(t) / anchor, 2)
                      for name, t in times.items()},
        "statements": STATEMENTS,
    }


def table(result: dict[str, Any]) -> str:
    lines = [f"{'statement':<32} {'min':>8} {'median':>8} {'max':>8}  x {ANCHOR}",
             "-" * 70]
    for name, statement in STATEMENTS.items():
        spread = result["spread_ms"][name]
        lines.append(f"{statement:<32} {spread['min']:>8.1f} {result['median_ms'][name]:>8.1f} "
                     f"{spread['max']:>8.1f}  {result['vs_anchor'][name]:.2f}")
    lines.append(f"(ms, {result['rounds']} rounds, a fresh Python {result['python']} each)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="3 rounds: a smoke test")
    parser.add_argument("--json-only", action="store_true", help="only the JSON line")
    parser.add_argument("--why", action="store_true",
                        help="also the heaviest modules of the hubstore imports")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    result = summary(measure(3 if args.quick else args.repeat))
    if args.why:
        result["heaviest_us"] = {name: heaviest(STATEMENTS[name], 12)
                                 for name in ("hubstore", "HubStore")}
    print(json.dumps(result))
    if not args.json_only:
        print(table(result))
        for name, modules in result.get("heaviest_us", {}).items():
            print(f"\nheaviest modules of {STATEMENTS[name]!r} (cumulative ms):")
            for module, micros in modules:
                print(f"  {micros / 1000:8.1f}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
