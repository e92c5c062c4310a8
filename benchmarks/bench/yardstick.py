"""The machine yardstick: Python's sqlite3 alone, so a figure says how fast this machine is."""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench.workloads import AGENT_COUNT, agent_name

# The reference's issue: "Python's own sqlite3 does an UPDATE in one transaction at over
# 40,000/s here". Measured again on every run, it shows how fast this machine is.
YARDSTICK_REFERENCE = 40_000


def machine_yardstick(ops: int = 5_000, repeats: int = 3) -> float:
    """Python's sqlite3 alone: one-row UPDATEs, each in its own transaction; median ops/s.

    WAL and synchronous NORMAL, as hubstore sets them. No hubstore code runs, so the
    figure measures the machine (CPU, file system) and nothing else.
    """
    rates = []
    with tempfile.TemporaryDirectory(prefix="hubstore-yardstick-") as tmp:
        db = sqlite3.connect(Path(tmp) / "yardstick.db", isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("CREATE TABLE agents (agent_id TEXT PRIMARY KEY, last_seen_ms INTEGER)")
            agents = [(agent_name(i),) for i in range(AGENT_COUNT)]
            db.executemany("INSERT INTO agents VALUES (?, 0)", agents)
            for _ in range(repeats):
                started = time.perf_counter()
                for i in range(ops):
                    db.execute("BEGIN IMMEDIATE")
                    db.execute(
                        "UPDATE agents SET last_seen_ms = ? WHERE agent_id = ?", (i, agent_name(i))
                    )
                    db.execute("COMMIT")
                rates.append(ops / (time.perf_counter() - started))
        finally:
            db.close()
    return round(statistics.median(rates), 1)


def yardstick_line(rate: float) -> str:
    ratio = rate / YARDSTICK_REFERENCE
    return (
        f"machine yardstick: Python sqlite3, one-row UPDATE per transaction: {rate:,.0f}/s "
        f"({ratio:.2f}x the reference machine's 'over {YARDSTICK_REFERENCE:,}')"
    )
