"""The peers run (``--peers``): hubstore's assign jobs beside pgqueuer and procrastinate,
in one run, on one PostgreSQL server, with the same durability.

For every repeat, and in it for every system in turn (A B C, A B C, ...), each mode on
a database of its own, created empty for it and dropped after it:

1. the system's schema installed (untimed);
2. J jobs enqueued by one process, timed from its first call to its last: one job per
   call (mode "1"), or BATCH per call (mode "10", where the system has a batch call);
3. P worker processes connect and wait; the parent starts them together, and the
   claim+complete phase is timed from that start to the last worker's last job done:
   one job per claim (mode "1"), or BATCH per claim (mode "10"). Handlers are no-ops;
4. checked: the handlers were given each enqueued job exactly once, and the system's own
   tables say each job was completed exactly once (the run fails loudly otherwise).

A mode runs where the system has a call for it: hubstore's batch lanes wait for
HubStore.assign_many / claim_next_assigns (peer_systems.HUBSTORE_BATCH_CALLS); where a
system can enqueue in batches but not claim in batches, the batch mode's jobs are only
enqueued and checked as queued.

Durability: the server's settings are left as they are for every system (no session,
database or table is changed by the lane); each process reads its own session's
synchronous_commit, which must equal the server's, and no table may be UNLOGGED.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import make_url

from bench import pg_costs
from bench.common import emit, format_table, paired_ratio, rate_cell, ratio_cell, spread
from bench.peer_systems import BATCH, LANES, PEERS, Checks, Clock, Peer, quiet_logging

DEFAULT_SYSTEMS = ("hubstore", "pgqueuer", "procrastinate")
PHASE_TIMEOUT_S = 900
LANE_HEADS = {"enqueue_1": "enqueue 1/call", f"enqueue_{BATCH}": f"enqueue {BATCH}/call",
              "claim_1": "claim+complete 1/claim",
              f"claim_{BATCH}": f"claim+complete {BATCH}/claim"}


def system_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in PEERS]
    if unknown or not names or "hubstore" not in names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list holding hubstore, of {', '.join(PEERS)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    return list(dict.fromkeys(names))


# --- the server: one admin connection, a fresh database per run


class Server:
    """The PostgreSQL server of ``--url``: its database is only the admin connection's
    (nothing is written there); each run gets a database of its own beside it."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = make_url(url)
        self.admin = psycopg.connect(self.dsn(self.url.database or "postgres"), autocommit=True)

    def dsn(self, database: str) -> str:
        return self.url.set(drivername="postgresql", database=database, query={}
                            ).render_as_string(hide_password=False)

    def one(self, sql: str, *params: Any) -> Any:
        row = self.admin.execute(sql, params).fetchone()
        assert row is not None
        return row[0]

    def create(self, name: str) -> str:
        self.drop(name)
        self.admin.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def drop(self, name: str) -> None:
        self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def tuples_fetched(self, database: str) -> int:
        """pg_stat_database.tup_fetched of ``database``: rows its backends fetched (by
        index scans, catalog reads included), a measure of read work per job. Read once
        no backend is left on the database (a backend reports its counts as it exits)
        and two reads agree."""
        deadline = time.monotonic() + 10
        last = None
        while time.monotonic() < deadline:
            if not self.one("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                            database):
                seen = int(self.one(
                    "SELECT tup_fetched FROM pg_stat_database WHERE datname = %s", database))
                if seen == last:
                    return seen
                last = seen
            time.sleep(0.2)
        raise RuntimeError(f"{database}: its backends did not leave within 10 s")

    def durability(self) -> dict[str, str]:
        """The server's synchronous_commit and fsync, and where each comes from."""
        out = {"version": str(self.one("SHOW server_version"))}
        for name in ("synchronous_commit", "fsync"):
            out[name] = str(self.one("SELECT setting FROM pg_settings WHERE name = %s", name))
            out[f"{name}_source"] = str(self.one(
                "SELECT source FROM pg_settings WHERE name = %s", name))
        return out

    def close(self) -> None:
        self.admin.close()


def database_name(base: str, system: str, batch: int, repeat: int) -> str:
    name = f"{base}_peers_{system}_b{batch}_r{repeat}"
    if len(name) > 63:
        raise SystemExit(f"--peers: database name {name} is longer than PostgreSQL's 63")
    return name


def unlogged_tables(dsn: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relpersistence = 'u' ORDER BY 1").fetchall()]


# --- child processes


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def enqueue_child(system: str, dsn: str, jobs: int, batch: int, sync: Any,
                  results: Any) -> None:
    """Child process: connect, then enqueue ``jobs`` jobs ``batch`` per call (timed)."""
    quiet_logging()
    clock = Clock(*sync)
    try:
        done = PEERS[system].enqueue(dsn, jobs, batch, clock)
        results.put({"ok": True, "seconds": clock.seconds, "ids": done.ids,
                     "cpu_s": clock.cpu_seconds,
                     "synchronous_commit": done.synchronous_commit})
    except BaseException as exc:  # reported to the parent, which fails the run
        if not clock.signalled:
            sync[0].release()
        results.put({"ok": False, "error": _error(exc)})


def worker_child(system: str, dsn: str, batch: int, index: int, sync: Any,
                 results: Any) -> None:
    """Child process: connect, say so, wait for the start, claim until none is left."""
    quiet_logging()
    clock = Clock(*sync)
    try:
        done = PEERS[system].work(dsn, batch, clock)
        results.put({"ok": True, "index": index, "t0": clock.t0, "t1": clock.t1,
                     "cpu_s": clock.cpu_seconds,
                     "ids": done.ids, "synchronous_commit": done.synchronous_commit})
    except BaseException as exc:
        if not clock.signalled:
            sync[0].release()
        results.put({"ok": False, "index": index, "error": _error(exc)})


def _joined(procs: Sequence[Any]) -> None:
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():  # only our own children, by handle
            proc.kill()
            proc.join()


class Phase:
    """The parent's side of a timed phase: its processes' start and stop signals, and
    the server's CPU for the database's backends between them (read while the
    processes hold their connections)."""

    def __init__(self, ctx: Any, admin: Any, database: str) -> None:
        self.ready, self.go = ctx.Semaphore(0), ctx.Event()
        self.stopped, self.release = ctx.Semaphore(0), ctx.Event()
        self.admin, self.database = admin, database
        self.cpu0: dict[int, float] = {}
        self.server_cpu_s = 0.0

    @property
    def sync(self) -> tuple[Any, Any, Any, Any]:
        return self.ready, self.go, self.stopped, self.release

    def start(self, processes: int, what: str) -> float:
        for _ in range(processes):
            if not self.ready.acquire(timeout=PHASE_TIMEOUT_S):
                raise RuntimeError(f"{what}: a process did not connect")
        self.cpu0 = pg_costs.process_cpu(pg_costs.backend_pids(self.admin, self.database))
        started = time.perf_counter()
        self.go.set()
        return started

    def wait_stopped(self, processes: int) -> None:
        """Once every process stopped its clock: the backends' CPU since the start."""
        for _ in range(processes):
            if not self.stopped.acquire(timeout=PHASE_TIMEOUT_S):
                return  # (a failed process reports its error instead)
        cpu1 = pg_costs.process_cpu(pg_costs.backend_pids(self.admin, self.database))
        self.server_cpu_s = sum(v - self.cpu0.get(pid, 0.0) for pid, v in cpu1.items())
        self.release.set()

    def end(self) -> None:
        self.go.set()
        self.release.set()


def enqueue_phase(ctx: Any, server: Server, system: str, dsn: str, name: str, jobs: int,
                  batch: int) -> dict[str, Any]:
    results = ctx.Queue()
    phase = Phase(ctx, server.admin, name)
    proc = ctx.Process(target=enqueue_child, args=(system, dsn, jobs, batch, phase.sync,
                                                   results))
    proc.start()
    try:
        phase.start(1, f"{system} enqueue")
        phase.wait_stopped(1)
        out: dict[str, Any] = results.get(timeout=PHASE_TIMEOUT_S)
    finally:
        phase.end()
        _joined([proc])
    if not out["ok"]:
        raise RuntimeError(f"{system} enqueue: {out['error']}")
    out["server_cpu_s"] = phase.server_cpu_s
    return out


def claim_phase(ctx: Any, server: Server, system: str, dsn: str, name: str, batch: int,
                workers: int) -> dict[str, Any]:
    """P workers started together; jobs/s from the start to the last one's last job."""
    results = ctx.Queue()
    phase = Phase(ctx, server.admin, name)
    procs = [ctx.Process(target=worker_child, args=(system, dsn, batch, k, phase.sync,
                                                    results))
             for k in range(workers)]
    for proc in procs:
        proc.start()
    try:
        started = phase.start(workers, system)
        phase.wait_stopped(workers)
        reports = [results.get(timeout=PHASE_TIMEOUT_S) for _ in procs]
    finally:
        phase.end()
        _joined(procs)
    failed = [r for r in reports if not r["ok"]]
    if failed:
        raise RuntimeError(f"{system} worker {failed[0]['index']}: {failed[0]['error']}")
    reports.sort(key=lambda r: r["index"])
    # perf_counter is the system-wide monotonic clock on Linux: comparable across processes
    return {"seconds": max(r["t1"] for r in reports) - started,
            "start_skew_ms": round(1000 * (max(r["t0"] for r in reports) - started), 2),
            "per_worker": [len(r["ids"]) for r in reports],
            "ids": [job_id for r in reports for job_id in r["ids"]],
            "cpu_s": sum(r["cpu_s"] for r in reports), "server_cpu_s": phase.server_cpu_s,
            "synchronous_commit": sorted({r["synchronous_commit"] for r in reports})}


# --- one run: one system, one mode, one fresh database


def one_run(ctx: Any, server: Server, peer: Peer, batch: int, repeat: int,
            args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    calls = peer.calls()
    enqueue_batch = batch if calls[f"enqueue_{batch}"] else 1
    claims = calls[f"claim_{batch}"] is not None
    name = database_name(server.url.database or "postgres", peer.name, batch, repeat)
    run: dict[str, Any] = {"system": peer.name, "mode": batch, "repeat": repeat,
                           "database": name, "rates": {}, "errors": []}
    dsn = server.create(name)
    pg_costs.hold_wal(server.admin, name)
    try:
        peer.install(dsn)
        pg_costs.prepare(dsn, name)
        unlogged = unlogged_tables(dsn)
        load = [round(os.getloadavg()[0], 2)]
        before = pg_costs.counters(dsn)
        fetched = server.tuples_fetched(name)  # (the counters' own reads left out)
        enq = enqueue_phase(ctx, server, peer.name, dsn, name, args.jobs, enqueue_batch)
        if enqueue_batch == batch:
            run["rates"][f"enqueue_{batch}"] = round(args.jobs / enq["seconds"], 1)
            seen = server.tuples_fetched(name)
            run["costs"] = {f"enqueue_{batch}": pg_costs.per_job(
                before, pg_costs.counters(dsn), dsn, args.jobs, enq["server_cpu_s"],
                enq["cpu_s"], seen - fetched)}
        sessions = {enq["synchronous_commit"]}
        handled: list[str] = []
        if claims:
            load.append(round(os.getloadavg()[0], 2))
            before = pg_costs.counters(dsn)
            fetched = server.tuples_fetched(name)  # (the counters' own reads left out)
            claim = claim_phase(ctx, server, peer.name, dsn, name, batch, args.processes)
            run["rates"][f"claim_{batch}"] = round(args.jobs / claim["seconds"], 1)
            # (the workers have exited: their backends' counts are flushed)
            seen = server.tuples_fetched(name)
            run["fetched_per_job"] = round((seen - fetched) / args.jobs, 1)
            run.setdefault("costs", {})[f"claim_{batch}"] = pg_costs.per_job(
                before, pg_costs.counters(dsn), dsn, args.jobs, claim["server_cpu_s"],
                claim["cpu_s"], seen - fetched)
            run["per_worker"] = claim["per_worker"]
            run["start_skew_ms"] = claim["start_skew_ms"]
            handled = claim["ids"]
            sessions.update(claim["synchronous_commit"])
        run["load1_at_phase_starts"] = load
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            checks = peer.check(conn, enq["ids"], claims)
        checks.expect("enqueued_distinct", len(set(enq["ids"])), args.jobs)
        if claims:
            checks.expect("handlers_given_each_job_once",
                          (len(handled), set(handled)), (args.jobs, set(enq["ids"])))
        checks.expect("sessions_synchronous_commit", sorted(sessions),
                      [args.durability["synchronous_commit"]])
        checks.expect("unlogged_tables", unlogged, [])
    except Exception as exc:
        run["errors"].append(f"{type(exc).__name__}: {exc}")
        checks = Checks()
        checks.passed["ran"] = False
    finally:
        pg_costs.release_wal(server.admin, name)
        if not args.keep_db:
            server.drop(name)
    run["checks"], run["seen"] = checks.passed, checks.seen
    run["ok"] = not run["errors"] and all(checks.passed.values())
    rates = ", ".join(f"{LANE_HEADS[lane]} {rate:,.1f} jobs/s"
                      for lane, rate in run["rates"].items())
    log(f"  {peer.name} mode {batch}, repeat {repeat}: {rates or 'no rate'}; "
        f"{'each job exactly once' if run['ok'] else 'FAILED'}")
    for lane_error in run["errors"]:
        log(f"    {lane_error.splitlines()[0]}")
    return run


# --- the run and its report


def run_peers(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``--repeat`` rounds of every system, each mode on a fresh database; the table of
    medians and hubstore's ratios to each peer. Exit status 1 when any check failed."""
    quiet_logging()
    server = Server(args.url)
    args.durability = durability = server.durability()
    systems: dict[str, dict[str, Any]] = {}
    for system in args.systems:
        peer = PEERS[system]
        why = peer.missing()
        systems[system] = {"version": peer.version() if why is None else None,
                           "skipped": why, "calls": peer.calls() if why is None else {}}
        if why is not None:
            log(f"{system}: skipped, {why}")
    running = [PEERS[s] for s in args.systems if systems[s]["skipped"] is None]
    ctx = mp.get_context("spawn")
    runs: list[dict[str, Any]] = []
    try:
        for repeat in range(1, args.repeat + 1):
            log(f"repeat {repeat} of {args.repeat}")
            for peer in running:
                calls = systems[peer.name]["calls"]
                for batch in (1, BATCH):
                    if batch != 1 and not (calls[f"enqueue_{batch}"] or calls[f"claim_{batch}"]):
                        continue
                    runs.append(one_run(ctx, server, peer, batch, repeat, args, log))
    finally:
        server.close()
    return report(args, systems, runs, durability)


def _medians(systems: dict[str, dict[str, Any]], runs: list[dict[str, Any]]
             ) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for system in systems:
        out[system] = {}
        for lane in LANES:
            rates = [r["rates"][lane] for r in runs if r["system"] == system
                     and lane in r["rates"]]
            out[system][lane] = {**spread(rates), "runs": rates} if rates else None
        for batch in (1, BATCH):
            fetched = [r["fetched_per_job"] for r in runs if r["system"] == system
                       and r["mode"] == batch and "fetched_per_job" in r]
            out[system][f"fetched_per_job_{batch}"] = (
                statistics.median(fetched) if fetched else None)
        out[system]["costs"] = {}
        for lane in LANES:
            seen = [r["costs"][lane] for r in runs if r["system"] == system
                    and lane in r.get("costs", {})]
            if seen:
                out[system]["costs"][lane] = {key: statistics.median(c[key] for c in seen)
                                              for key in seen[0]}
    return out


def report(args: argparse.Namespace, systems: dict[str, dict[str, Any]],
           runs: list[dict[str, Any]], durability: dict[str, str]) -> int:
    results = _medians(systems, runs)
    ratios: dict[str, dict[str, dict[str, float | None] | None]] = {}
    ours = results["hubstore"]
    for system in systems:
        if system == "hubstore" or systems[system]["skipped"]:
            continue
        ratios[system] = {}
        for lane in LANES:
            mine, theirs = ours[lane], results[system][lane]
            ratios[system][lane] = None if mine is None or theirs is None else {
                "of_medians": round(mine["median"] / theirs["median"], 3),
                "paired": round(paired_ratio(mine["runs"], theirs["runs"]), 3)
                if len(mine["runs"]) == len(theirs["runs"]) else None}
    failed = [r for r in runs if not r["ok"]]
    ok = not failed and bool(runs)
    same = all(r["checks"].get(name, False) for r in runs
               for name in ("sessions_synchronous_commit", "unlogged_tables"))
    setting = durability["synchronous_commit"]
    durable = (f"synchronous_commit={setting} ({durability['synchronous_commit_source']}), "
               f"fsync={durability['fsync']} ({durability['fsync_source']}): the server's "
               "settings, left as they are for every system; "
               + (f"every process's session read synchronous_commit={setting} and no table "
                  "is UNLOGGED" if same else "NOT THE SAME for every run (see FAILED)"))
    payload = {
        "mode": "peers", "url": server_display(args.url), "server": durability["version"],
        "processes": args.processes, "jobs": args.jobs, "repeat": args.repeat,
        "batch": BATCH, "durability": durable, "systems": systems, "results": results,
        "ratios": ratios, "runs": runs, "ok": ok,
        "failed": [f"{r['system']} mode {r['mode']} repeat {r['repeat']}" for r in failed],
    }
    emit(payload, table(args, systems, results, ratios, durable, failed), args.json_only)
    return 0 if ok else 1


def server_display(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def table(args: argparse.Namespace, systems: dict[str, dict[str, Any]],
          results: dict[str, dict[str, Any]], ratios: dict[str, dict[str, Any]],
          durable: str, failed: list[dict[str, Any]]) -> str:
    def cell(value: dict[str, Any] | None) -> str:
        if value is None:
            return "n/a"
        return (f"{rate_cell(value['median'])} [{value['min']:,.0f}-{value['max']:,.0f}]"
                if len(value["runs"]) > 1 else rate_cell(value["median"]))

    head = [f"jobs/s, median of {args.repeat} [min-max]", *LANE_HEADS.values()]
    body = []
    for system, about in systems.items():
        if about["skipped"]:
            continue
        body.append([f"{system} {about['version']}", *(cell(results[system][lane])
                                                       for lane in LANES)])
    for system, by_lane in ratios.items():
        body.append([f"hubstore / {system}", *(
            "n/a" if by_lane[lane] is None else ratio_cell(by_lane[lane]["of_medians"])
            for lane in LANES)])
    fetched_head = ["tuples fetched per job (pg_stat_database), median",
                    "claim+complete 1/claim", f"claim+complete {BATCH}/claim"]
    fetched_body = [[system, *(f"{results[system][key]:,.1f}"
                               if results[system].get(key) is not None else "n/a"
                               for key in ("fetched_per_job_1", f"fetched_per_job_{BATCH}"))]
                    for system, about in systems.items() if not about["skipped"]]
    cost_head = ["per job, median", "lane", *(heading for _, heading in pg_costs.COLUMNS)]
    cost_body = [[system, LANE_HEADS[lane], *(f"{costs[key]:,.1f}"
                                              for key, _ in pg_costs.COLUMNS)]
                 for system, about in systems.items() if not about["skipped"]
                 for lane, costs in results[system]["costs"].items()]
    lines = [format_table(head, body), "", format_table(fetched_head, fetched_body), "",
             format_table(cost_head, cost_body), "",
             "(rows: inserted + updated + deleted, pg_stat_user_tables; index entries: "
             "btree leaf insertions and WAL B: bytes of the WAL records that touch the "
             "database's relations, pg_walinspect, commit records and full-page images "
             "(which follow the server's checkpoints) left out, the images apart; trigger "
             "calls: pg_stat_user_functions, track_functions=pl; tuples read: "
             "pg_stat_database.tup_fetched; CPU: the database's backends (/proc) and the "
             "clients' process_time, over the timed phase)", "",
             f"{args.jobs:,} no-op jobs, {args.processes} worker processes, {args.repeat} "
             f"repeat(s); every system and mode on a fresh database of its own on one "
             f"server (PostgreSQL {args.durability['version']}); ratios: of "
             "the medians (the JSON line also has the paired ratios).",
             f"durability: {durable}.",
             "each job completed exactly once: "
             + ("yes, in every run (handlers and the systems' own tables)" if not failed
                else "NO"),
             "calls:"]
    for system, about in systems.items():
        if about["skipped"]:
            lines.append(f"  {system}: skipped, {about['skipped']}")
            continue
        described = "; ".join(f"{LANE_HEADS[lane]}: {about['calls'][lane] or 'n/a'}"
                              for lane in LANES)
        lines.append(f"  {system}: {described}")
    if systems["hubstore"]["calls"] and systems["hubstore"]["calls"][f"claim_{BATCH}"] is None:
        lines.append("  (hubstore's batch lanes run once HubStore has assign_many / "
                     "claim_next_assigns / report_assign_results)")
    for run in failed:
        lines.append(f"FAILED: {run['system']} mode {run['mode']} repeat {run['repeat']}: "
                     + "; ".join([*(e.splitlines()[0] for e in run["errors"]),
                                  *(f"{name}: {run['seen'].get(name, 'failed')}"
                                    for name, held in run["checks"].items() if not held)]))
    return "\n".join(lines)


def check_url(url: str | None) -> str | None:
    """Why ``url`` cannot be the peers run's server (None: it can)."""
    if url is None or make_url(url).get_backend_name() != "postgresql":
        return ("--peers runs on a PostgreSQL server: pass --url postgresql+psycopg://"
                "USER@HOST:PORT/DB (DB is only connected to; each run makes a database "
                "of its own beside it)")
    if not re.fullmatch(r"[A-Za-z0-9_]+", make_url(url).database or "postgres"):
        return "--peers: the --url database name must be letters, digits and _"
    return None
