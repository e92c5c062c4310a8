"""Throughput benchmark of the hubstore facade, comparable with the reference hub store.

Every operation is one call on ``HubStore`` (so one unit of work of its own) or, for the
reflexion workloads, one call of ``hubstore.reflexion.learn_from_error`` /
``lookup_solution``. Each workload runs OPS operations, timed with ``time.perf_counter``;
the figure is OPS / elapsed seconds, the median of R repeats. Background rows (``--preload``)
are loaded before any timing, in units of work of about 5,000 rows.

Usage::

    # all workloads, fresh SQLite file in a temp dir, 1000 ops, median of 3
    python benchmarks/bench_store.py

    # quick smoke test
    python benchmarks/bench_store.py -n 300 --repeat 1

    # with 100,000 background messages (the reference's second column)
    python benchmarks/bench_store.py --preload 100000

    # a few workloads only, machine-readable output
    python benchmarks/bench_store.py --workloads poll_for_agent,sweep_and_stats --json-only

    # PostgreSQL (the database must be empty, or pass --reset to wipe schema public)
    python benchmarks/bench_store.py --url postgresql+psycopg://postgres@127.0.0.1/bench --reset

    # how the speed holds up as the tables grow (fresh database per scale)
    python benchmarks/bench_store.py --scaling --scales 10000,100000,1000000

    # P processes competing for J queued jobs of one worker
    python benchmarks/bench_store.py --claim --processes 4 --jobs 2000

Output: one JSON line on stdout, then (unless ``--json-only``) a readable table.
Progress notes go to stderr (not with ``--json-only``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, make_url, text

from hubstore import HubStore
from hubstore.reflexion import learn_from_error, lookup_solution

# --------------------------------------------------------------------------- constants

AGENT_COUNT = 200
OLD_AGENT_COUNT = 500
PRELOAD_UNIT_ROWS = 5_000
# Per 10 background messages there are 2 more rows (a reflexion entry and an assign job).
PRELOAD_UNIT_MESSAGES = PRELOAD_UNIT_ROWS * 10 // 12
DEFAULT_SCALES = (10_000, 100_000, 1_000_000)
SCALING_WORKLOADS = ("poll_for_agent", "sweep_and_stats", "reflexion_learn")
CLAIM_WORKER = "w"
CLAIM_TIMEOUT_S = 600
# The reference's issue: "Python's own sqlite3 does an UPDATE in one transaction at over
# 40,000/s here". Measured again on every run, it shows how fast this machine is.
YARDSTICK_REFERENCE = 40_000

# Reference store (triflux hub/store.mjs, better-sqlite3), ops/s, median of 3, 1000 ops,
# with 0 and with 100,000 background rows.
REFERENCE_PRELOADS = (0, 100_000)
REFERENCE: dict[str, tuple[float, float]] = {
    "register_agent": (7_200, 26_400),
    "heartbeat": (28_200, 32_800),
    "audit_log": (8_900, 10_900),
    "poll_for_agent": (1_180, 54),
    "assign_lifecycle": (2_120, 2_380),
    "reflexion_learn": (5_200, 2_500),
    "reflexion_lookup_ctx": (12_000, 27_600),
    "sweep_and_stats": (3_900, 32),
}

Store = Any  # a HubStore or one of its units of work (duck-typed facade)
Op = Callable[[Store, int], None]


# --------------------------------------------------------------------------- workloads


def _agent(i: int) -> str:
    return f"agent-{i % AGENT_COUNT}"


def _topics(i: int) -> list[str]:
    return ["t.a", f"t.{i % 7}"]


def op_register_agent(store: Store, i: int) -> None:
    store.register_agent(_agent(i), "codex", topics=_topics(i))


def op_heartbeat(store: Store, i: int) -> None:
    store.refresh_lease(_agent(i))


def op_audit_log(store: Store, i: int) -> None:
    if i % 3 == 0:
        to_agent, topic = "topic:t.a", "t.a"
    else:
        to_agent, topic = _agent(i + 1), f"t.{i % 7}"
    store.audit_log(
        type="event",
        from_agent=_agent(i),
        to_agent=to_agent,
        topic=topic,
        payload={"i": i, "text": "benchmark message"},
    )


def op_poll_for_agent(store: Store, i: int) -> None:
    store.poll_for_agent(_agent(i))


def op_assign_lifecycle(store: Store, i: int) -> None:
    job = store.create_assign(supervisor_agent="lead", worker_agent=_agent(i), task=f"t{i}")
    store.update_assign_status(job.job_id, "running")
    store.update_assign_status(job.job_id, "succeeded", result={"ok": True})


def _reflexion_context(i: int) -> dict[str, str]:
    return {"cli": "codex", "agent": f"agent-{i % 5}"}


def op_reflexion_learn(store: Store, i: int) -> None:
    learn_from_error(
        store,
        f"TypeError: cannot read x{i % 300} of undefined at /src/a.js:{i}:3",
        "guard it",
        context=_reflexion_context(i),
        success=(i % 2 == 0),
    )


def op_reflexion_lookup_ctx(store: Store, i: int) -> None:
    lookup_solution(
        store,
        f"TypeError: cannot read x{i % 300} of undefined at /lib/b.js:{i + 7}:9",
        context=_reflexion_context(i),
    )


def op_sweep_and_stats(store: Store, i: int) -> None:
    store.get_hub_stats()
    store.get_audit_stats()


# In running order: each workload only relies on the ones before it.
WORKLOADS: dict[str, Op] = {
    "register_agent": op_register_agent,
    "heartbeat": op_heartbeat,
    "audit_log": op_audit_log,
    "poll_for_agent": op_poll_for_agent,
    "assign_lifecycle": op_assign_lifecycle,
    "reflexion_learn": op_reflexion_learn,
    "reflexion_lookup_ctx": op_reflexion_lookup_ctx,
    "sweep_and_stats": op_sweep_and_stats,
}

# Workloads that need others to have run first (they are run, and timed, but not reported).
DEPENDS: dict[str, tuple[str, ...]] = {
    "heartbeat": ("register_agent",),
    "poll_for_agent": ("register_agent", "audit_log"),
    "reflexion_lookup_ctx": ("reflexion_learn",),
    "sweep_and_stats": ("register_agent", "audit_log"),
}


def plan_workloads(selected: Iterable[str]) -> list[str]:
    """The selected workloads and what they depend on, in running order."""
    needed: set[str] = set()
    stack = list(selected)
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(DEPENDS.get(name, ()))
    return [name for name in WORKLOADS if name in needed]


# --------------------------------------------------------------------------- background rows


def _background_message(uow: Store, j: int) -> None:
    to_agent = "topic:t.old" if j % 3 == 0 else f"old-{(j + 1) % OLD_AGENT_COUNT}"
    uow.audit_log(
        type="event",
        from_agent=f"old-{j % OLD_AGENT_COUNT}",
        to_agent=to_agent,
        topic="t.old",
        payload={"j": j, "text": "background message"},
    )


def _background_reflexion(uow: Store, j: int) -> None:
    line = j % 900 + 1
    uow.add_reflexion(
        error_pattern=f"referenceerror: y{j} is not defined at <file>:<line>",
        error_message=f"ReferenceError: y{j} is not defined at /srv/app/m{j % 50}.js:{line}:5",
        solution="declare it",
        context={"cli": "gemini"},
    )


def _background_assign(uow: Store, j: int) -> None:
    uow.create_assign(
        supervisor_agent="old-lead",
        worker_agent=f"old-{j % OLD_AGENT_COUNT}",
        task=f"old{j}",
        status="succeeded",
        result={"ok": True},
    )


def _register_old_agents(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        for k in range(OLD_AGENT_COUNT):
            uow.register_agent(f"old-{k}", "gemini", topics=["t.old"])
    with store.unit_of_work() as uow:
        for k in range(OLD_AGENT_COUNT):
            uow.update_agent_status(f"old-{k}", "offline")


def preload(store: HubStore, count: int, log: Callable[[str], None]) -> float:
    """Load `count` background messages (and their companions); return the seconds taken."""
    if count <= 0:
        return 0.0
    started = time.perf_counter()
    _register_old_agents(store)
    for first in range(0, count, PRELOAD_UNIT_MESSAGES):
        last = min(count, first + PRELOAD_UNIT_MESSAGES)
        with store.unit_of_work() as uow:
            for j in range(first, last):
                _background_message(uow, j)
                if j % 10 == 0:
                    _background_reflexion(uow, j)
                    _background_assign(uow, j)
        log(f"  preload {last:,}/{count:,} messages ({time.perf_counter() - started:.1f} s)")
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
    # as autovacuum would within a minute or so.
    store.get_hub_stats()
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


# --------------------------------------------------------------------------- databases


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_path(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def _sqlite_tables(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        con.close()
    return [row[0] for row in rows]


def _remove_sqlite_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _pg_tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        return inspect(engine).get_table_names(schema="public")
    finally:
        engine.dispose()


def _pg_reset(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    finally:
        engine.dispose()


def _describe_tables(tables: Sequence[str], shown: int = 5) -> str:
    names = sorted(tables)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class NonEmptyDatabase(RuntimeError):
    """The target database holds tables and --reset was not given."""


@dataclass
class Target:
    """Where the benchmark writes: a temp SQLite file, or a URL the user gave."""

    url: str | None
    reset: bool
    keep: bool = False
    _tmpdir: Path | None = field(default=None, init=False)
    _owned: bool = field(default=False, init=False)  # once emptied, the data in it is ours
    _count: int = field(default=0, init=False)
    _last_temp: Path | None = field(default=None, init=False, repr=False)

    def fresh(self) -> str:
        """The URL of an empty database (a new file, or the user's database emptied)."""
        self._count += 1
        if self.url is None:
            return self._fresh_temp_sqlite()
        if _is_sqlite(self.url):
            self._empty_sqlite(self.url)
        else:
            self._empty_pg(self.url)
        self._owned = True
        return self.url

    def _fresh_temp_sqlite(self) -> str:
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="hubstore-bench-"))
        if self._last_temp is not None and not self.keep:
            _remove_sqlite_files(self._last_temp)
        self._last_temp = self._tmpdir / f"hub-{self._count}.db"
        return f"sqlite:///{self._last_temp}"

    def _empty_sqlite(self, url: str) -> None:
        path = _sqlite_path(url)
        if path is None or not path.exists():
            return
        tables = _sqlite_tables(path)
        if tables and not (self.reset or self._owned):
            raise NonEmptyDatabase(
                f"{path} already holds tables ({_describe_tables(tables)}); "
                "pass --reset to delete the file and start from an empty database"
            )
        _remove_sqlite_files(path)

    def _empty_pg(self, url: str) -> None:
        tables = _pg_tables(url)
        if not tables:
            return
        if not (self.reset or self._owned):
            name = make_url(url).database or "(default database)"
            raise NonEmptyDatabase(
                f"PostgreSQL database {name} is not empty (tables: "
                f"{_describe_tables(tables)}); the benchmark must start from an empty "
                "database. Pass --reset to run DROP SCHEMA public CASCADE; CREATE SCHEMA public "
                "(this deletes every table in schema public), or point --url at an empty database"
            )
        _pg_reset(url)

    def cleanup(self) -> None:
        if self._tmpdir is not None and not self.keep:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


def display_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


# --------------------------------------------------------------------------- timing


def time_workload(store: HubStore, op: Op, first_i: int, ops: int) -> float:
    """Run `ops` operations with i = first_i .. first_i + ops - 1; return ops/s."""
    started = time.perf_counter()
    for i in range(first_i, first_i + ops):
        op(store, i)
    elapsed = time.perf_counter() - started
    return ops / elapsed if elapsed > 0 else float("inf")


def run_repeats(
    store: HubStore,
    workloads: Sequence[str],
    ops: int,
    repeats: int,
    log: Callable[[str], None],
) -> dict[str, list[float]]:
    """Run every workload `repeats` times on the same store; the ops/s of each run."""
    runs: dict[str, list[float]] = {name: [] for name in workloads}
    for repeat in range(repeats):
        for name in workloads:
            rate = time_workload(store, WORKLOADS[name], repeat * ops, ops)
            runs[name].append(rate)
            log(f"  run {repeat + 1}/{repeats} {name:<22} {rate:>12,.1f} ops/s")
    return runs


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
            agents = [(_agent(i),) for i in range(AGENT_COUNT)]
            db.executemany("INSERT INTO agents VALUES (?, 0)", agents)
            for _ in range(repeats):
                started = time.perf_counter()
                for i in range(ops):
                    db.execute("BEGIN IMMEDIATE")
                    db.execute(
                        "UPDATE agents SET last_seen_ms = ? WHERE agent_id = ?", (i, _agent(i))
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


def medians(runs: dict[str, list[float]], report: Iterable[str]) -> dict[str, float]:
    return {name: round(statistics.median(runs[name]), 1) for name in report}


def bench_database(
    url: str,
    preload_rows: int,
    workloads: Sequence[str],
    ops: int,
    repeats: int,
    log: Callable[[str], None],
) -> tuple[dict[str, float], float]:
    """Open a fresh store at `url`, preload it, time the workloads: (medians, preload s)."""
    plan = plan_workloads(workloads)
    with HubStore.open(url, auto_migrate=True) as store:
        preload_s = preload(store, preload_rows, log)
        runs = run_repeats(store, plan, ops, repeats, log)
    return medians(runs, [name for name in WORKLOADS if name in workloads]), preload_s


# --------------------------------------------------------------------------- output


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)
        )
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _rate(value: float) -> str:
    return f"{value:,.1f}"


def reference_for(preload_rows: int) -> dict[str, float] | None:
    if preload_rows not in REFERENCE_PRELOADS:
        return None
    column = REFERENCE_PRELOADS.index(preload_rows)
    return {name: figures[column] for name, figures in REFERENCE.items()}


def results_table(results: dict[str, float], reference: dict[str, float] | None) -> str:
    if reference is None:
        return format_table(["workload", "ops/s"], [[n, _rate(r)] for n, r in results.items()])
    rows = [
        [name, _rate(rate), f"{reference[name]:,.0f}", f"{rate / reference[name]:.2f}x"]
        for name, rate in results.items()
    ]
    return format_table(["workload", "ops/s", "reference", "ratio"], rows)


def scaling_table(
    scales: Sequence[int], by_scale: dict[str, dict[str, float]], kept: dict[str, float]
) -> str:
    header = ["workload", *[f"{scale:,} rows" for scale in scales], "kept"]
    rows = [
        [name, *(_rate(by_scale[str(scale)][name]) for scale in scales), f"{fraction:.1%}"]
        for name, fraction in kept.items()
    ]
    return format_table(header, rows)


def kept_fraction(rates: Sequence[float]) -> float:
    """Speed at the largest scale as a fraction of the speed at the smallest."""
    return rates[-1] / rates[0] if rates[0] else 0.0


def emit(payload: dict[str, Any], table: str, json_only: bool) -> None:
    print(json.dumps(payload), flush=True)
    if not json_only:
        print()
        print(table, flush=True)


# --------------------------------------------------------------------------- modes


def run_standard(args: argparse.Namespace, target: Target, log: Callable[[str], None]) -> None:
    url = target.fresh()
    log(f"database: {display_url(url)}")
    results, preload_s = bench_database(url, args.preload, args.workloads, args.n, args.repeat, log)
    reference = reference_for(args.preload)
    yardstick = machine_yardstick()
    payload: dict[str, Any] = {
        "url": display_url(url),
        "preload": args.preload,
        "n": args.n,
        "repeat": args.repeat,
        "results": results,
        "preload_seconds": round(preload_s, 2),
        "yardstick_ops_per_s": yardstick,
    }
    if reference is not None:
        payload["reference"] = {name: reference[name] for name in results}
    table = results_table(results, reference)
    title = f"hubstore, {args.n} ops, median of {args.repeat}, {args.preload:,} background rows"
    emit(payload, f"{title}\n{table}\n\n{yardstick_line(yardstick)}", args.json_only)


def run_scaling(args: argparse.Namespace, target: Target, log: Callable[[str], None]) -> None:
    by_scale: dict[str, dict[str, float]] = {}
    url = ""
    for scale in args.scales:
        url = target.fresh()
        log(f"scale {scale:,}: database {display_url(url)}")
        results, _ = bench_database(url, scale, args.workloads, args.n, args.repeat, log)
        by_scale[str(scale)] = results
    names = list(by_scale[str(args.scales[0])])
    kept = {
        name: round(kept_fraction([by_scale[str(s)][name] for s in args.scales]), 4)
        for name in names
    }
    payload = {
        "mode": "scaling",
        "url": display_url(url),
        "n": args.n,
        "repeat": args.repeat,
        "scales": list(args.scales),
        "results": by_scale,
        "kept": kept,
    }
    lines = [scaling_table(args.scales, by_scale, kept), ""]
    for name, fraction in kept.items():
        lines.append(
            f"{name} keeps {fraction:.1%} of its speed from "
            f"{args.scales[0]:,} to {args.scales[-1]:,} rows"
        )
    emit(payload, "\n".join(lines), args.json_only)


# --- claim mode: P processes compete for J queued jobs of one worker


@dataclass(frozen=True)
class ClaimReport:
    index: int
    job_ids: list[str]
    error: str | None


def claim_loop(store: HubStore) -> list[str]:
    """Claim and finish jobs of CLAIM_WORKER until none is left; the ids claimed."""
    job_ids: list[str] = []
    while (job := store.claim_next_assign(CLAIM_WORKER)) is not None:
        store.report_assign_result(
            job.job_id,
            "succeeded",
            worker_agent=CLAIM_WORKER,
            attempt=job.attempt,
            result={"ok": 1},
        )
        job_ids.append(job.job_id)
    return job_ids


def claim_worker(index: int, url: str, ready: Any, start: Any, results: Any) -> None:
    """Child process: open its own store, wait for the start signal, claim until empty.

    Sends a plain dict (index, job_ids, error) back: a class defined in this script
    would not unpickle in the parent, whose main module has another name.
    """
    job_ids: list[str] = []
    error: str | None = None
    signalled = False
    try:
        with HubStore.open(url) as store:
            store.get_hub_stats()  # connect before the start signal
            ready.release()
            signalled = True
            start.wait()
            job_ids = claim_loop(store)
    except Exception as exc:  # reported to the parent, which fails the run
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    if not signalled:
        ready.release()
    results.put({"index": index, "job_ids": job_ids, "error": error})


def create_claim_jobs(store: HubStore, jobs: int) -> list[str]:
    ids: list[str] = []
    for first in range(0, jobs, PRELOAD_UNIT_ROWS):
        with store.unit_of_work() as uow:
            for k in range(first, min(jobs, first + PRELOAD_UNIT_ROWS)):
                job = uow.create_assign(
                    supervisor_agent="lead", worker_agent=CLAIM_WORKER, task=f"claim{k}"
                )
                ids.append(job.job_id)
    return ids


def final_statuses(store: HubStore, ids: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    with store.unit_of_work() as uow:
        for job_id in ids:
            job = uow.get_assign(job_id)
            status = "missing" if job is None else job.status
            counts[status] = counts.get(status, 0) + 1
    return counts


def run_claim_processes(url: str, processes: int) -> tuple[list[ClaimReport], float]:
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    start = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(target=claim_worker, args=(k, url, ready, start, results))
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


def run_claim(args: argparse.Namespace, target: Target, log: Callable[[str], None]) -> int:
    url = target.fresh()
    if _is_sqlite(url) and _sqlite_path(url) is None:
        raise SystemExit("--claim needs a database that several processes can open")
    log(f"database: {display_url(url)}; creating {args.jobs:,} jobs")
    with HubStore.open(url, auto_migrate=True) as store:
        ids = create_claim_jobs(store, args.jobs)
        log(f"  {args.processes} processes claiming")
        reports, wall = run_claim_processes(url, args.processes)
        statuses = final_statuses(store, ids)
    claimed = [job_id for report in reports for job_id in report.job_ids]
    errors = [f"process {r.index}: {r.error}" for r in reports if r.error]
    checks = {
        "claimed_total": len(claimed),
        "claimed_once": len(claimed) == len(set(claimed)),
        "all_claimed": len(claimed) == args.jobs and set(claimed) == set(ids),
        "all_succeeded": statuses == {"succeeded": args.jobs},
    }
    ok = not errors and all(v for k, v in checks.items() if k != "claimed_total")
    payload = {
        "mode": "claim",
        "url": display_url(url),
        "processes": args.processes,
        "jobs": args.jobs,
        "jobs_per_s": round(args.jobs / wall, 1),
        "wall_seconds": round(wall, 3),
        "per_process": [len(r.job_ids) for r in reports],
        "statuses": statuses,
        "checks": checks,
        "errors": errors,
        "ok": ok,
    }
    rows = [[f"process {r.index}", f"{len(r.job_ids):,}"] for r in reports]
    rows.append(["total", f"{len(claimed):,}"])
    table = format_table(["claimer", "jobs"], rows)
    summary = (
        f"{args.jobs:,} jobs, {args.processes} processes: {args.jobs / wall:,.1f} jobs/s "
        f"({wall:.2f} s); claimed once: {checks['claimed_once']}, "
        f"all succeeded: {checks['all_succeeded']}"
    )
    emit(payload, "\n".join([table, "", summary, *errors]), args.json_only)
    return 0 if ok else 1


# --------------------------------------------------------------------------- command line


def _count_arg(value: str) -> int:
    number = int(value.replace("_", "").replace(",", ""))
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return number


def _workload_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(WORKLOADS)}"
        )
    return names


def _scale_list(value: str) -> list[int]:
    scales = [_count_arg(part) for part in value.split(",") if part.strip()]
    if not scales:
        raise argparse.ArgumentTypeError("expected a comma-separated list of row counts")
    return scales


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="workloads: " + ", ".join(WORKLOADS),
    )
    parser.add_argument("--url", help="SQLAlchemy URL (default: new SQLite file in a temp dir)")
    parser.add_argument(
        "--reset",
        action="store_true",
        help="empty a non-empty target first (PostgreSQL: DROP SCHEMA public "
        "CASCADE; CREATE SCHEMA public; SQLite: delete the file)",
    )
    parser.add_argument(
        "--preload",
        type=_count_arg,
        default=0,
        metavar="N",
        help="background messages loaded before timing (default 0)",
    )
    parser.add_argument(
        "-n",
        type=_count_arg,
        default=1000,
        metavar="OPS",
        help="operations per workload (default 1000)",
    )
    parser.add_argument(
        "--repeat",
        type=_count_arg,
        default=3,
        metavar="R",
        help="runs per workload; the median is reported (default 3)",
    )
    parser.add_argument(
        "--workloads",
        type=_workload_list,
        default=None,
        help="comma-separated workloads (default: all)",
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="fresh database per --scales value; default workloads " + ",".join(SCALING_WORKLOADS),
    )
    parser.add_argument(
        "--scales",
        type=_scale_list,
        default=list(DEFAULT_SCALES),
        help="background rows per scale (default 10000,100000,1000000)",
    )
    parser.add_argument(
        "--claim", action="store_true", help="multi-process claim_next_assign benchmark"
    )
    parser.add_argument(
        "--processes",
        type=_count_arg,
        default=4,
        metavar="P",
        help="claiming processes (default 4)",
    )
    parser.add_argument(
        "--jobs", type=_count_arg, default=2000, metavar="J", help="jobs to claim (default 2000)"
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the temporary SQLite files")
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.scaling and args.claim:
        parser.error("--scaling and --claim are separate modes")
    if args.n < 1 or args.repeat < 1:
        parser.error("-n and --repeat must be at least 1")
    if args.claim and args.processes < 1:
        parser.error("--processes must be at least 1")
    if args.workloads is None:
        args.workloads = list(SCALING_WORKLOADS if args.scaling else WORKLOADS)
    return args


def make_logger(quiet: bool) -> Callable[[str], None]:
    def log(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return log


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log = make_logger(args.json_only)
    target = Target(url=args.url, reset=args.reset, keep=args.keep_db)
    try:
        if args.claim:
            return run_claim(args, target, log)
        if args.scaling:
            run_scaling(args, target, log)
        else:
            run_standard(args, target, log)
        return 0
    except NonEmptyDatabase as exc:
        print(f"bench_store: refusing to run: {exc}", file=sys.stderr)
        return 2
    finally:
        target.cleanup()


if __name__ == "__main__":
    sys.exit(main())
