"""How fast hubstore's PostgreSQL layout can take new jobs, beside pgqueuer's enqueue.

One process enqueues J jobs, one or B per call, each call its own transaction (the
server's durability, as the peers lane), in these lanes:

- ``hubstore``: ``assign_async`` per job, ``assign_many`` per batch;
- ``psycopg alone``: the same rows (a job and its handoff message each) written by the
  statement hubstore runs, rows made by this script, on psycopg with nothing around it:
  no validation, no unit of work, no objects, nothing read back;
- the same on the layout with parts taken away: the triggers (counters, message_log
  stamp, NOTIFY), then also seven of the reference's indexes. These are measurements of
  what the server spends per job, not layouts to run;
- ``pgqueuer``: ``Queries.enqueue`` on asyncpg (when pgqueuer is installed), its own
  schema, one row per job.

Every lane and batch size runs on a freshly emptied database, in turn within each
repeat, and checks that it wrote exactly J jobs (and, for hubstore's layout, J handoff
messages). Output: one JSON line, then (unless ``--json-only``) a table of jobs/s.

Usage::

    python benchmarks/pg_enqueue_costs.py --url postgresql+psycopg://postgres@127.0.0.1/bench

The database is emptied (``DROP SCHEMA public CASCADE``) before every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

# bench: the package beside this script (its folder is first on sys.path)
from bench.common import format_table
from bench.databases import pg_fresh_hub, pg_reset
from sqlalchemy import create_engine, make_url, text

from hubstore import HubStore

#: The statement hubstore's assign_async and assign_many run (jobs and their handoff
#: messages, each table's rows one JSON array), written out here.
_STATEMENT = (
    "WITH handoffs AS (INSERT INTO messages SELECT * FROM "
    "jsonb_populate_recordset(NULL::messages, %s::jsonb)) "
    "INSERT INTO assign_jobs SELECT * FROM "
    "jsonb_populate_recordset(NULL::assign_jobs, %s::jsonb)")
_NO_TRIGGERS = ("DROP TRIGGER trg_hub_message_log ON messages; "
                "DROP TRIGGER trg_hub_messages_insert ON messages; "
                "DROP TRIGGER trg_hub_assign_jobs_insert ON assign_jobs; "
                "DROP TRIGGER trg_hub_assign_queued ON assign_jobs")
_FEWER_INDEXES = ("DROP INDEX idx_messages_correlation, idx_messages_trace, "
                  "idx_messages_status, idx_messages_priority, idx_assign_jobs_status, "
                  "idx_assign_jobs_supervisor, idx_assign_jobs_deadline")
#: (lane, DDL applied after the migrations or None, kind)
LANES: tuple[tuple[str, str | None, str], ...] = (
    ("hubstore", None, "store"),
    ("psycopg alone, hubstore's layout", None, "raw"),
    ("psycopg alone, no triggers", _NO_TRIGGERS, "raw"),
    ("psycopg alone, no triggers, 7 indexes fewer", f"{_NO_TRIGGERS}; {_FEWER_INDEXES}",
     "raw"),
    ("pgqueuer", None, "pgqueuer"),
)


def _rows(first: int, count: int, now: int) -> tuple[str, str]:
    """``count`` jobs and their handoff messages as hubstore writes them, as JSON."""
    jobs, messages = [], []
    for k in range(first, first + count):
        job_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
        trace, correlation = str(uuid.uuid4()), str(uuid.uuid4())
        jobs.append({
            "job_id": job_id, "supervisor_agent": "bench-lead", "worker_agent": "bench-worker",
            "topic": "assign.job", "task": f"job{k}", "payload_json": {}, "status": "queued",
            "attempt": 1, "retry_count": 0, "max_retries": 0, "priority": 5,
            "ttl_ms": 600_000, "timeout_ms": 600_000, "trace_id": trace,
            "correlation_id": correlation, "last_message_id": message_id,
            "created_at_ms": now, "updated_at_ms": now, "retry_backoff_ms": 0,
            "timeout_from": "create"})
        messages.append({
            "id": message_id, "type": "handoff", "from_agent": "bench-lead",
            "to_agent": "bench-worker", "topic": "assign.job", "priority": 5,
            "ttl_ms": 600_000, "created_at_ms": now, "expires_at_ms": now + 600_000,
            "correlation_id": correlation, "trace_id": trace, "status": "queued",
            "payload_json": {
                "kind": "assign.job", "reason": "create", "assign_job_id": job_id,
                "attempt": 1, "retry_count": 0, "max_retries": 0, "timeout_ms": 600_000,
                "supervisor_agent": "bench-lead", "worker_agent": "bench-worker",
                "task": f"job{k}", "payload": {}}})
    return json.dumps(messages), json.dumps(jobs)


def _timed(call: Callable[[int, int], None], jobs: int, batch: int) -> float:
    """jobs/s of ``call(first, count)`` over ``jobs`` jobs, ``batch`` per call."""
    started = time.perf_counter()
    for first in range(0, jobs, batch):
        call(first, min(batch, jobs - first))
    return jobs / (time.perf_counter() - started)


def run_store(url: str, jobs: int, batch: int) -> float:
    with HubStore.open(url) as store:
        store.get_hub_stats()  # connected

        def call(first: int, count: int) -> None:
            if count == 1:
                store.assign_async("bench-lead", "bench-worker", task=f"job{first}")
            else:
                store.assign_many("bench-lead", "bench-worker",
                                  [{"task": f"job{k}"} for k in range(first, first + count)])

        return _timed(call, jobs, batch)


def run_raw(url: str, jobs: int, batch: int) -> float:
    import psycopg

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")

        def call(first: int, count: int) -> None:
            conn.execute(_STATEMENT, _rows(first, count, int(time.time() * 1000)))

        return _timed(call, jobs, batch)


def run_pgqueuer(url: str, jobs: int, batch: int) -> float:
    import asyncpg  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found, unused-ignore]
    from pgqueuer.queries import Queries  # type: ignore[import-not-found, unused-ignore]

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    async def main() -> float:
        conn = await asyncpg.connect(dsn)
        try:
            queries = Queries(AsyncpgDriver(conn))
            await queries.install()
            started = time.perf_counter()
            for first in range(0, jobs, batch):
                count = min(batch, jobs - first)
                if count == 1:
                    await queries.enqueue("noop", None)
                else:
                    await queries.enqueue(["noop"] * count, [None] * count, [0] * count)
            return jobs / (time.perf_counter() - started)
        finally:
            await conn.close()

    return asyncio.run(main())


def _written(url: str, kind: str) -> tuple[int, int]:
    """(jobs, handoff messages) in the database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if kind == "pgqueuer":
                return int(conn.execute(text("SELECT count(*) FROM pgqueuer")).scalar_one()), 0
            made, handoffs = conn.execute(text(
                "SELECT (SELECT count(*) FROM assign_jobs), "
                "(SELECT count(*) FROM messages WHERE type = 'handoff')")).one()
            return int(made), int(handoffs)
    finally:
        engine.dispose()


def pgqueuer_installed() -> bool:
    try:
        import asyncpg  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
        import pgqueuer  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def measure(url: str, jobs: int, batches: Sequence[int], repeat: int
            ) -> dict[str, dict[str, list[float]]]:
    """jobs/s of each lane and batch size, per repeat."""
    runners = {"store": run_store, "raw": run_raw, "pgqueuer": run_pgqueuer}
    lanes = [lane for lane in LANES if lane[2] != "pgqueuer" or pgqueuer_installed()]
    rates: dict[str, dict[str, list[float]]] = {
        name: {str(b): [] for b in batches} for name, _, _ in lanes}
    for _ in range(repeat):
        for batch in batches:
            for name, change, kind in lanes:
                if kind == "pgqueuer":
                    pg_reset(url)  # (its lane installs its schema itself, untimed)
                else:
                    pg_fresh_hub(url, change)
                rate = runners[kind](url, jobs, batch)
                made, handoffs = _written(url, kind)
                if made != jobs or (kind != "pgqueuer" and handoffs != jobs):
                    raise SystemExit(f"{name}, {batch} per call: wrote {made} jobs and "
                                     f"{handoffs} handoffs, not {jobs}")
                rates[name][str(batch)].append(rate)
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL URL (emptied per run)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=10, help="jobs per call of the batches")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args(argv)
    if make_url(args.url).get_backend_name() != "postgresql":
        parser.error("--url must be a PostgreSQL database")
    batches = [1, args.batch]
    rates = measure(args.url, args.jobs, batches, args.repeat)
    medians = {name: {b: statistics.median(v) for b, v in per.items()}
               for name, per in rates.items()}
    payload: dict[str, Any] = {"jobs": args.jobs, "batches": batches, "repeat": args.repeat,
                               "pgqueuer": "pgqueuer" in rates, "runs": rates,
                               "median": medians}
    print(json.dumps(payload))
    if not args.json_only:
        anchor = medians.get("pgqueuer")
        header = ["lane"] + [f"{b}/call jobs/s (median)" for b in batches]
        if anchor:
            header += [f"{b}/call vs pgqueuer" for b in batches]
        rows = []
        for name, per in medians.items():
            row = [name] + [f"{per[str(b)]:,.0f}" for b in batches]
            if anchor:
                row += [f"{per[str(b)] / anchor[str(b)]:.2f}x" for b in batches]
            rows.append(row)
        print(format_table(header, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
