"""What revision 0015's per-worker counts cost one job write, measured inside the database.

The claim benchmark (``bench_store.py --claim --claim-lanes no-worker-counts``) measures
the whole lanes, with every layer and the machine's noise around them. This measures the
writes alone: J jobs inserted one statement each, then each claimed and finished (two
one-row status UPDATEs), on a freshly migrated database, with 0015's counts and with
them taken away (``bench.claims.drop_worker_count_triggers``), the two variants taking
turns within each repeat. PostgreSQL: a PL/pgSQL loop timed by the server
(``clock_timestamp()``), autocommit around it (one transaction). SQLite: Python's
sqlite3 running the same statements, either all in one transaction or each in its own
(``--commit-each``: what a WAL commit of one more page costs).

Usage::

    python benchmarks/worker_count_costs.py                      # SQLite, a temp file
    python benchmarks/worker_count_costs.py --commit-each
    python benchmarks/worker_count_costs.py --url postgresql+psycopg://postgres@127.0.0.1/bench

The PostgreSQL database is emptied (``DROP SCHEMA public CASCADE``) first. Output: one
JSON line, then (unless ``--json-only``) microseconds per write, the median of the
repeats [min-max].
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# bench: the package beside this script (its folder is first on sys.path)
from bench.claims import drop_worker_count_triggers
from bench.common import format_table
from bench.databases import pg_reset
from sqlalchemy import create_engine, make_url
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations

_INSERT = ("INSERT INTO assign_jobs (job_id, supervisor_agent, worker_agent, status, "
           "trace_id, correlation_id, created_at_ms, updated_at_ms) "
           "VALUES ({id}, 'lead', {worker}, 'queued', 't', 'c', 1, 1)")
_MOVE = "UPDATE assign_jobs SET status = '{status}' WHERE job_id = {id}"
_PG_LOOP = """
DO $$ DECLARE started timestamptz; BEGIN
    started := clock_timestamp();
    FOR i IN 1..{jobs} LOOP
        {insert};
    END LOOP;
    RAISE NOTICE 'insert %', extract(epoch FROM clock_timestamp() - started);
    started := clock_timestamp();
    FOR i IN 1..{jobs} LOOP
        {claim};
        {finish};
    END LOOP;
    RAISE NOTICE 'update %', extract(epoch FROM clock_timestamp() - started);
END $$"""
VARIANTS = ("with the counts", "without them")


def pg_once(url: URL, jobs: int) -> dict[str, float]:
    """Seconds per insert and per status UPDATE, from the server's own clock."""
    import psycopg

    key = "'j' || i"
    loop = _PG_LOOP.format(jobs=jobs, insert=_INSERT.format(id=key, worker="'w' || (i % 10)"),
                           claim=_MOVE.format(status="running", id=key),
                           finish=_MOVE.format(status="succeeded", id=key))
    seconds: dict[str, float] = {}
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        def on_notice(notice: psycopg.errors.Diagnostic) -> None:
            name, value = str(notice.message_primary).split()
            seconds[name] = float(value)

        conn.add_notice_handler(on_notice)
        conn.execute(loop)
    return {"insert": seconds["insert"] / jobs, "update": seconds["update"] / jobs / 2}


def sqlite_once(path: Path, jobs: int, commit_each: bool) -> dict[str, float]:
    """Seconds per insert and per status UPDATE, on Python's sqlite3 alone."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")

        def timed(statements: Callable[[int], list[tuple[str, tuple[str, ...]]]]) -> float:
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            for i in range(jobs):
                for sql, values in statements(i):  # (bound: each compiled once)
                    conn.execute(sql, values)
                    if commit_each:
                        conn.execute("COMMIT")
                        conn.execute("BEGIN IMMEDIATE")
            conn.execute("COMMIT")
            return time.perf_counter() - started

        insert_sql = _INSERT.format(id="?", worker="?")
        insert = timed(lambda i: [(insert_sql, (f"j{i}", f"w{i % 10}"))])
        moves = [_MOVE.format(status=s, id="?") for s in ("running", "succeeded")]
        update = timed(lambda i: [(sql, (f"j{i}",)) for sql in moves])
    finally:
        conn.close()
    return {"insert": insert / jobs, "update": update / jobs / 2}


def fresh(url: URL, without: bool) -> None:
    """``url`` emptied and migrated to head; without: 0015's counts taken away."""
    if url.get_backend_name() == "postgresql":
        pg_reset(url.render_as_string(hide_password=False))
    else:
        Path(str(url.database)).unlink(missing_ok=True)
    migrations.upgrade(url)
    if without:
        with HubStore.open(url) as store:
            drop_worker_count_triggers(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--commit-each", action="store_true",
                        help="SQLite: each write its own transaction")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = make_url(args.url) if args.url else make_url(f"sqlite:///{folder}/hub.db")
        us: dict[str, dict[str, list[float]]] = {
            v: {"insert": [], "update": []} for v in VARIANTS}
        for _ in range(args.repeat):
            for variant in VARIANTS:
                fresh(url, variant == "without them")
                if url.get_backend_name() == "postgresql":
                    once = pg_once(url, args.jobs)
                else:
                    once = sqlite_once(Path(str(url.database)), args.jobs, args.commit_each)
                for write, seconds in once.items():
                    us[variant][write].append(seconds * 1e6)
        create_engine(url).dispose()
    payload = {"dialect": url.get_backend_name(), "jobs": args.jobs, "repeat": args.repeat,
               "commit_each": args.commit_each, "us_per_write": us,
               "median_us": {v: {w: round(statistics.median(x), 2) for w, x in ws.items()}
                             for v, ws in us.items()}}
    print(json.dumps(payload))
    if not args.json_only:
        print(format_table(["", "insert, us", "status update, us"], [
            [v, *(f"{statistics.median(x):.1f} [{min(x):.1f}-{max(x):.1f}]"
                  for x in us[v].values())] for v in VARIANTS]))


if __name__ == "__main__":
    main()
