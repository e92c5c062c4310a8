"""The standard run: each workload's store calls timed per repeat, in every lane asked
for (hubstore, the reference, the raw driver, async), and its table.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.async_lane import load_async_store, run_async_plan
from bench.background import prepare
from bench.common import (
    Log,
    emit,
    format_table,
    medians,
    paired_ratio,
    rate_cell,
    ratio_cell,
    spread,
    spread_cells,
    time_workload,
)
from bench.databases import Target, copy_database, display_url, drop_copy, remove_sqlite_files
from bench.raw_driver import RAW_WORKLOADS, RawDriverHub
from bench.reference import Reference, reference_copy, reference_for
from bench.workloads import WORKLOADS, Store, plan_workloads
from bench.yardstick import machine_yardstick, yardstick_line
from hubstore import HubStore


def run_plan(url: str, plan: Sequence[str], ops: int, raw_driver: bool = False
             ) -> dict[str, float]:
    """Every workload of the plan, in order, on the store at `url`: ops/s of each. With
    ``raw_driver``, RAW_WORKLOADS run on RawDriverHub (the others, which they rely on,
    through hubstore) and only theirs are returned."""
    with HubStore.open(url) as store:
        calls: Store = RawDriverHub(store) if raw_driver else store
        rates = {name: time_workload(calls, WORKLOADS[name], ops) for name in plan}
    return {name: rate for name, rate in rates.items()
            if not raw_driver or name in RAW_WORKLOADS}


@dataclass
class Measured:
    """Every repeat's ops/s per workload, for hubstore and (when run) the others."""

    runs: dict[str, list[float]]
    reference_runs: dict[str, list[float]] | None = None
    raw_runs: dict[str, list[float]] | None = None
    async_runs: dict[str, list[float]] | None = None
    async_note: str | None = None
    async_tasks: int = 1
    preload_s: float = 0.0
    reference_template: Path | None = None


def _append(into: dict[str, list[float]], rates: dict[str, float]) -> None:
    for name, rate in rates.items():
        into.setdefault(name, []).append(rate)


def bench_database(target: Target, preload_rows: int, workloads: Sequence[str], ops: int,
                   repeats: int, log: Log, reference: Reference | None = None,
                   with_async: bool = False, async_tasks: int = 1,
                   raw_driver: bool = False) -> Measured:
    """Preload templates, then per repeat time the workloads on fresh copies."""
    plan = plan_workloads(workloads)
    url, ref_path, preload_s = prepare(target, preload_rows, reference, log)
    measured = Measured(runs={}, preload_s=preload_s, reference_template=ref_path,
                        async_tasks=async_tasks)
    store_class = None
    if with_async:
        store_class, measured.async_note = load_async_store()
        if measured.async_note:
            log(f"  {measured.async_note}")
    for k in range(1, repeats + 1):
        copy = copy_database(url, k)
        try:
            rates = run_plan(copy, plan, ops)
        finally:
            drop_copy(copy, target.keep)
        _append(measured.runs, rates)
        for name, rate in rates.items():
            log(f"  run {k}/{repeats} hubstore  {name:<22} {rate:>12,.1f} ops/s")
        if raw_driver:
            copy = copy_database(url, k)
            try:
                raw_rates = run_plan(copy, plan, ops, raw_driver=True)
            finally:
                drop_copy(copy, target.keep)
            measured.raw_runs = measured.raw_runs or {}
            _append(measured.raw_runs, raw_rates)
            for name, rate in raw_rates.items():
                log(f"  run {k}/{repeats} raw sqlite3 {name:<20} {rate:>12,.1f} ops/s")
        if reference is not None and ref_path is not None:
            ref_copy = reference_copy(ref_path, k)
            try:
                out = reference.run({"mode": "workloads", "db": str(ref_copy),
                                     "workloads": plan, "n": ops})
            finally:
                if not target.keep:
                    remove_sqlite_files(ref_copy)
            measured.reference_runs = measured.reference_runs or {}
            _append(measured.reference_runs, out["rates"])
            for name, rate in out["rates"].items():
                log(f"  run {k}/{repeats} reference {name:<22} {rate:>12,.1f} ops/s")
        if store_class is not None:
            copy = copy_database(url, k)
            try:
                arates = run_async_plan(store_class, copy, plan, ops, async_tasks)
            finally:
                drop_copy(copy, target.keep)
            measured.async_runs = measured.async_runs or {}
            _append(measured.async_runs, arates)
    reported = [name for name in WORKLOADS if name in workloads]
    measured.runs = {name: measured.runs[name] for name in reported}
    if measured.reference_runs is not None:
        measured.reference_runs = {name: measured.reference_runs[name] for name in reported}
    if measured.async_runs is not None:
        measured.async_runs = {name: measured.async_runs[name] for name in reported
                               if name in measured.async_runs}
    if measured.raw_runs is not None:
        measured.raw_runs = {name: measured.raw_runs[name] for name in reported
                             if name in measured.raw_runs}
    return measured


def results_table(measured: Measured, published: dict[str, float] | None) -> str:
    header = ["workload", "hubstore min", "median", "max"]
    ref = measured.reference_runs
    if ref is not None:
        header += ["reference min", "median", "max", "ratio", "paired"]
    elif published is not None:
        header += ["published reference (other machine)", "ratio"]
    if measured.async_runs:
        tasks = measured.async_tasks
        header += [f"async median ({tasks} task{'s' if tasks > 1 else ''})", "async/sync"]
    raw = measured.raw_runs
    if raw is not None:
        header += ["raw sqlite3 median", "hubstore/raw"]
        if ref is not None:
            header += ["raw/reference"]
    rows = []
    for name, values in measured.runs.items():
        median = statistics.median(values)
        row = [name, *spread_cells(values)]
        if ref is not None:
            row += [*spread_cells(ref[name]), ratio_cell(median / statistics.median(ref[name])),
                    ratio_cell(paired_ratio(values, ref[name]))]
        elif published is not None:
            row += [f"{published[name]:,.0f}", ratio_cell(median / published[name])]
        if measured.async_runs:
            avalues = measured.async_runs.get(name)
            row += ([rate_cell(statistics.median(avalues)),
                     f"{statistics.median(avalues) / median:.2f}x"] if avalues else ["-", "-"])
        if raw is not None:
            rvalues = raw.get(name)
            if rvalues:
                row += [rate_cell(statistics.median(rvalues)),
                        f"{median / statistics.median(rvalues):.2f}"]
                if ref is not None:
                    row += [ratio_cell(statistics.median(rvalues) / statistics.median(ref[name]))]
            else:
                row += ["-", "-"] + (["-"] if ref is not None else [])
        rows.append(row)
    return format_table(header, rows)


def run_standard(args: argparse.Namespace, target: Target, log: Log) -> None:
    measured = bench_database(target, args.preload, args.workloads, args.n, args.repeat, log,
                              args.reference, args.async_, args.async_tasks, args.raw_driver)
    yardstick = machine_yardstick()
    results = medians(measured.runs)
    payload: dict[str, Any] = {
        "url": display_url(target.last_url),
        "preload": args.preload,
        "n": args.n,
        "repeat": args.repeat,
        "repeats": "fresh copy of the preloaded template per repeat, same operations",
        "results": results,
        "spread": {name: spread(values) for name, values in measured.runs.items()},
        "preload_seconds": round(measured.preload_s, 2),
        "yardstick_ops_per_s": yardstick,
    }
    published = None
    if measured.reference_runs is not None:
        reference = medians(measured.reference_runs)
        payload["reference"] = reference
        payload["reference_source"] = "measured"
        payload["reference_dir"] = str(args.reference.hub_dir)
        payload["reference_template"] = str(measured.reference_template)
        payload["reference_spread"] = {
            name: spread(values) for name, values in measured.reference_runs.items()}
        payload["ratio"] = {name: float(f"{results[name] / reference[name]:.4g}")
                            for name in results}
        payload["paired_ratio"] = {
            name: float(f"{paired_ratio(values, measured.reference_runs[name]):.4g}")
            for name, values in measured.runs.items()}
    else:
        published = reference_for(args.preload)
        if published is not None:
            payload["reference"] = {name: published[name] for name in results}
            payload["reference_source"] = "published"
    if measured.async_runs is not None:
        payload["async"] = medians(measured.async_runs)
        payload["async_tasks"] = measured.async_tasks
        payload["async_spread"] = {
            name: spread(values) for name, values in measured.async_runs.items()}
    if measured.async_note:
        payload["async_note"] = measured.async_note
    if measured.raw_runs is not None:
        raw = medians(measured.raw_runs)
        payload["raw_driver"] = raw
        payload["raw_driver_spread"] = {
            name: spread(values) for name, values in measured.raw_runs.items()}
        payload["share_of_raw"] = {name: float(f"{results[name] / raw[name]:.4g}")
                                   for name in raw}
        if measured.reference_runs is not None:
            payload["raw_ratio"] = {
                name: float(f"{raw[name] / payload['reference'][name]:.4g}") for name in raw}
    table = results_table(measured, published)
    title = (f"ops/s, {args.n} ops, {args.repeat} repeats (min/median/max), "
             f"{args.preload:,} background rows")
    notes = [measured.async_note] if measured.async_note else []
    emit(payload, "\n".join([title, table, "", yardstick_line(yardstick), *notes]),
         args.json_only)
