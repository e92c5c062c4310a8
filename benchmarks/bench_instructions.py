"""Instructions per store call: this checkout beside another one, counted by cachegrind.

Times on a shared machine move by a third from run to run; instruction counts do not, so
they are what a change of the library is checked against (issue 32: every operation
within 3% of the tree before). For each store (SQLite, and PostgreSQL with ``--url``)
and each operation, a child process opens the store and makes the same public-API call
N times, under ``valgrind --tool=cachegrind`` with PYTHONHASHSEED=0, once with N=100 and
once with N=1100: the difference divided by 1,000 is the instructions of one call,
without the start-up, the imports and the opening of the store. On PostgreSQL only the
client process is counted (the server is not under valgrind).

The operations:

- ``heartbeat``: ``refresh_lease(agent)``
- ``audit_log``: ``audit_log("event", agent, "lead", "t", payload={"n": i})``
- ``poll_for_agent``: ``poll_for_agent(agent, 20)``, 20 messages waiting
- ``claim``: ``claim_next_assign(worker)``, 1,100 jobs queued
- ``finish``: ``finish_assign(job, "succeeded", result={...})`` on claimed jobs (the job
  passed as a claim hands it out: its id, worker and attempt)
- ``learn``: ``add_reflexion(...)``, a new pattern each call

Every child's database is made beforehand by a process of its own (not counted): a fresh
SQLite file, or a fresh PostgreSQL database (created and dropped on ``--url``'s server),
migrated and filled by the checkout under test. Each side runs with its checkout first
on ``PYTHONPATH`` (the child checks that it imported that checkout's hubstore).

Usage::

    git worktree add /tmp/before main      # the tree to compare with
    python benchmarks/bench_instructions.py --before /tmp/before \\
        --url postgresql+psycopg://postgres@127.0.0.1:5432/postgres

Output: a Markdown table (store, operation, before, after, after/before) and one JSON
line. ``--jobs`` runs that many valgrind children at once (the counts do not depend on
it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
OPERATIONS = ("heartbeat", "audit_log", "poll_for_agent", "claim", "finish", "learn")
SMALL, LARGE = 100, 1100
#: Jobs made for the claim and finish runs (enough for the larger run).
JOBS = LARGE
WORKER, AGENT = "bench-worker", "bench-agent"


def _job_id(i: int) -> str:
    return f"bench-job-{i:05d}"


def setup(url: str, operation: str) -> None:
    """Migrate the database at ``url`` and fill it for ``operation`` (not counted)."""
    from hubstore import HubStore

    with HubStore.open(url, auto_migrate=True) as store:
        store.register_agent(AGENT, "codex")
        store.register_agent(WORKER, "codex")
        if operation == "poll_for_agent":
            for i in range(20):
                store.audit_log("event", "lead", AGENT, "t", payload={"n": i})
        elif operation in ("claim", "finish"):
            for i in range(JOBS):
                store.create_assign("lead", WORKER, task=f"task {i}", job_id=_job_id(i))
            if operation == "finish":
                for _ in range(JOBS):
                    store.claim_next_assign(WORKER)


def child(url: str, operation: str, calls: int) -> None:
    """Open the store and make ``calls`` calls of ``operation`` (counted)."""
    from hubstore import HubStore
    from hubstore.models import AssignJob

    with HubStore.open(url) as store:
        calls_of: dict[str, Callable[[int], object]] = {
            "heartbeat": lambda i: store.refresh_lease(AGENT),
            "audit_log": lambda i: store.audit_log("event", AGENT, "lead", "t",
                                                   payload={"n": i}),
            "poll_for_agent": lambda i: store.poll_for_agent(AGENT, 20),
            "claim": lambda i: store.claim_next_assign(WORKER),
            "finish": lambda i: store.finish_assign(
                AssignJob(job_id=_job_id(i), worker_agent=WORKER, attempt=1), "succeeded",
                result={"ok": i}),
            "learn": lambda i: store.add_reflexion(
                error_pattern=f"error pattern {i}", error_message=f"Error: case {i}",
                solution="retry with a longer timeout", context={"tool": "bench"}),
        }
        one = calls_of[operation]
        for i in range(calls):
            one(i)


def _env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"}


def _python(checkout: Path, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--checkout", str(checkout), *args]


class Databases:
    """A fresh database per child: SQLite files in a folder, or PostgreSQL databases
    on the server of ``pg_url`` (dropped when done)."""

    def __init__(self, folder: Path, pg_url: str | None) -> None:
        self.folder = folder
        self.pg_url = pg_url

    def make(self, store: str) -> str:
        name = f"bench_instr_{uuid.uuid4().hex[:12]}"
        if store == "sqlite":
            return f"sqlite:///{self.folder / name}.db"
        from sqlalchemy import make_url

        assert self.pg_url is not None
        self._server(f'CREATE DATABASE "{name}"')
        return make_url(self.pg_url).set(database=name).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        from sqlalchemy import make_url

        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
                Path(f"{parsed.database}{suffix}").unlink(missing_ok=True)
            return
        self._server(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')

    def _server(self, statement: str) -> None:
        """Run ``statement`` on the PostgreSQL server, outside a transaction."""
        from sqlalchemy import create_engine, text

        assert self.pg_url is not None
        engine = create_engine(self.pg_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(statement))
        finally:
            engine.dispose()


def count(checkout: Path, databases: Databases, store: str, operation: str,
          calls: int) -> int:
    """The instructions of one child run (start-up included)."""
    url = databases.make(store)
    try:
        subprocess.run(_python(checkout, "--setup", operation, "--db", url), check=True,
                       env=_env(checkout), cwd=checkout, capture_output=True)
        with tempfile.NamedTemporaryFile(suffix=".cachegrind") as out:
            command = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
                       f"--cachegrind-out-file={out.name}",
                       *_python(checkout, "--child", operation, "--calls", str(calls),
                                "--db", url)]
            done = subprocess.run(command, capture_output=True, text=True,
                                  env=_env(checkout), cwd=checkout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{store} {operation} x{calls} in {checkout} failed:\n"
                               f"{done.stderr[-3000:]}")
        total = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        assert total is not None, done.stderr[-2000:]
        return int(total.group(1).replace(",", ""))
    finally:
        databases.drop(url)


def per_call(checkout: Path, databases: Databases, store: str, operation: str,
             pool: concurrent.futures.Executor) -> concurrent.futures.Future[int]:
    small = pool.submit(count, checkout, databases, store, operation, SMALL)
    large = pool.submit(count, checkout, databases, store, operation, LARGE)
    done: concurrent.futures.Future[int] = concurrent.futures.Future()

    def both(_: object) -> None:
        if small.done() and large.done() and not done.done():
            try:
                done.set_result(round((large.result() - small.result()) / (LARGE - SMALL)))
            except BaseException as exc:
                done.set_exception(exc)

    small.add_done_callback(both)
    large.add_done_callback(both)
    return done


def _commit(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                          capture_output=True, text=True, check=False).stdout.strip() or "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="the checkout to compare with")
    parser.add_argument("--url", help="a PostgreSQL server (a database on it to connect "
                        "to; each child gets a database of its own); without it, SQLite only")
    parser.add_argument("--operations", default=",".join(OPERATIONS),
                        help="comma-separated, of: " + ", ".join(OPERATIONS))
    parser.add_argument("--jobs", type=int, default=2, help="valgrind children at once")
    parser.add_argument("--checkout", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--setup", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.setup or args.child:
        import hubstore

        where = Path(hubstore.__file__).resolve()
        if args.checkout is not None and args.checkout.resolve() not in where.parents:
            raise SystemExit(f"imported {where}, not the checkout {args.checkout}")
        if args.setup:
            setup(args.db, args.setup)
        else:
            child(args.db, args.child, args.calls)
        return 0
    if args.before is None:
        parser.error("--before is required")
    operations = [op for op in args.operations.split(",") if op]
    unknown = set(operations) - set(OPERATIONS)
    if unknown:
        parser.error(f"unknown operations: {sorted(unknown)}")
    sides = {"before": args.before.resolve(), "after": HERE}
    stores = ["sqlite"] + (["postgresql"] if args.url else [])
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as folder, \
            concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        databases = Databases(Path(folder), args.url)
        futures = {(store, op, side): per_call(checkout, databases, store, op, pool)
                   for store in stores for op in operations
                   for side, checkout in sides.items()}
        for (store, op, side), future in futures.items():
            results.setdefault(store, {}).setdefault(op, {})[side] = future.result()
    for ops in results.values():
        for counts in ops.values():
            counts["ratio"] = round(counts["after"] / counts["before"], 3)
    print(f"before: {_commit(sides['before'])} ({sides['before']}), "
          f"after: {_commit(HERE)} ({HERE}); instructions per call, "
          f"({LARGE} - {SMALL} calls) / {LARGE - SMALL}")
    print()
    print("| store | operation | before | after | after/before |")
    print("|---|---|---:|---:|---:|")
    for store, ops in results.items():
        label = "SQLite" if store == "sqlite" else "PostgreSQL (client)"
        for op, counts in ops.items():
            print(f"| {label} | {op} | {counts['before']:,} | {counts['after']:,} | "
                  f"{counts['ratio']:.3f} |")
    print()
    print(json.dumps({"before": _commit(sides["before"]), "after": _commit(HERE),
                      "instructions_per_call": results}))
    worse = [f"{store} {op}" for store, ops in results.items() for op, counts in ops.items()
             if counts["ratio"] > 1.03]
    if worse:
        print(f"more than 3% worse: {', '.join(worse)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
