"""Throughput benchmark of the hubstore facade, beside the reference hub store.

Every operation is one call on ``HubStore`` (so one unit of work of its own) or, for the
reflexion workloads, one call of ``hubstore.reflexion.learn_from_error`` /
``lookup_solution``. Each workload runs OPS operations, timed with ``time.perf_counter``;
the figure is OPS / elapsed seconds.

Honest repeats: the background rows (``--preload``) are written once, before any timing,
into a template database (and, with ``--reference``, into a reference template with the
very same rows). Every repeat then runs on a fresh copy of the template (SQLite: a copy
of the file; PostgreSQL: ``CREATE DATABASE ... TEMPLATE``) and does the same operations
(i = 0 .. OPS-1), so repeats differ only by chance. The table gives min, median and max.

With ``--reference HUB_DIR`` the same workloads run through the reference store
(``HUB_DIR/store.mjs`` and ``reflexion.mjs``, under node, driven by
``benchmarks/reference_driver.mjs``) on a copy of its own template, in the same run,
repeat by repeat; ``../shared/reference/setup.sh DIR`` makes such a folder, and a
triflux install has one under ``node_modules/triflux/hub``.

Usage::

    # all workloads, fresh SQLite files in a temp dir, 1000 ops, 3 repeats
    python benchmarks/bench_store.py

    # side by side with the reference, 100,000 background messages
    python benchmarks/bench_store.py --preload 100000 --reference /tmp/ref/hub

    # also heartbeat, audit_log and poll_for_agent on Python's sqlite3 alone (an anchor)
    python benchmarks/bench_store.py --preload 100000 --reference /tmp/ref/hub --raw-driver

    # quick smoke test, machine-readable output
    python benchmarks/bench_store.py -n 300 --repeat 1 --json-only

    # PostgreSQL (the database must be empty, or pass --reset to wipe schema public)
    python benchmarks/bench_store.py --url postgresql+psycopg://postgres@127.0.0.1/bench --reset

    # how the speed holds up as the tables grow (fresh database per scale)
    python benchmarks/bench_store.py --scaling --scales 10000,100000,1000000

    # the whole hub: agents served in real time at 0, 100k and 1M history rows
    python benchmarks/bench_store.py --hub --scales 0,100000,1000000 --reference /tmp/ref/hub

    # the same, beside Python's sqlite3 running the hub's hottest calls alone
    python benchmarks/bench_store.py --hub --raw-driver --reference /tmp/ref/hub

    # one long whole-hub run: does the process's RSS stay flat?
    python benchmarks/bench_store.py --hub --scales 0 --ops 1000000 --repeat 1

    # P processes competing for J queued jobs of one worker, with statements per job
    python benchmarks/bench_store.py --claim --processes 4 --jobs 2000

    # the same claims also made on psycopg alone (its own statements, nothing around them)
    python benchmarks/bench_store.py --claim --raw-driver --url postgresql+psycopg://postgres@127.0.0.1/bench

    # job queues side by side on one PostgreSQL server, each on fresh databases:
    # hubstore's assign jobs, pgqueuer and procrastinate (pip install -e ".[bench-peers]");
    # enqueue and claim+complete jobs/s, 1 and 10 jobs per call, each job checked done once
    python benchmarks/bench_store.py --peers --processes 4 --jobs 2000 --repeat 3 \
        --url postgresql+psycopg://postgres@127.0.0.1:5432/postgres

    # async throughput beside sync (when hubstore.aio is installed)
    python benchmarks/bench_store.py --async

Output: one JSON line on stdout, then (unless ``--json-only``) a readable table.
Progress notes go to stderr (not with ``--json-only``).

The benchmark itself is the package ``bench`` beside this script, one module per lane
(``bench/__init__.py`` lists them); this file is its command line's entry point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench import cli  # the package beside this script (its folder is first on sys.path)


def main(argv: Sequence[str] | None = None) -> int:
    """The benchmark run with ``argv`` (default: the command line's); its exit status."""
    return cli.main(__doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
