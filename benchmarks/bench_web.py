"""Every console page's server time on a big hub (issue 31, point 6; issue 38): goal
under 20 ms.

A fresh database (SQLite file, or a new PostgreSQL database with ``--pg-admin``) gets
``--jobs`` assign jobs (spread over statuses, workers and supervisors) and
``--messages`` messages (one trace per job for the first ones, one dead letter per
1,000), inserted in batches with Core ``executemany`` (the counter triggers see them),
plus one job whose trace holds ``--trace-messages`` more (the job page shows a page of
it), agents, pending and answered human requests and reflexion entries. Then each page is fetched
``--repeat`` times in process through Starlette's TestClient (routing, the store's
reads on its lanes, rendering; no network), and the median and worst times are reported
beside the anchor measured in the same run: ``store.get_hub_stats()`` called directly
(the cheapest read every page builds on).

Usage::

    python benchmarks/bench_web.py                       # SQLite, 100,000 jobs, 1,000,000 messages
    python benchmarks/bench_web.py --pg-admin postgresql+psycopg://postgres@127.0.0.1/postgres
    python benchmarks/bench_web.py --jobs 20000 --messages 100000

Output: one JSON line on stdout; progress notes on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import URL, make_url
from starlette.testclient import TestClient

from hubstore import HubStore, migrations
from hubstore.models import ASSIGN_STATUSES, AssignJob, DeadLetter, Message, table_of
from hubstore.web import create_app

BATCH = 5_000
WORKERS = 200
SUPERVISORS = 20


def note(text_: str) -> None:
    print(text_, file=sys.stderr, flush=True)


def _batches(total: int, make: Callable[[int], dict[str, Any]]) -> Any:
    for start in range(0, total, BATCH):
        yield [make(i) for i in range(start, min(total, start + BATCH))]


def fill(store: HubStore, jobs: int, messages: int, trace_messages: int) -> dict[str, str]:
    """Bulk rows; returns ids the pages are fetched with."""
    now = int(time.time() * 1000)
    trace_of = [str(uuid.UUID(int=i + 1)) for i in range(min(jobs, messages))]

    def job(i: int) -> dict[str, Any]:
        status = ASSIGN_STATUSES[i % len(ASSIGN_STATUSES)]
        return {"job_id": f"job-{i:07d}", "supervisor_agent": f"lead-{i % SUPERVISORS}",
                "worker_agent": f"w{i % WORKERS}", "topic": "assign.job", "task": f"task {i}",
                "payload_json": "{}", "status": status, "attempt": 1, "retry_count": 0,
                "max_retries": 1, "priority": 5, "ttl_ms": 600_000, "timeout_ms": 600_000,
                "trace_id": trace_of[i] if i < len(trace_of) else f"t-{i}",
                "correlation_id": f"c-{i}", "created_at_ms": now - (jobs - i) * 10,
                "updated_at_ms": now - (jobs - i) * 10, "retry_backoff_ms": 0,
                "timeout_from": "create"}

    def message(i: int) -> dict[str, Any]:
        return {"id": f"m-{i:08d}", "type": "event", "from_agent": "lead",
                "to_agent": f"w{i % WORKERS}", "topic": "work", "priority": 5,
                "ttl_ms": 300_000, "created_at_ms": now - (messages - i),
                "expires_at_ms": now + 300_000, "correlation_id": f"c-{i}",
                "trace_id": trace_of[i % len(trace_of)], "payload_json": f'{{"n": {i}}}',
                "status": "acked" if i % 1000 else "dead_letter"}

    with store.engine.begin() as conn:
        for rows in _batches(jobs, job):
            conn.execute(insert(table_of(AssignJob)), rows)
    note(f"{jobs:,} jobs in")
    started = time.perf_counter()
    for n, rows in enumerate(_batches(messages, message)):
        with store.engine.begin() as conn:
            conn.execute(insert(table_of(Message)), rows)
            conn.execute(insert(table_of(DeadLetter)), [
                {"message_id": r["id"], "reason": "bench", "failed_at_ms": now,
                 "last_error": None} for r in rows if r["status"] == "dead_letter"])
        if n % 40 == 39:
            note(f"{(n + 1) * BATCH:,} messages in ({time.perf_counter() - started:.0f} s)")
    long_trace = "trace-of-the-long-job"
    long_job = store.create_assign("lead-0", "w1", task="a long conversation",
                                   trace_id=long_trace, status="running")

    def traced(i: int) -> dict[str, Any]:
        return {**message(i), "id": f"lt-{i:08d}", "trace_id": long_trace, "status": "acked",
                "created_at_ms": now - (trace_messages - i)}

    for rows in _batches(trace_messages, traced):
        with store.engine.begin() as conn:
            conn.execute(insert(table_of(Message)), rows)
    note(f"{trace_messages:,} messages on one trace in")
    for i in range(50):
        store.register_agent(f"w{i}", "codex", topics=["work"])
        store.insert_human_request(f"w{i}", "text", f"question {i}?")
        answered = store.insert_human_request(f"w{i}", "approval", f"approve {i}?")
        store.answer_human_request(answered.request_id, "accepted", {"approved": True})
        store.add_reflexion(f"error pattern {i}", f"Error {i}", f"fix {i}")
    if store.dialect == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql("VACUUM ANALYZE")
    else:
        with store.engine.begin() as c:
            c.exec_driver_sql("ANALYZE")
    return {"job": "job-0000001", "trace": trace_of[1], "worker": "w7",
            "long_job": long_job.job_id, "long_trace": long_trace}


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    fn()  # warm
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}


def measure(url: URL, jobs: int, messages: int, trace_messages: int, repeat: int
            ) -> dict[str, Any]:
    migrations.upgrade(url)
    with HubStore.open(url) as store:
        ids = fill(store, jobs, messages, trace_messages)
        anchor = timed(store.get_hub_stats, repeat)
        with TestClient(create_app(store)) as client:
            cursor = client.get("/jobs").text.split("after=", 1)[1].split('"')[0]
            pages = {
                "overview": "/", "jobs": "/jobs", "jobs page 2": f"/jobs?after={cursor}",
                "jobs by status": "/jobs?status=failed",
                "jobs by worker": f"/jobs?worker_agent={ids['worker']}",
                "job": f"/job?id={ids['job']}",
                "job with a long trace": f"/job?id={ids['long_job']}",
                "job's live part, long trace": f"/live/job?id={ids['long_job']}",
                "dead letters": "/dead-letters",
                "human requests": "/human-requests", "reflexion": "/reflexion",
                "reflexion search": "/reflexion?q=Error+7",
                "messages by trace": f"/messages?trace_id={ids['trace']}",
                "messages of the long trace": f"/messages?trace_id={ids['long_trace']}",
                "metrics": "/metrics",
            }
            results = {}
            for name, path in pages.items():
                assert client.get(path).status_code == 200, path
                results[name] = timed(lambda p=path: client.get(p), repeat)  # type: ignore[misc]
                results[name]["x_anchor"] = round(
                    results[name]["median_ms"] / max(anchor["median_ms"], 1e-6), 1)
                note(f"{name}: {results[name]}")
    return {"dialect": url.get_backend_name(), "jobs": jobs, "messages": messages,
            "trace_messages": trace_messages,
            "anchor_get_hub_stats": anchor, "pages": results,
            "slowest_median_ms": max(r["median_ms"] for r in results.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--trace-messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--pg-admin", default=None,
                        help="a PostgreSQL URL whose server gets a scratch database")
    args = parser.parse_args()
    if args.pg_admin:
        admin = make_url(args.pg_admin)
        name = f"hubstore_bench_web_{uuid.uuid4().hex[:8]}"
        engine = create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            result = measure(admin.set(database=name), args.jobs, args.messages,
                             args.trace_messages, args.repeat)
        finally:
            with engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            engine.dispose()
    else:
        with tempfile.TemporaryDirectory() as folder:
            url = make_url(f"sqlite:///{Path(folder) / 'hub.db'}")
            result = measure(url, args.jobs, args.messages, args.trace_messages, args.repeat)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
