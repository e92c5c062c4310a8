"""Where the time of one heartbeat and one audit_log goes, layer by layer (SQLite).

Each call is run OPS times on a fresh store (200 registered agents), first without a
profiler (the wall time per call), then under pyinstrument at a 0.1 ms interval. Each
sample is put in the first layer its stack belongs to, looked at from the leaf:

- lock: the flock that orders writers (``WriterQueue``)
- begin, statement, commit: the sqlite3 calls (C) for BEGIN IMMEDIATE, the statement
  itself, and COMMIT (told apart by the hubstore frame that called them)
- sqlalchemy: Python code of SQLAlchemy (its Connection, transaction and events)
- prepared: hubstore's Prepared (bind values and result rows through the column types)
- validation: ``hubstore.validation`` and the strict JSON check and encoding
- unit of work: the rest of entering and leaving the unit of work (connection hand-out,
  flags, after-commit actions)
- other: the method body, ids, clocks and the result object

A layer's microseconds per call are its share of the samples times the unprofiled wall
time per call. The yardstick column times the same layers for Python's own sqlite3 doing
the same statement (an flock, BEGIN IMMEDIATE, the statement, COMMIT), with no hubstore
code at all.

Usage::

    python benchmarks/profile_layers.py            # 20,000 calls each
    python benchmarks/profile_layers.py --ops 5000 --json-only
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyinstrument import Profiler

from hubstore import HubStore

LAYERS = ("lock", "begin", "statement", "commit", "sqlalchemy", "prepared", "validation",
          "unit of work", "other")
AGENTS = 200


def _agent(i: int) -> str:
    return f"agent-{i % AGENTS}"


def heartbeat(store: HubStore, i: int) -> None:
    store.refresh_lease(_agent(i))


def audit_log(store: HubStore, i: int) -> None:
    store.audit_log(type="event", from_agent=_agent(i), to_agent=_agent(i + 1),
                    topic=f"t.{i % 7}", payload={"i": i, "text": "benchmark message"})


CALLS: dict[str, Callable[[HubStore, int], None]] = {
    "heartbeat": heartbeat, "audit_log": audit_log}


def _names(frame: Any) -> tuple[str, str]:
    return str(frame.function or ""), str(frame.file_path or "")


def classify(stack: list[tuple[str, str]]) -> str:
    """The layer of one sample, from its stack (root first)."""
    while stack and stack[-1][0].startswith("["):  # pyinstrument's [self] and the like
        stack = stack[:-1]
    if not stack:
        return "other"
    functions = [f for f, _ in stack]
    leaf, leaf_file = stack[-1]
    if any("flock" in f for f in functions):
        return "lock"
    if leaf_file == "<built-in>" and leaf.rsplit(".", 1)[-1] in (
            "execute", "commit", "rollback", "executemany"):
        if leaf.endswith(".commit"):
            return "commit"
        callers = [(f, p) for f, p in stack if "/hubstore/" in p or p.startswith("hubstore/")]
        caller, where = callers[-1] if callers else ("", "")
        if caller in ("__enter__", "_on_begin", "begin") and where.endswith(
                ("uow.py", "engine.py", "sqlite_setup.py")):
            return "begin"
        if caller in ("_end", "__exit__", "commit"):
            return "commit"
        return "statement"
    path = next((p for _, p in reversed(stack) if p != "<built-in>"), "")
    if "sqlalchemy" in path:
        return "sqlalchemy"
    if path.endswith(("validation.py", "jsontype.py")):
        return "validation"
    if path.endswith(("uow.py", "connections.py", "engine.py", "sqlite_setup.py")):
        return "unit of work"
    if path.endswith("services/base.py"):
        return "prepared"
    return "other"


def profile_shares(store: HubStore, call: Callable[[HubStore, int], None],
                   ops: int) -> dict[str, float]:
    """Each layer's share of the profiled time of `ops` calls."""
    profiler = Profiler(interval=0.0001)
    profiler.start()
    for i in range(ops):
        call(store, i)
    session = profiler.stop()
    root = session.root_frame()
    totals = dict.fromkeys(LAYERS, 0.0)

    def walk(frame: Any, stack: list[tuple[str, str]]) -> None:
        here = [*stack, _names(frame)]
        if not frame.children:
            totals[classify(here)] += frame.time
            return
        child_time = sum(child.time for child in frame.children)
        own = max(0.0, frame.time - child_time)
        if own:
            totals[classify(here)] += own
        for child in frame.children:
            walk(child, here)

    if root is not None:
        walk(root, [])
    whole = sum(totals.values()) or 1.0
    return {layer: value / whole for layer, value in totals.items()}


def wall_us(store: HubStore, call: Callable[[HubStore, int], None], ops: int) -> float:
    started = time.perf_counter()
    for i in range(ops):
        call(store, i)
    return (time.perf_counter() - started) / ops * 1e6


def yardstick(path: Path, ops: int) -> dict[str, dict[str, float]]:
    """Python's sqlite3 alone: µs per layer for the same UPDATE and INSERT."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE agents (agent_id TEXT PRIMARY KEY, last_seen_ms INTEGER, "
               "lease_expires_ms INTEGER, status TEXT)")
    db.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, from_agent TEXT, to_agent TEXT, "
               "topic TEXT, created_at_ms INTEGER, payload_json TEXT)")
    db.executemany("INSERT INTO agents VALUES (?, 0, 0, 'online')",
                   [(_agent(i),) for i in range(AGENTS)])
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    statements: dict[str, Callable[[int], object]] = {
        "heartbeat": lambda i: db.execute(
            "UPDATE agents SET last_seen_ms = ?, lease_expires_ms = ?, status = 'online' "
            "WHERE agent_id = ?", (i, i + 30_000, _agent(i))),
        "audit_log": lambda i: db.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)",
            (f"m{i}", _agent(i), _agent(i + 1), f"t.{i % 7}", i,
             json.dumps({"i": i, "text": "benchmark message"}))),
    }
    out: dict[str, dict[str, float]] = {}
    for name, statement in statements.items():
        spent = dict.fromkeys(("lock", "begin", "statement", "commit"), 0)
        clock = time.perf_counter_ns
        for i in range(ops):
            t0 = clock()
            fcntl.flock(fd, fcntl.LOCK_EX)
            t1 = clock()
            db.execute("BEGIN IMMEDIATE")
            t2 = clock()
            statement(i)
            t3 = clock()
            db.execute("COMMIT")
            t4 = clock()
            fcntl.flock(fd, fcntl.LOCK_UN)
            t5 = clock()
            spent["lock"] += (t1 - t0) + (t5 - t4)
            spent["begin"] += t2 - t1
            spent["statement"] += t3 - t2
            spent["commit"] += t4 - t3
        out[name] = {layer: ns / ops / 1000 for layer, ns in spent.items()}
    os.close(fd)
    db.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=20_000, help="calls per measurement")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hubstore-layers-") as tmp:
        raw = yardstick(Path(tmp) / "yardstick.db", args.ops)
        for name, call in CALLS.items():
            url = f"sqlite:///{Path(tmp) / name}.db"
            with HubStore.open(url, auto_migrate=True) as store:
                for a in range(AGENTS):
                    store.register_agent(_agent(a), "codex", topics=["t.a"])
                call(store, 0)  # statements built, connection made
                per_call = wall_us(store, call, args.ops)
                shares = profile_shares(store, call, args.ops)
            results[name] = {
                "wall_us": round(per_call, 2),
                "layers_us": {k: round(v * per_call, 2) for k, v in shares.items()},
                "yardstick_us": {k: round(v, 2) for k, v in raw[name].items()},
                "yardstick_total_us": round(sum(raw[name].values()), 2),
            }
    print(json.dumps({"ops": args.ops, "results": results}), flush=True)
    if not args.json_only:
        header = f"{'layer':<14}" + "".join(
            f"{name + ' us':>16}{'raw sqlite3':>13}" for name in results)
        print("\n" + header)
        for layer in LAYERS:
            cells = ""
            for entry in results.values():
                raw_us = entry["yardstick_us"].get(layer)
                cells += f"{entry['layers_us'][layer]:>16.1f}" + (
                    f"{raw_us:>13.1f}" if raw_us is not None else f"{'-':>13}")
            print(f"{layer:<14}{cells}")
        total = "".join(f"{e['wall_us']:>16.1f}{e['yardstick_total_us']:>13.1f}"
                        for e in results.values())
        print(f"{'total':<14}{total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
