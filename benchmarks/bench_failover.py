"""A PostgreSQL failover under load: how long the hub is down, what fails, what is lost.

For each replication mode (asynchronous, synchronous) and each number of processes, on
a fresh primary and streaming standby of its own (tests/faults/pg_cluster.py: the server's own
binaries in a temporary folder, on free local ports), the same scenario:

1. P processes run ``assign_async`` in a loop, each job with an id of the caller's
   (``job_id`` and ``unique_key``), on a store opened with one multi-host URL naming
   both servers (``target_session_attrs=read-write``, ``call_timeout``); a call that
   fails with ``outcome_unknown`` is retried with the same id (the job returned, or
   DuplicateKey once it has ended);
2. after ``--load-s`` seconds the standby lags: the primary's WAL sender is stopped
   (SIGSTOP) for ``--lag-s`` seconds (0: no lag), while the load goes on;
3. the primary is killed (SIGKILL to all its processes, the stopped WAL sender too: a
   crash), and after ``--down-s`` seconds the standby is promoted (``pg_ctl promote``);
4. the load goes on for ``--after-s`` seconds, then every acknowledged job id is looked
   for on the new primary.

Reported per scenario: calls/s before the lag (the anchor: the same load on every
row), the time from the kill and from the end of the promotion to the first call that
succeeded after it, the calls that failed (every one a HubStoreError, else the run
fails), and the acknowledged jobs missing on the new primary. Scenarios run one after
the other in one run, side by side.

Usage::

    python benchmarks/bench_failover.py                 # 1 and 4 processes, async and sync
    python benchmarks/bench_failover.py --processes 1 --modes sync --json-only

Needs the server's binaries (/usr/lib/postgresql/15/bin, or $HUBSTORE_PG_BIN); as root,
the servers run as the postgres user. Output: one JSON line on stdout, then (unless
``--json-only``) a table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests/

from hubstore import HubStore
from hubstore.errors import DatabaseUnavailable, DuplicateKey, HubStoreError
from tests.faults.pg_cluster import Cluster, Server, missing, multi_host_url


def _load(url: str, worker: int, ready: Any, stop: Any, results: Any) -> None:
    """One process's load (see the module's docstring), from its store's opening (then
    it puts its number on ``ready``); puts its record on ``results``: (worker,
    [(began, ended, job_id or None, error class or None)])."""
    calls: list[tuple[float, float, str | None, str | None]] = []
    number = 0
    with HubStore.open(url) as store:
        store.get_agent("w1")  # (connected)
        ready.put(worker)
        while not stop.is_set():
            job_id = f"job-{worker}-{number}"
            began = time.monotonic()
            try:
                store.assign_async("lead", "w1", task="build", job_id=job_id, unique_key=job_id)
            except DuplicateKey:
                pass  # a retry whose first try had committed, and the job has ended
            except DatabaseUnavailable as exc:
                calls.append((began, time.monotonic(), None, type(exc).__name__))
                if not exc.outcome_unknown:
                    number += 1  # known not written: a new job next
                time.sleep(0.01)
                continue
            except HubStoreError as exc:
                calls.append((began, time.monotonic(), None, type(exc).__name__))
                number += 1
                continue
            except BaseException as exc:  # not a HubStoreError: reported, the run fails
                calls.append((began, time.monotonic(), None, f"NOT A HUBSTORE ERROR: {exc!r}"))
                number += 1
                continue
            calls.append((began, time.monotonic(), job_id, None))
            number += 1
    results.put((worker, calls))


def _walsender(primary: Server) -> int:
    return int(primary.sql("SELECT pid FROM pg_stat_replication").strip())


def scenario(synchronous: bool, processes: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run of the scenario on a cluster of its own."""
    context = multiprocessing.get_context("spawn")
    with Cluster() as cluster:
        primary = cluster.primary()
        standby = cluster.standby(primary, synchronous=synchronous)
        url = multi_host_url(primary, standby, call_timeout=str(args.call_timeout),
                             connect_timeout="2")
        with HubStore.open(url, auto_migrate=True) as store:
            store.register_agent("w1", "codex")
        shown = url.render_as_string(hide_password=False)
        ready, stop, results = context.Queue(), context.Event(), context.Queue()
        workers = [context.Process(target=_load, args=(shown, n, ready, stop, results))
                   for n in range(processes)]
        for worker in workers:
            worker.start()
        for _ in workers:
            ready.get(timeout=120)
        time.sleep(args.load_s)
        lag = time.monotonic()
        if args.lag_s:
            os.kill(_walsender(primary), signal.SIGSTOP)
            time.sleep(args.lag_s)
        primary.kill()
        kill = time.monotonic()  # (the postmaster is gone)
        time.sleep(args.down_s)
        standby.promote()
        promoted = time.monotonic()
        time.sleep(args.after_s)
        stop.set()
        records = dict(results.get(timeout=60) for _ in workers)
        for worker in workers:
            worker.join(60)
        with HubStore.open(standby.url()) as store, store.unit_of_work(write=False) as uow:
            from sqlalchemy import text

            stored = set(uow.connection.scalars(text("SELECT job_id FROM assign_jobs")))
    calls = [call for record in records.values() for call in record]
    done = [c for c in calls if c[3] is None]
    failed = [c for c in calls if c[3] is not None]
    started = min(c[0] for c in calls)
    before = [c for c in done if c[1] < lag]
    after_kill = [c[1] for c in done if c[0] >= kill]
    after_promotion = [c[1] for c in done if c[1] > promoted]
    acknowledged = {c[2] for c in done}
    return {
        "replication": "sync" if synchronous else "async", "processes": processes,
        "calls_per_s_before": round(len(before) / (lag - started), 1),
        "recovered_after_kill_s": round(min(after_kill) - kill, 2) if after_kill else None,
        "recovered_after_promotion_s": (round(min(after_promotion) - promoted, 2)
                                        if after_promotion else None),
        "calls_failed": len(failed),
        "errors": sorted({c[3] for c in failed if c[3]}),
        "acknowledged": len(acknowledged),
        "acknowledged_lost": len(acknowledged - stored),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,4",
                        help="numbers of load processes, comma-separated (default 1,4)")
    parser.add_argument("--modes", default="async,sync",
                        help="replication modes, comma-separated (default async,sync)")
    parser.add_argument("--load-s", type=float, default=2.0, help="load before the lag")
    parser.add_argument("--lag-s", type=float, default=1.0,
                        help="the standby's WAL receiver stopped this long before the kill")
    parser.add_argument("--down-s", type=float, default=0.5,
                        help="from the kill to the promotion")
    parser.add_argument("--after-s", type=float, default=3.0, help="load after the promotion")
    parser.add_argument("--call-timeout", type=float, default=2.0,
                        help="the stores' call_timeout (seconds)")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args(argv)
    reason = missing()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    rows = []
    for mode in args.modes.split(","):
        for processes in (int(p) for p in args.processes.split(",")):
            if not args.json_only:
                print(f"{mode}, {processes} process(es)...", file=sys.stderr, flush=True)
            rows.append(scenario(mode == "sync", processes, args))
    print(json.dumps({"failover": rows, "settings": {
        k: v for k, v in vars(args).items() if k != "json_only"}}))
    if not args.json_only:
        print(_table(rows))
    bad = [e for row in rows for e in row["errors"] if e.startswith("NOT A")]
    return 1 if bad else 0


def _table(rows: list[dict[str, Any]]) -> str:
    header = ["replication", "processes", "calls/s before", "up after kill (s)",
              "up after promotion (s)", "calls failed", "acknowledged", "lost"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["replication"], row["processes"], row["calls_per_s_before"],
                 row["recovered_after_kill_s"], row["recovered_after_promotion_s"],
                 row["calls_failed"], row["acknowledged"], row["acknowledged_lost"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
