"""What every lane shares: timing, statistics, the tables and the JSON line, the log."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.workloads import Op, Store

Log = Callable[[str], None]


def make_logger(quiet: bool) -> Callable[[str], None]:
    def log(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return log


def time_workload(store: Store, op: Op, ops: int) -> float:
    """Run `ops` operations with i = 0 .. ops - 1; return ops/s."""
    started = time.perf_counter()
    for i in range(ops):
        op(store, i)
    elapsed = time.perf_counter() - started
    return ops / elapsed if elapsed > 0 else float("inf")


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": round(min(values), 1), "median": round(statistics.median(values), 1),
            "max": round(max(values), 1)}


def medians(runs: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(statistics.median(values), 1) for name, values in runs.items()}


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The median of the per-repeat ratios: repeat k of hubstore and repeat k of the
    reference run seconds apart, so a machine whose load changes between repeats moves
    both figures of a pair alike (the ratio of medians pairs runs minutes apart)."""
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def kept_fraction(rates: Sequence[float]) -> float:
    """Speed at the largest scale as a fraction of the speed at the smallest."""
    return rates[-1] / rates[0] if rates[0] else 0.0


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


def rate_cell(value: float) -> str:
    return f"{value:,.1f}"


def ratio_cell(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:,.0f}x"


def spread_cells(values: Sequence[float]) -> list[str]:
    s = spread(values)
    return [rate_cell(s["min"]), rate_cell(s["median"]), rate_cell(s["max"])]


def emit(payload: dict[str, Any], table: str, json_only: bool) -> None:
    print(json.dumps(payload), flush=True)
    if not json_only:
        print()
        print(table, flush=True)
