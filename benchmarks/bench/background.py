"""The background rows (``--preload``) and the preloaded templates they go into.

Written straight into the tables, in the shapes the stores' own calls write (the
reference's createStore/auditLog/addReflexion/createAssign, hubstore's audit_log,
add_reflexion, create_assign): hubstore's side through SQLAlchemy Core executemany (its
triggers and indexes keep every derived structure, as for any writer), the reference's
side through sqlite3 executemany. Both get the same rows, chunk by chunk, once, before
any timing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from bench.common import Log
from bench.databases import Target, display_url
from bench.reference import Reference
from hubstore import HubStore
from hubstore.ids import now_ms, uuidv7
from hubstore.models import Agent, AssignJob, Message, ReflexionEntry, table_of

OLD_AGENT_COUNT = 500
PRELOAD_UNIT_ROWS = 5_000
# Per 10 background messages there are 2 more rows (a reflexion entry and an assign job).
PRELOAD_UNIT_MESSAGES = PRELOAD_UNIT_ROWS * 10 // 12

Row = dict[str, Any]
BACKGROUND_TABLES = {
    "agents": table_of(Agent),
    "messages": table_of(Message),
    "reflexion_entries": table_of(ReflexionEntry),
    "assign_jobs": table_of(AssignJob),
}
JSON_COLUMNS = {
    "agents": ("capabilities_json", "topics_json", "metadata_json"),
    "messages": ("payload_json",),
    "reflexion_entries": ("context_json",),
    "assign_jobs": ("payload_json", "result_json", "error_json"),
}


def _old_agent_rows(now: int) -> list[Row]:
    return [
        {"agent_id": f"old-{k}", "cli": "gemini", "pid": None, "capabilities_json": [],
         "topics_json": ["t.old"], "last_seen_ms": now, "lease_expires_ms": now + 30_000,
         "status": "offline", "metadata_json": {}}
        for k in range(OLD_AGENT_COUNT)
    ]


def _background_message(j: int, now: int) -> Row:
    to_agent = "topic:t.old" if j % 3 == 0 else f"old-{(j + 1) % OLD_AGENT_COUNT}"
    return {
        "id": uuidv7(), "type": "event", "from_agent": f"old-{j % OLD_AGENT_COUNT}",
        "to_agent": to_agent, "topic": "t.old", "priority": 5, "ttl_ms": 300_000,
        "created_at_ms": now, "expires_at_ms": now + 300_000, "correlation_id": uuidv7(),
        "trace_id": uuidv7(), "payload_json": {"j": j, "text": "background message"},
        "status": "queued",
    }


def _background_reflexion(j: int, now: int) -> Row:
    line = j % 900 + 1
    return {
        "id": uuidv7(), "error_pattern": f"referenceerror: y{j} is not defined at <file>:<line>",
        "error_message": f"ReferenceError: y{j} is not defined at /srv/app/m{j % 50}.js:{line}:5",
        "context_json": {"cli": "gemini"}, "solution": "declare it", "solution_code": None,
        "confidence": 0.5, "hit_count": 1, "success_count": 0, "last_hit_ms": now,
        "created_at_ms": now, "updated_at_ms": now,
    }


def _background_assign(j: int, now: int) -> Row:
    return {
        "job_id": uuidv7(), "supervisor_agent": "old-lead",
        "worker_agent": f"old-{j % OLD_AGENT_COUNT}", "topic": "assign.job", "task": f"old{j}",
        "payload_json": {}, "status": "succeeded", "attempt": 1, "retry_count": 0,
        "max_retries": 0, "priority": 5, "ttl_ms": 600_000, "timeout_ms": 600_000,
        "deadline_ms": now + 600_000, "trace_id": uuidv7(), "correlation_id": uuidv7(),
        "last_message_id": None, "result_json": {"ok": True}, "error_json": None,
        "created_at_ms": now, "updated_at_ms": now, "started_at_ms": None,
        "completed_at_ms": now, "last_retry_at_ms": None,
    }


def background_chunks(count: int) -> Iterator[list[tuple[str, list[Row]]]]:
    """The background rows, a unit of about PRELOAD_UNIT_ROWS rows at a time."""
    if count <= 0:
        return
    yield [("agents", _old_agent_rows(now_ms()))]
    for first in range(0, count, PRELOAD_UNIT_MESSAGES):
        now = now_ms()
        messages, entries, jobs = [], [], []
        for j in range(first, min(count, first + PRELOAD_UNIT_MESSAGES)):
            messages.append(_background_message(j, now))
            if j % 10 == 0:
                entries.append(_background_reflexion(j, now))
                jobs.append(_background_assign(j, now))
        yield [("messages", messages), ("reflexion_entries", entries), ("assign_jobs", jobs)]


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


class ReferenceWriter:
    """Writes background rows into a reference database file with sqlite3."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)

    def write(self, table: str, rows: list[Row]) -> None:
        if not rows:
            return
        names = list(rows[0])
        sql = (f"INSERT INTO {table} ({', '.join(names)}) "  # names are ours, not input
               f"VALUES ({', '.join('?' for _ in names)})")
        encoded = JSON_COLUMNS[table]
        self.db.executemany(sql, [
            tuple(_json_text(row[n]) if n in encoded else row[n] for n in names) for row in rows
        ])

    def close(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()


def preload(store: HubStore, count: int, log: Log, reference: Path | None = None) -> float:
    """Write `count` background messages (and their companions) into the store, and the
    same rows into the reference file when one is given; return the seconds taken."""
    if count <= 0:
        return 0.0
    started = time.perf_counter()
    writer = ReferenceWriter(reference) if reference is not None else None
    done = 0
    try:
        for chunk in background_chunks(count):
            with store.unit_of_work() as uow:
                for table, rows in chunk:
                    if rows:
                        uow.connection.execute(insert(BACKGROUND_TABLES[table]), rows)
            if writer is not None:
                writer.db.execute("BEGIN IMMEDIATE")
                for table, rows in chunk:
                    writer.write(table, rows)
                writer.db.execute("COMMIT")
            done += sum(len(rows) for table, rows in chunk if table == "messages")
            if done and done % (PRELOAD_UNIT_MESSAGES * 24) < PRELOAD_UNIT_MESSAGES:
                elapsed = time.perf_counter() - started
                log(f"  preload {done:,}/{count:,} messages ({elapsed:.1f} s)")
    finally:
        if writer is not None:
            writer.close()
    _settle(store)
    return time.perf_counter() - started


def _settle(store: HubStore) -> None:
    """End the load phase before timing, so the timed runs do not pay for the load:
    SQLite folds its WAL into the database file; both refresh planner statistics."""
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None  # a live connection
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # outside any transaction
            raw.execute("PRAGMA optimize")
        return
    # PostgreSQL: a figures call folds the load's counter deltas into hub_counters (and
    # vacuums them); VACUUM ANALYZE then gives the planner the loaded tables' statistics,
    # as autovacuum would within a minute or so. (In a writing unit of work: the fold
    # writes.)
    with store.unit_of_work() as uow:
        uow.get_hub_stats()
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


def prepare(target: Target, rows: int, reference: Reference | None,
            log: Log) -> tuple[str, Path | None, float]:
    """A hubstore template (migrated, preloaded) and, with a reference, its template with
    the same rows: (hubstore URL, reference file, preload seconds)."""
    url = target.fresh()
    ref_path = None
    if reference is not None:
        ref_path = target.scratch(f"reference-{rows}.db")
        reference.init(ref_path)
    log(f"database: {display_url(url)}" + (f"; reference: {ref_path}" if ref_path else ""))
    with HubStore.open(url, auto_migrate=True) as store:
        preload_s = preload(store, rows, log, ref_path)
    return url, ref_path, preload_s
