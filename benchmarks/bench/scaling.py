"""The scaling run: the standard workloads on a fresh database per background size."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.common import Log, emit, format_table, kept_fraction, medians, rate_cell
from bench.databases import Target, display_url
from bench.store_calls import bench_database


def scaling_table(
    scales: Sequence[int], by_scale: dict[str, dict[str, float]], kept: dict[str, float]
) -> str:
    header = ["workload", *[f"{scale:,} rows" for scale in scales], "kept"]
    rows = [
        [name, *(rate_cell(by_scale[str(scale)][name]) for scale in scales), f"{fraction:.1%}"]
        for name, fraction in kept.items()
    ]
    return format_table(header, rows)


def run_scaling(args: argparse.Namespace, target: Target, log: Log) -> None:
    by_scale: dict[str, dict[str, float]] = {}
    for scale in args.scales:
        log(f"scale {scale:,}")
        measured = bench_database(target, scale, args.workloads, args.n, args.repeat, log)
        by_scale[str(scale)] = medians(measured.runs)
    names = list(by_scale[str(args.scales[0])])
    kept = {
        name: round(kept_fraction([by_scale[str(s)][name] for s in args.scales]), 4)
        for name in names
    }
    payload = {
        "mode": "scaling",
        "url": display_url(target.last_url),
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
