"""The claim run (``--claim``): P processes compete for J queued jobs of one worker.

Every run must claim each job exactly once; with ``--raw-driver`` (PostgreSQL) the same
claims are also made on psycopg alone and on a bare queue, alternating with hubstore's.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.claim_loops import (
    bare_claim_loop,
    bare_statuses,
    claim_loop,
    create_bare_jobs,
    create_claim_jobs,
    raw_claim_loop,
)
from bench.common import emit, format_table, spread
from bench.databases import Target, display_url, is_sqlite, sqlite_path
from bench.statement_count import count_per_job
from hubstore import HubStore

CLAIM_TIMEOUT_S = 600
#: A store whose next look for stalled jobs is due at this time never looks.
NEVER = 2**62
#: The lanes --claim-lanes adds beside hubstore's own, each what it leaves out or adds.
LANE_MEANINGS = {
    "no-rescue": "the claim path without its look for stalled jobs (as before issue 29)",
    "limited": "every job counting against an assign limit that never binds",
    "no-worker-counts": "assign_jobs without revision 0015's per-worker count triggers",
}
COUNTED_JOBS = 200
#: Revision 0015's script (lane "no-worker-counts" takes its triggers away).
_REVISION_0015 = next((Path(__file__).resolve().parents[2] / "alembic" / "versions")
                      .glob("0015_*.py"))


def drop_worker_count_triggers(store: HubStore) -> None:
    """Take revision 0015's per-worker counts away from assign_jobs' triggers, on this
    database only (a measurement of what they cost, not a layout to run): SQLite's
    triggers; PostgreSQL's insert and delete triggers, and the status trigger as
    revision 0010 left it."""
    spec = importlib.util.spec_from_file_location("revision_0015", _REVISION_0015)
    assert spec is not None and spec.loader is not None
    revision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(revision)
    with store.engine.begin() as conn:
        if store.dialect == "sqlite":
            for name in revision.SQLITE_TRIGGERS:
                conn.exec_driver_sql(f"DROP TRIGGER {name}")
            return
        for name in revision.PG_TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER {name} ON assign_jobs")
        conn.exec_driver_sql(revision.STATUS_FUNCTION_0010)
        conn.exec_driver_sql(f"DROP TRIGGER {revision.STATUS_TRIGGER} ON assign_jobs")
        conn.exec_driver_sql(
            f"CREATE TRIGGER {revision.STATUS_TRIGGER} AFTER UPDATE ON assign_jobs FOR EACH "
            f"ROW WHEN ({revision.STATUS_WHEN_0010}) "
            "EXECUTE FUNCTION hub_count_assign_job_status()")


@dataclass(frozen=True)
class ClaimReport:
    index: int
    job_ids: list[str]
    error: str | None


def claim_worker(index: int, url: str, ready: Any, start: Any, results: Any,
                 lane: str = "hubstore", batch: int = 1) -> None:
    """Child process: open its own store, wait for the start signal, claim until empty
    (lane "raw": raw_claim_loop, "bare": bare_claim_loop, each on a psycopg connection
    of its own).

    Sends a plain dict (index, job_ids, error) back; the parent makes the ClaimReport.
    """
    job_ids: list[str] = []
    error: str | None = None
    signalled = False

    def connected() -> None:
        nonlocal signalled
        ready.release()
        signalled = True
        start.wait()

    try:
        if lane == "raw":
            job_ids = raw_claim_loop(url, connected)
        elif lane == "bare":
            job_ids = bare_claim_loop(url, connected)
        else:
            with HubStore.open(url) as store:
                if lane == "no-rescue":  # the claim path as it was before issue 29
                    store.db.rescue_at_ms = NEVER
                store.get_hub_stats()  # connect before the start signal
                connected()
                job_ids = claim_loop(store, batch)
    except Exception as exc:  # reported to the parent, which fails the run
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    if not signalled:
        ready.release()
    results.put({"index": index, "job_ids": job_ids, "error": error})


def final_statuses(store: HubStore, ids: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    with store.unit_of_work() as uow:
        for job_id in ids:
            job = uow.get_assign(job_id)
            status = "missing" if job is None else job.status
            counts[status] = counts.get(status, 0) + 1
    return counts


def run_claim_processes(url: str, processes: int, lane: str = "hubstore", batch: int = 1
                        ) -> tuple[list[ClaimReport], float]:
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    start = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(target=claim_worker, args=(k, url, ready, start, results, lane, batch))
        for k in range(processes)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=CLAIM_TIMEOUT_S):
                raise RuntimeError("a claiming process did not start")
        started = time.perf_counter()
        start.set()
        raw = [results.get(timeout=CLAIM_TIMEOUT_S) for _ in procs]
        wall = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.join(timeout=CLAIM_TIMEOUT_S)
    reports = [ClaimReport(r["index"], r["job_ids"], r["error"]) for r in raw]
    return sorted(reports, key=lambda r: r.index), wall


def claim_once(args: argparse.Namespace, url: str, log: Callable[[str], None],
               lane: str = "hubstore") -> dict[str, Any]:
    """One timed claim run on the empty database at ``url``, with its checks: the jobs
    made and checked through hubstore, claimed and finished by hubstore or (lane "raw")
    raw_claim_loop; lane "bare": the bare queue's own jobs and loop."""
    log(f"database: {display_url(url)}; creating {args.jobs:,} jobs")
    if lane == "bare":
        started = time.perf_counter()
        ids = create_bare_jobs(url, args.jobs)
        enqueue_s = time.perf_counter() - started
        log(f"  {args.processes} bare-queue processes claiming")
        reports, wall = run_claim_processes(url, args.processes, lane)
        statuses = bare_statuses(url)
    else:
        with HubStore.open(url, auto_migrate=True) as store:
            if lane == "no-worker-counts":
                drop_worker_count_triggers(store)
            started = time.perf_counter()
            ids = create_claim_jobs(store, args.jobs, limited=lane == "limited")
            enqueue_s = time.perf_counter() - started
            log(f"  enqueued at {args.jobs / enqueue_s:,.1f} jobs/s; {args.processes} {lane} "
                f"processes claiming, {args.claim_batch} a claim")
            reports, wall = run_claim_processes(url, args.processes, lane,
                                                1 if lane == "raw" else args.claim_batch)
            statuses = final_statuses(store, ids)
    claimed = [job_id for report in reports for job_id in report.job_ids]
    checks = {
        "claimed_total": len(claimed),
        "claimed_once": len(claimed) == len(set(claimed)),
        "all_claimed": len(claimed) == args.jobs and set(claimed) == set(ids),
        "all_succeeded": statuses == {"succeeded": args.jobs},
    }
    log(f"  {args.jobs / wall:,.1f} jobs/s")
    return {"jobs_per_s": round(args.jobs / wall, 1), "wall_seconds": round(wall, 3),
            "enqueue_jobs_per_s": round(args.jobs / enqueue_s, 1),
            "per_process": [len(r.job_ids) for r in reports], "statuses": statuses,
            "checks": checks, "errors": [f"process {r.index}: {r.error}"
                                         for r in reports if r.error]}


def run_claim(args: argparse.Namespace, target: Target, log: Callable[[str], None]) -> int:
    """``--repeat`` timed runs, each on a freshly emptied database; then the statements
    per job of one process. Every run must claim each job exactly once."""
    url = target.fresh()
    if is_sqlite(url) and sqlite_path(url) is None:
        raise SystemExit("--claim needs a database that several processes can open")
    runs = []
    raw_runs = []
    bare_runs = []
    extra: dict[str, list[dict[str, Any]]] = {lane: [] for lane in args.claim_lanes}
    for k in range(args.repeat):
        if k:
            url = target.fresh()
        for lane, lane_runs in extra.items():  # alternating with hubstore's, each on an
            lane_runs.append(claim_once(args, url, log, lane=lane))  # emptied database
            url = target.fresh()
        runs.append(claim_once(args, url, log))
        if args.raw_driver:  # alternating with hubstore's runs, each on an emptied database
            url = target.fresh()
            bare_runs.append(claim_once(args, url, log, lane="bare"))
            url = target.fresh()  # (last: the per-job count below runs on hubstore's schema)
            raw_runs.append(claim_once(args, url, log, lane="raw"))
    failed = [run for run in [*runs, *raw_runs, *bare_runs, *(r for lane in extra.values()
                                                                for r in lane)]
              if run["errors"] or not all(v for n, v in run["checks"].items()
                                          if n != "claimed_total")]
    shown = failed[0] if failed else runs[-1]
    errors = [f"run {k + 1}, {error}" for k, run in enumerate(runs) for error in run["errors"]]
    errors += [f"{label} run {k + 1}, {error}"
               for label, lane in (("raw psycopg", raw_runs), ("bare queue", bare_runs),
                                   *extra.items())
               for k, run in enumerate(lane) for error in run["errors"]]
    ok = not failed
    checks = shown["checks"]
    per_job = count_per_job(url, min(args.jobs, COUNTED_JOBS), target.workdir()) if ok else {}
    rates = [run["jobs_per_s"] for run in runs]
    payload = {
        "mode": "claim",
        "url": display_url(url),
        "processes": args.processes,
        "jobs": args.jobs,
        "repeat": args.repeat,
        "jobs_per_s": round(statistics.median(rates), 1),
        "jobs_per_s_spread": spread(rates),
        "runs": runs,
        "wall_seconds": shown["wall_seconds"],
        "per_process": shown["per_process"],
        "statuses": shown["statuses"],
        "checks": checks,
        "errors": errors,
        "ok": ok,
        "per_job": per_job,
    }
    if raw_runs:
        raw_rates = [run["jobs_per_s"] for run in raw_runs]
        bare_rates = [run["jobs_per_s"] for run in bare_runs]
        payload.update({
            "raw_driver_runs": raw_runs, "raw_jobs_per_s_spread": spread(raw_rates),
            "share_of_raw": float(
                f"{statistics.median(rates) / statistics.median(raw_rates):.4g}"),
            "bare_queue_runs": bare_runs, "bare_jobs_per_s_spread": spread(bare_rates),
            "raw_share_of_bare": float(
                f"{statistics.median(raw_rates) / statistics.median(bare_rates):.4g}")})
    payload["claim_batch"] = args.claim_batch
    payload["enqueue_jobs_per_s_spread"] = spread([run["enqueue_jobs_per_s"] for run in runs])
    for lane, lane_runs in extra.items():
        lane_rates = [run["jobs_per_s"] for run in lane_runs]
        payload[f"{lane}_runs"] = lane_runs
        payload[f"{lane}_jobs_per_s_spread"] = spread(lane_rates)
        # this lane's median beside hubstore's, and its per-repeat pairs' median ratio
        payload[f"{lane}_share_of_hubstore"] = float(
            f"{statistics.median(lane_rates) / statistics.median(rates):.4g}")
        for what in ("jobs_per_s", "enqueue_jobs_per_s"):
            pairs = [mine[what] / theirs[what] for mine, theirs in zip(lane_runs, runs,
                                                                       strict=True)]
            payload[f"{lane}_paired_{what}_share"] = float(
                f"{statistics.median(pairs):.4g}")
        payload[f"{lane}_enqueue_jobs_per_s_spread"] = spread(
            [run["enqueue_jobs_per_s"] for run in lane_runs])
    rows = [[f"{label}run {k + 1}", f"{run['jobs_per_s']:,.1f}",
             f"{run['enqueue_jobs_per_s']:,.1f}",
             " ".join(f"{n:,}" for n in run["per_process"]),
             "yes" if run["checks"]["claimed_once"] and run["checks"]["all_succeeded"]
             else "NO"]
            for label, lane in (("", runs), ("raw psycopg ", raw_runs),
                                ("bare queue ", bare_runs),
                                *((f"{name} ", lane_runs) for name, lane_runs in extra.items()))
            for k, run in enumerate(lane)]
    table = format_table(["run", "jobs/s", "enqueued/s", "jobs per process", "each once"],
                         rows)
    rate = spread(rates)
    summary = (
        f"{args.jobs:,} jobs, {args.processes} processes, {args.repeat} runs: "
        f"{rate['median']:,.1f} jobs/s median (min {rate['min']:,.1f}, max "
        f"{rate['max']:,.1f}); claimed once: {checks['claimed_once']}, "
        f"all succeeded: {checks['all_succeeded']}"
    )
    lines = [table, "", summary, *errors]
    if raw_runs:
        raw_rate = payload["raw_jobs_per_s_spread"]
        lines.append(
            f"raw psycopg, hubstore's two statements with nothing around them: "
            f"{raw_rate['median']:,.1f} jobs/s median (min {raw_rate['min']:,.1f}, max "
            f"{raw_rate['max']:,.1f}); hubstore/raw {payload['share_of_raw']:.2f}")
        bare_rate = payload["bare_jobs_per_s_spread"]
        lines.append(
            f"bare queue (a key and one partial index, no triggers, no event), psycopg "
            f"alone: {bare_rate['median']:,.1f} jobs/s median (min {bare_rate['min']:,.1f}, "
            f"max {bare_rate['max']:,.1f}); raw/bare {payload['raw_share_of_bare']:.2f}")
    for lane, meaning in LANE_MEANINGS.items():
        if lane in extra:
            lane_rate = payload[f"{lane}_jobs_per_s_spread"]
            lines.append(
                f"{meaning}: {lane_rate['median']:,.1f} jobs/s median (min "
                f"{lane_rate['min']:,.1f}, max {lane_rate['max']:,.1f}); "
                f"{lane}/hubstore {payload[f'{lane}_share_of_hubstore']:.3f} (paired "
                f"{payload[f'{lane}_paired_jobs_per_s_share']:.3f}); enqueue "
                f"{lane}/hubstore, paired "
                f"{payload[f'{lane}_paired_enqueue_jobs_per_s_share']:.3f}")
    if per_job:
        trips = per_job.get("round_trips")
        lines.append(f"per job: {per_job['statements']} statements"
                     + (f", {trips} round trips" if trips is not None else "")
                     + f", {per_job['commits']} commits ({per_job['method']})")
    emit(payload, "\n".join(lines), args.json_only)
    return 0 if ok else 1
