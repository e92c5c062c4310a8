"""The command line of benchmarks/bench_store.py: its options, their checks, the modes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sqlalchemy import make_url

from bench.claims import run_claim
from bench.common import make_logger
from bench.databases import NonEmptyDatabase, Target
from bench.peers import DEFAULT_SYSTEMS, check_url, run_peers, system_list
from bench.reference import Reference, ReferenceFailed
from bench.scaling import run_scaling
from bench.store_calls import run_standard
from bench.whole_hub import run_hub_mode
from bench.workloads import WORKLOADS

DEFAULT_SCALES = (10_000, 100_000, 1_000_000)
HUB_SCALES = (0, 100_000, 1_000_000)
SCALING_WORKLOADS = ("poll_for_agent", "sweep_and_stats", "reflexion_learn")


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


def _claim_lanes(value: str) -> list[str]:
    lanes = [lane.strip() for lane in value.split(",") if lane.strip()]
    known = ("no-rescue", "limited", "no-worker-counts")
    if not lanes or any(lane not in known for lane in lanes):
        raise argparse.ArgumentTypeError(f"expected lanes of {', '.join(known)}")
    return list(dict.fromkeys(lanes))


def _scale_list(value: str) -> list[int]:
    scales = [_count_arg(part) for part in value.split(",") if part.strip()]
    if not scales:
        raise argparse.ArgumentTypeError("expected a comma-separated list of row counts")
    return scales


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description,
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
        help="runs per workload (--claim: timed claim runs, each on an emptied "
        "database); the median is reported (default 3)",
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
        default=None,
        help="background rows per scale (default 10000,100000,1000000; --hub: 0,100000,1000000)",
    )
    parser.add_argument(
        "--claim", action="store_true", help="multi-process claim_next_assign benchmark"
    )
    parser.add_argument(
        "--claim-lanes", type=_claim_lanes, default=[], metavar="LANE,...",
        help="--claim: also these lanes, alternating with hubstore's, each on an emptied "
        "database: no-rescue (the claims' look for stalled jobs off, as before it had "
        "one), limited (every job under an assign limit that never binds), "
        "no-worker-counts (assign_jobs without revision 0015's per-worker count triggers)")
    parser.add_argument(
        "--claim-batch", type=int, default=1, metavar="N",
        help="--claim: jobs per claim (claim_next_assigns and report_assign_results; "
        "default 1: claim_next_assign and report_assign_result)")
    parser.add_argument(
        "--peers", action="store_true",
        help="job queues side by side on one PostgreSQL server (--url): hubstore's assign "
        "jobs beside pgqueuer and procrastinate (pip install -e '.[bench-peers]'), each "
        "on fresh databases; enqueue and claim+complete jobs/s, 1 and 10 per call",
    )
    parser.add_argument(
        "--systems", type=system_list, default=list(DEFAULT_SYSTEMS),
        help="--peers: comma-separated systems, hubstore among them (default "
        + ",".join(DEFAULT_SYSTEMS) + "; one not installed is skipped with the reason)",
    )
    parser.add_argument(
        "--processes",
        type=_count_arg,
        default=4,
        metavar="P",
        help="claiming processes (--peers: worker processes per system) (default 4)",
    )
    parser.add_argument(
        "--jobs", type=_count_arg, default=2000, metavar="J", help="jobs to claim (default 2000)"
    )
    parser.add_argument(
        "--reference",
        metavar="HUB_DIR",
        default=None,
        help="also run the workloads through the reference store in HUB_DIR (store.mjs, "
        "reflexion.mjs; ../shared/reference/setup.sh DIR makes one), under node, side by side",
    )
    parser.add_argument(
        "--hub", action="store_true",
        help="whole-hub workload: agents served in real time per --scales history size "
        "(default " + ",".join(str(s) for s in HUB_SCALES) + ")",
    )
    parser.add_argument(
        "--agents", type=_count_arg, default=100, metavar="N",
        help="--hub: simulated agents (default 100; a multiple of 100 keeps every second alike)",
    )
    parser.add_argument(
        "--seconds", type=_count_arg, default=600, metavar="S",
        help="--hub: simulated seconds per run at most (default 600)",
    )
    parser.add_argument(
        "--budget", type=float, default=20.0, metavar="WALL_S",
        help="--hub: wall seconds per run at most (default 20; whole simulated seconds)",
    )
    parser.add_argument(
        "--ops", type=_count_arg, default=None, metavar="CALLS",
        help="--hub: run until this many store calls instead (no budget), and report "
        "RSS after warm-up (the first tenth) against the end",
    )
    parser.add_argument(
        "--raw-driver", action="store_true",
        help="SQLite: also run heartbeat, audit_log and poll_for_agent (standard run; "
        "with --hub, the mix's) on Python's sqlite3 alone; --claim on PostgreSQL: also "
        "claim and finish on psycopg alone. hubstore's own statements with nothing "
        "around them: what the driver, the layout and the statements allow",
    )
    parser.add_argument(
        "--async", dest="async_", action="store_true",
        help="also time the workloads through hubstore.aio.AsyncHubStore (skipped with a "
        "note when it is not importable)",
    )
    parser.add_argument(
        "--async-tasks", type=int, default=1, metavar="T",
        help="--async: share each workload's calls among T concurrent tasks (default 1: "
        "one call at a time, as the sync run makes them)",
    )
    parser.add_argument("--keep-db", action="store_true",
                        help="keep the temporary SQLite files (--peers: its databases)")
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    return parser


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser(description)
    args = parser.parse_args(argv)
    if sum((args.scaling, args.claim, args.hub, args.peers)) > 1:
        parser.error("--scaling, --claim, --hub and --peers are separate modes")
    if args.n < 1 or args.repeat < 1:
        parser.error("-n and --repeat must be at least 1")
    if (args.claim or args.peers) and args.processes < 1:
        parser.error("--processes must be at least 1")
    if args.peers:
        if args.jobs < 1:
            parser.error("--jobs must be at least 1")
        if args.raw_driver or args.reference is not None or args.async_ or args.reset:
            parser.error("--peers goes without --raw-driver, --reference, --async and --reset")
        why = check_url(args.url)
        if why is not None:
            parser.error(why)
    if args.hub and (args.agents < 1 or args.seconds < 1 or args.budget <= 0):
        parser.error("--agents, --seconds and --budget must be positive")
    if (args.claim_lanes or args.claim_batch != 1) and not args.claim:
        parser.error("--claim-lanes and --claim-batch go with --claim")
    if not 1 <= args.claim_batch <= 1000:
        parser.error("--claim-batch is 1..1000")
    if args.raw_driver and args.scaling:
        parser.error("--raw-driver goes with the standard run, --hub or --claim")
    if args.raw_driver:
        backend = make_url(args.url).get_backend_name() if args.url else "sqlite"
        if not args.claim and backend != "sqlite":
            parser.error("--raw-driver (standard run, --hub) runs on SQLite files only")
        if args.claim and backend != "postgresql":
            parser.error("--claim --raw-driver runs on PostgreSQL (psycopg) only")
    if args.reference is not None and (args.scaling or args.claim):
        parser.error("--reference goes with the standard run and --hub")
    if args.scales is None:
        args.scales = list(HUB_SCALES if args.hub else DEFAULT_SCALES)
    if args.workloads is None:
        args.workloads = list(SCALING_WORKLOADS if args.scaling else WORKLOADS)
    if args.reference is not None:
        try:
            args.reference = Reference.check(args.reference)
        except ReferenceFailed as exc:
            parser.error(f"--reference: {exc}")
    return args


def main(description: str, argv: Sequence[str] | None = None) -> int:
    """The benchmark run with ``argv`` (default: the command line's); its exit status.
    ``description`` heads ``--help`` (bench_store.py's own)."""
    args = parse_args(description, argv)
    log = make_logger(args.json_only)
    target = Target(url=args.url, reset=args.reset, keep=args.keep_db)
    try:
        if args.peers:
            return run_peers(args, log)
        if args.claim:
            return run_claim(args, target, log)
        if args.scaling:
            run_scaling(args, target, log)
        elif args.hub:
            run_hub_mode(args, target, log)
        else:
            run_standard(args, target, log)
        return 0
    except NonEmptyDatabase as exc:
        print(f"bench_store: refusing to run: {exc}", file=sys.stderr)
        return 2
    except ReferenceFailed as exc:
        print(f"bench_store: {exc}", file=sys.stderr)
        return 3
    finally:
        target.cleanup()
