"""How long other writers wait while ``prune_messages`` deletes a large backlog (SQLite).

A fresh SQLite file gets ``--rows`` old messages (one inbox row per 10, one dead letter
per 20), loaded with plain sqlite3 (the counter triggers see them). Then, while writer
processes keep writing, the store prunes them all; each writer records how long every
one of its writes took. Two kinds of writer: ``hubstore`` (``store.audit_log``, which
queues on hubstore's writer lock) and ``sqlite3`` (a plain sqlite3 INSERT with
BEGIN IMMEDIATE and a 5 s busy timeout, as a program that does not use hubstore).
API.md: another writer never waits more than about half a second.

Usage::

    python benchmarks/bench_prune.py                 # 1,000,000 rows
    python benchmarks/bench_prune.py --rows 20000 --batch-size 500

Output: one JSON line on stdout; progress notes on stderr.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hubstore import HubStore, migrations, uuidv7
from hubstore.ids import now_ms

DAY_MS = 86_400_000
LOAD_CHUNK = 50_000
WRITE_EVERY_S = 0.005


def load(path: Path, rows: int) -> None:
    """``rows`` messages created 60 days ago, with some inbox rows and dead letters."""
    old = now_ms() - 60 * DAY_MS
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for start in range(0, rows, LOAD_CHUNK):
        ids = [uuidv7() for _ in range(min(LOAD_CHUNK, rows - start))]
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO messages (id, type, from_agent, to_agent, topic, priority, ttl_ms, "
            "created_at_ms, expires_at_ms, correlation_id, trace_id, payload_json, status) "
            "VALUES (?, 'event', 'a', ?, 't', ?, 1000, ?, ?, 'c', 't', '{}', 'acked')",
            [(mid, f"agent-{(start + i) % 50}", 1 + (start + i) % 9, old + start + i,
              old + start + i + 1000) for i, mid in enumerate(ids)])
        conn.executemany(
            "INSERT INTO message_inbox (message_id, agent_id, delivered_at_ms, attempts) "
            "VALUES (?, 'b', 1, 0)", [(mid,) for mid in ids[::10]])
        conn.executemany(
            "INSERT INTO dead_letters (message_id, reason, failed_at_ms) VALUES (?, 'r', 1)",
            [(mid,) for mid in ids[::20]])
        conn.execute("COMMIT")
        print(f"loaded {start + len(ids):,} messages", file=sys.stderr)
    conn.close()


def writer(url: str, path: str, kind: str, stop: Any, results: Any) -> None:
    """Write every WRITE_EVERY_S until ``stop`` is set; report each write's duration."""
    latencies: list[float] = []
    if kind == "hubstore":
        store = HubStore.open(url)

        def write() -> None:
            store.audit_log("event", "bench-writer", "lead", "t")
    else:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)

        def write() -> None:
            at = now_ms()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO messages (id, type, from_agent, to_agent, topic, priority, "
                "ttl_ms, created_at_ms, expires_at_ms, correlation_id, trace_id, "
                "payload_json, status) VALUES (?, 'event', 'raw', 'lead', 't', 5, 1000, ?, "
                "?, 'c', 't', '{}', 'queued')", (uuidv7(), at, at + 1000))
            conn.execute("COMMIT")
    while not stop.is_set():
        began = time.perf_counter()
        write()
        latencies.append(time.perf_counter() - began)
        time.sleep(WRITE_EVERY_S)
    results.put((kind, latencies))


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"writes": len(ordered), "max_ms": round(ordered[-1] * 1000, 1),
            "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 1),
            "median_ms": round(statistics.median(ordered) * 1000, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None, help="where the file goes")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "hub.db"
        url = f"sqlite:///{path}"
        migrations.upgrade(url)
        load(path, args.rows)
        ctx = mp.get_context("spawn")
        stop, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=writer, args=(url, str(path), kind, stop, results))
                 for kind in ("hubstore", "sqlite3")]
        for proc in procs:
            proc.start()
        time.sleep(2.0)  # the writers are up and writing
        with HubStore.open(url) as store:
            began = time.perf_counter()
            deleted = store.prune_messages(30 * DAY_MS, batch_size=args.batch_size)
            elapsed = time.perf_counter() - began
            figures = store.get_hub_stats()
        stop.set()
        found = dict(results.get(timeout=60) for _ in procs)
        for proc in procs:
            proc.join(timeout=30)
        report = {
            "rows": args.rows, "batch_size": args.batch_size, "deleted": deleted,
            "prune_s": round(elapsed, 1), "deleted_per_s": round(deleted / elapsed),
            "total_messages_after": figures["total_messages"],
            "writers": {kind: summary(lat) for kind, lat in found.items()},
        }
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
