"""What each part of hubstore's PostgreSQL layout costs the claim benchmark.

The claim run of ``bench_store.py --claim`` (P processes claiming and finishing J jobs,
two autocommit statements per job), made on psycopg alone with hubstore's own statements
(``raw_claim_loop`` in ``bench/claim_loops.py``), on a freshly migrated database, then
again with parts of the layout taken away on that database only: the counter triggers,
the message_log stamp (its advisory lock, sequence row and NOTIFY), both, and, on top of
both, three of the message indexes. Variants alternate within each repeat, so a changing
machine moves them alike. Nothing here changes hubstore; the variants are measurements of
what the server spends per job, not layouts to run.

Usage::

    python benchmarks/pg_claim_costs.py --url postgresql+psycopg://postgres@127.0.0.1/bench

The database is emptied (``DROP SCHEMA public CASCADE``) before every run.
Output: one JSON line, then (unless ``--json-only``) a table of jobs/s per variant.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from typing import Any

# bench: the package beside this script (its folder is first on sys.path)
from bench.claims import claim_once
from bench.common import format_table
from bench.databases import pg_fresh_hub
from sqlalchemy import make_url

_NO_COUNTERS = ("DROP TRIGGER trg_hub_assign_jobs_update ON assign_jobs; "
                "DROP TRIGGER trg_hub_messages_insert ON messages")
_NO_MESSAGE_LOG = "DROP TRIGGER trg_hub_message_log ON messages"
VARIANTS: tuple[tuple[str, str | None], ...] = (
    ("hubstore's layout", None),
    ("without the counter triggers", _NO_COUNTERS),
    ("without the message_log stamp", _NO_MESSAGE_LOG),
    ("without either", f"{_NO_COUNTERS}; {_NO_MESSAGE_LOG}"),
    ("without either, 3 message indexes fewer",
     f"{_NO_COUNTERS}; {_NO_MESSAGE_LOG}; "
     "DROP INDEX idx_messages_status, idx_messages_priority, idx_messages_correlation"),
)


def measure(url: str, processes: int, jobs: int, repeat: int) -> dict[str, list[float]]:
    """jobs/s of each variant, per repeat; every run claims each job exactly once."""
    args = argparse.Namespace(jobs=jobs, processes=processes, claim_batch=1)
    rates: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    for _ in range(repeat):
        for name, change in VARIANTS:
            pg_fresh_hub(url, change)
            run = claim_once(args, url, lambda _message: None, lane="raw")
            checks = run["checks"]
            if run["errors"] or not (checks["claimed_once"] and checks["all_succeeded"]):
                raise SystemExit(f"{name}: {run['errors'] or checks}")
            rates[name].append(run["jobs_per_s"])
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL URL (emptied per run)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args(argv)
    if make_url(args.url).get_backend_name() != "postgresql":
        parser.error("--url must be a PostgreSQL database")
    rates = measure(args.url, args.processes, args.jobs, args.repeat)
    base = statistics.median(rates[VARIANTS[0][0]])
    payload: dict[str, Any] = {
        "processes": args.processes, "jobs": args.jobs, "repeat": args.repeat,
        "runs": rates, "median": {name: statistics.median(v) for name, v in rates.items()},
    }
    print(json.dumps(payload))
    if not args.json_only:
        rows = [[name, " / ".join(f"{r:,.0f}" for r in values),
                 f"{statistics.median(values):,.1f}", f"{statistics.median(values) / base:.2f}x"]
                for name, values in rates.items()]
        print(format_table(["layout", "jobs/s per repeat", "median", "vs as is"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
