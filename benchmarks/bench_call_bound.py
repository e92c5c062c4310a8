"""What bounding every PostgreSQL call costs the store's hot paths: hubstore of this
checkout beside hubstore of another one (the commit before the bound), side by side.

Each side is a child process (the other checkout first on ``sys.path``) that opens a
store on ``--url`` and runs a mix of one-round-trip calls OPS times each:
``refresh_lease`` (a heartbeat), ``audit_log``, ``get_agent`` (a read), and a unit of
work of two writes and a COMMIT. Repeats alternate the sides (A B A B ...), each on the
same database, so a machine whose load changes moves both alike. Reported per side:
calls/s (wall) and client CPU per call (``time.process_time``), medians, and the
paired ratio this checkout / the other.

With ``--instructions`` each side also runs under ``valgrind --tool=cachegrind`` twice
(OPS/10 and OPS/10 + 1000 rounds of the mix) and the difference is divided by the calls:
instructions per call of the client process, deterministic where this machine's times
are not.

Usage::

    git worktree add /tmp/before HEAD~1    # the checkout to compare with
    python benchmarks/bench_call_bound.py --before /tmp/before \\
        --url postgresql+psycopg://postgres@127.0.0.1:5432/bench --instructions

The database is migrated if it is empty, and its agents and messages emptied before each
child.
Output: one JSON line, then (unless ``--json-only``) a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
#: The calls of one round of the mix.
MIX = ("refresh_lease", "audit_log", "get_agent", "unit_of_work")


def child(url: str, rounds: int) -> dict[str, Any]:
    """Run the mix ``rounds`` times (after a warm-up), in this process."""
    from hubstore import HubStore

    with HubStore.open(url) as store:
        for i in range(20):
            store.register_agent(f"a{i}", "codex")

        def one_round(i: int) -> None:
            agent = f"a{i % 20}"
            store.refresh_lease(agent)
            store.audit_log("event", agent, "lead", "t")
            store.get_agent(agent)
            with store.unit_of_work() as uow:
                uow.refresh_lease(agent)
                uow.audit_log("event", agent, "lead", "t")

        for i in range(50):
            one_round(i)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(rounds):
            one_round(i)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    calls = rounds * len(MIX)
    return {"calls_per_s": calls / wall, "cpu_us_per_call": cpu / calls * 1e6}


def _reset(url: str) -> None:
    from sqlalchemy import text

    from hubstore import HubStore, migrations

    migrations.upgrade(url)
    with HubStore.open(url) as store, store.unit_of_work() as uow:
        uow.connection.execute(text(
            "TRUNCATE message_inbox, message_log, messages, agents, hub_counter_deltas"))


def _side(checkout: Path, url: str, rounds: int, valgrind: Path | None = None) -> Any:
    """Run :func:`child` in a process with ``checkout`` first on sys.path."""
    _reset(url)
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(rounds),
               "--url", url]
    if valgrind is not None:
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
                   f"--cachegrind-out-file={valgrind}", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True,
                          cwd=checkout)
    if valgrind is not None:
        total = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        assert total is not None, done.stderr[-2000:]
        return int(total.group(1).replace(",", ""))
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL database (emptied)")
    parser.add_argument("--before", type=Path, help="the checkout to compare with")
    parser.add_argument("--ops", type=int, default=2000, help="rounds of the mix per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per side")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per call under cachegrind")
    parser.add_argument("--json-only", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.url, args.child)))
        return 0
    if args.before is None:
        parser.error("--before is required")
    sides = {"this": HERE, "before": args.before.resolve()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for _ in range(args.repeat):
        for name, checkout in sides.items():
            runs[name].append(_side(checkout, args.url, args.ops))
    result: dict[str, Any] = {"ops": args.ops, "repeat": args.repeat, "mix": MIX}
    for metric in ("calls_per_s", "cpu_us_per_call"):
        result[metric] = {name: round(statistics.median(r[metric] for r in rs), 1)
                          for name, rs in runs.items()}
        result[f"{metric}_paired_ratio"] = round(statistics.median(
            a[metric] / b[metric] for a, b in zip(runs["this"], runs["before"], strict=True)
        ), 3)
    if args.instructions:
        small, large = max(args.ops // 10, 10), max(args.ops // 10, 10) + 1000
        counts = {}
        with tempfile.TemporaryDirectory() as folder:
            for name, checkout in sides.items():
                out = Path(folder) / f"{name}.out"
                counts[name] = round((_side(checkout, args.url, large, out)
                                      - _side(checkout, args.url, small, out))
                                     / (1000 * len(MIX)))
        result["instructions_per_call"] = counts
        result["instructions_ratio"] = round(counts["this"] / counts["before"], 4)
    print(json.dumps(result))
    if not args.json_only:
        print(f"mix of {', '.join(MIX)}; {args.ops} rounds, {args.repeat} runs per side, "
              "alternating")
        print(f"{'':28}{'this checkout':>15}{'before':>12}{'ratio':>8}")
        for metric, label in (("calls_per_s", "calls/s (median)"),
                              ("cpu_us_per_call", "client CPU us/call (median)")):
            print(f"{label:28}{result[metric]['this']:>15,.1f}"
                  f"{result[metric]['before']:>12,.1f}{result[f'{metric}_paired_ratio']:>8.3f}")
        if args.instructions:
            counts = result["instructions_per_call"]
            print(f"{'instructions per call':28}{counts['this']:>15,}{counts['before']:>12,}"
                  f"{result['instructions_ratio']:>8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
