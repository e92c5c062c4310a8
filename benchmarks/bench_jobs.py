"""Latencies of the job system, across processes: how soon a crashed worker's job is
taken back after its deadline, and how soon ``wait_for_result`` returns after the report.

    python benchmarks/bench_jobs.py                      # SQLite, in a temporary folder
    python benchmarks/bench_jobs.py --url postgresql+psycopg://postgres@127.0.0.1/bench

- rescue: JOBS jobs with a 1 s timeout, one every --gap seconds, each claimed by a
  worker that then does nothing more (as if killed); another process waits for the same
  worker's jobs (``wait_for_assign``, no sweep anywhere) and takes each back as its
  next attempt. Latency: the time it got the job minus the job's first deadline (the
  store's own times: created_at_ms + timeout_ms).
- result: JOBS jobs, one at a time; a worker process claims each and finishes it after
  a short random pause, while this process waits for it with ``wait_for_result``.
  Latency: the time the wait returned minus the job's completed_at_ms.

Both are reported as p50, p99 and max in milliseconds, and checked: every job taken
back exactly once as attempt 2, every result the succeeded job. The database must be
empty (SQLite: a new file is made; PostgreSQL: --reset wipes schema public).

Output: one JSON line on stdout, then a readable summary (not with --json-only).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from hubstore import HubStore
from hubstore.ids import now_ms

TIMEOUT_MS = 1_000
CHILD_TIMEOUT_S = 300


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 1)

    return {"p50": at(50), "p99": at(99), "max": round(ordered[-1], 1),
            "samples": len(ordered)}


def _rescuer(url: str, jobs: int, ready: Any, results: Any) -> None:
    """Child: take back the crashed worker's jobs as they come due."""
    latencies: list[float] = []
    attempts: list[int] = []
    with HubStore.open(url) as store:
        store.get_hub_stats()
        ready.set()
        while len(latencies) < jobs:
            job = store.wait_for_assign("w", timeout_s=30)
            if job is None:
                break
            latencies.append(float(now_ms() - (job.created_at_ms + TIMEOUT_MS)))
            attempts.append(job.attempt)
            store.finish_assign(job, "succeeded")
    results.put({"latencies": latencies, "attempts": attempts})


def rescue(url: str, jobs: int, gap_s: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    with HubStore.open(url) as store:
        proc = ctx.Process(target=_rescuer, args=(url, jobs, ready, results))
        made = []
        try:
            for _ in range(jobs):  # each running, as claimed by a worker that then "dies"
                claimed = store.create_assign("lead", "w", status="running",
                                              timeout_ms=TIMEOUT_MS, max_retries=1)
                made.append(claimed.job_id)
                if len(made) == 1:
                    proc.start()
                    ready.wait(CHILD_TIMEOUT_S)
                time.sleep(gap_s)
            got = results.get(timeout=CHILD_TIMEOUT_S)
        finally:
            proc.join(CHILD_TIMEOUT_S)
        finished = [store.get_assign(job_id) for job_id in made]
    return {**percentiles(got["latencies"]),
            "each_taken_back_once_as_attempt_2": got["attempts"] == [2] * jobs,
            "all_succeeded": all(j is not None and j.status == "succeeded" and j.attempt == 2
                                 for j in finished)}


def _worker(url: str, jobs: int, ready: Any, seed: int) -> None:
    """Child: claim and finish each job after a short pause."""
    rng = random.Random(seed)
    with HubStore.open(url) as store:
        store.get_hub_stats()
        ready.set()
        for _ in range(jobs):
            job = store.wait_for_assign("r", timeout_s=30)
            assert job is not None, "no job within 30 s"
            time.sleep(rng.uniform(0.005, 0.05))
            store.finish_assign(job, "succeeded", result={"n": job.task})


def result(url: str, jobs: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_worker, args=(url, jobs, ready, 7))
    proc.start()
    latencies: list[float] = []
    right = True
    try:
        ready.wait(CHILD_TIMEOUT_S)
        with HubStore.open(url) as store:
            for k in range(jobs):
                job = store.assign_async("lead", "r", task=str(k))
                done = store.wait_for_result(job.job_id, timeout_s=30)
                if done is None or done.completed_at_ms is None:
                    right = False
                    break
                latencies.append(now_ms() - done.completed_at_ms)
                right &= done.status == "succeeded" and done.result == {"n": str(k)}
    finally:
        proc.join(CHILD_TIMEOUT_S)
    return {**percentiles(latencies), "every_result_right": right and len(latencies) == jobs}


def _empty(url: str, reset: bool) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                tables = conn.execute(text(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")).scalar()
                if tables and not reset:
                    raise SystemExit(f"{url} has tables: pass --reset to wipe schema public")
                conn.execute(text("DROP SCHEMA public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="database (default: a new SQLite file)")
    parser.add_argument("--reset", action="store_true", help="PostgreSQL: wipe schema public")
    parser.add_argument("--jobs", type=int, default=50, help="samples per measure (50)")
    parser.add_argument("--gap", type=float, default=0.1,
                        help="seconds between the crashed worker's jobs (0.1)")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args(argv)
    folder = None
    url = args.url
    if url is None:
        folder = tempfile.mkdtemp(prefix="hubstore-bench-jobs-")
        url = f"sqlite:///{Path(folder) / 'hub.db'}"
    else:
        _empty(url, args.reset)
    HubStore.open(url, auto_migrate=True).close()
    payload = {"url": url if folder is None else "sqlite (a new file)", "jobs": args.jobs,
               "rescue_ms": rescue(url, args.jobs, args.gap),
               "result_ms": result(url, args.jobs)}
    payload["ok"] = bool(payload["rescue_ms"]["each_taken_back_once_as_attempt_2"]
                         and payload["rescue_ms"]["all_succeeded"]
                         and payload["result_ms"]["every_result_right"])
    print(json.dumps(payload))
    if not args.json_only:
        for name in ("rescue_ms", "result_ms"):
            p = payload[name]
            print(f"{name[:-3]:>7}: p50 {p['p50']} ms, p99 {p['p99']} ms, max {p['max']} ms "
                  f"({p['samples']} samples)", file=sys.stderr)
    return 0 if payload["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
