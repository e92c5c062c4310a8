"""The whole hub: agents served in real time, at each history size (``--hub``).

A simulated hub of N agents (reference_driver.mjs hubSecond runs the same mix). Per
simulated second t, agent a with phase p = t + a heartbeats when p % 10 == 0, polls
when p is even and writes an audit message when p is odd (0.5 a second each), runs an
assign lifecycle (create, running, succeeded) when p % 50 == 0, learns from an error
when p % 100 == 0 and looks one up when p % 100 == 50. The hub reads its figures once a
second and sweeps stale agents every 5 seconds. With N a multiple of 100, every
simulated second holds the same mix, so any whole number of them is a fair sample.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

from bench.background import prepare
from bench.common import Log, emit, format_table, rate_cell, ratio_cell, spread
from bench.databases import Target, copy_database, display_url, drop_copy, remove_sqlite_files
from bench.raw_driver import RawDriverHub
from bench.reference import Reference, reference_copy
from bench.workloads import Store, agent_topics, op_reflexion_learn, op_reflexion_lookup_ctx
from hubstore import HubStore


@dataclass
class HubCounters:
    messages: int = 0
    errors: int = 0
    lookups: int = 0


def _hub_agent(a: int) -> str:
    return f"hub-{a}"


def hub_second(store: Store, t: int, agents: int, counters: HubCounters) -> int:
    """One simulated second of the whole hub; the number of store calls made."""
    ops = 0
    for a in range(agents):
        p = t + a
        name = _hub_agent(a)
        if p % 10 == 0:
            store.refresh_lease(name)
            ops += 1
        if p % 2 == 0:
            store.poll_for_agent(name)
        else:
            k = counters.messages
            counters.messages += 1
            to_topic = k % 3 == 0
            store.audit_log(
                type="event", from_agent=name,
                to_agent="topic:t.a" if to_topic else _hub_agent((a + 1) % agents),
                topic="t.a" if to_topic else f"t.{a % 7}", payload={"i": k, "text": "hub message"},
            )
        ops += 1
        if p % 50 == 0:
            job = store.create_assign(supervisor_agent="hub-lead", worker_agent=name,
                                      task=f"h{t}-{a}")
            store.update_assign_status(job.job_id, "running")
            store.update_assign_status(job.job_id, "succeeded", result={"ok": True})
            ops += 3
        if p % 100 == 0:
            op_reflexion_learn(store, counters.errors)
            counters.errors += 1
            ops += 1
        if p % 100 == 50:
            op_reflexion_lookup_ctx(store, counters.lookups)
            counters.lookups += 1
            ops += 1
    store.get_hub_stats()
    store.get_audit_stats()
    ops += 2
    if t % 5 == 0:
        store.sweep_stale_agents()
        ops += 1
    return ops


def rss_bytes() -> int:
    """This process's resident set size now."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # no /proc: the peak is the best there is
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_hub(url: str, agents: int, seconds: int, budget_s: float,
            ops_target: int | None, raw_driver: bool = False) -> dict[str, Any]:
    """The whole hub on the store at `url`, as fast as it goes.

    Runs whole simulated seconds until `seconds` of them or `budget_s` wall seconds are
    done, or, with `ops_target`, until that many store calls (RSS is sampled after the
    first tenth of them, the warm-up, and at the end). With `raw_driver` (SQLite), the
    hub's polls, audit_log calls and heartbeats run on Python's sqlite3 alone
    (RawDriverHub).
    """
    with HubStore.open(url) as store:
        for a in range(agents):
            store.register_agent(_hub_agent(a), "codex", topics=agent_topics(a))
        calls: Store = RawDriverHub(store) if raw_driver else store
        counters = HubCounters()
        ops = t = 0
        warm_rss: int | None = None
        peak = 0
        started = time.perf_counter()
        while True:
            ops += hub_second(calls, t, agents, counters)
            t += 1
            if ops_target is not None:
                if warm_rss is None and ops >= ops_target // 10:
                    warm_rss = rss_bytes()
                if warm_rss is not None and t % 100 == 0:
                    peak = max(peak, rss_bytes())
                if ops >= ops_target:
                    break
            elif t >= seconds or time.perf_counter() - started >= budget_s:
                break
        wall = time.perf_counter() - started
        end_rss = rss_bytes()
    result: dict[str, Any] = {
        "sim_seconds": t, "agents": agents, "ops": ops, "wall_seconds": round(wall, 3),
        "agent_seconds_per_s": round(agents * t / wall, 1), "rss_bytes": end_rss,
    }
    if warm_rss is not None:
        result["rss_after_warmup_bytes"] = warm_rss
        result["rss_peak_bytes"] = max(peak, end_rss)
        result["rss_growth"] = round(end_rss / warm_rss - 1, 4)
        result["rss_flat"] = abs(end_rss / warm_rss - 1) <= 0.10
    return result


def _mib(value: int) -> str:
    return f"{value / 2**20:,.1f} MiB"


def run_hub_mode(args: argparse.Namespace, target: Target, log: Log) -> None:
    reference: Reference | None = args.reference
    by_scale: dict[str, dict[str, Any]] = {}
    for scale in args.scales:
        url, ref_path, preload_s = prepare(target, scale, reference, log)
        hub_runs: list[dict[str, Any]] = []
        raw_runs: list[dict[str, Any]] = []
        ref_runs: list[dict[str, Any]] = []
        for k in range(1, args.repeat + 1):
            copy = copy_database(url, k)
            try:
                run = run_hub(copy, args.agents, args.seconds, args.budget, args.ops)
            finally:
                drop_copy(copy, target.keep)
            hub_runs.append(run)
            log(f"  {scale:,} rows, run {k}: hubstore {run['agent_seconds_per_s']:,.1f} "
                f"agent-s/s ({run['sim_seconds']} s simulated, {run['ops']:,} calls)")
            if args.raw_driver:
                copy = copy_database(url, k)
                try:
                    raw = run_hub(copy, args.agents, args.seconds, args.budget, args.ops,
                                  raw_driver=True)
                finally:
                    drop_copy(copy, target.keep)
                raw_runs.append(raw)
                log(f"  {scale:,} rows, run {k}: raw sqlite3 "
                    f"{raw['agent_seconds_per_s']:,.1f} agent-s/s")
            if reference is not None and ref_path is not None:
                ref_copy = reference_copy(ref_path, k)
                try:
                    out = reference.run({
                        "mode": "hub", "db": str(ref_copy), "agents": args.agents,
                        "seconds": run["sim_seconds"] if args.ops else args.seconds,
                        "budget_s": args.budget})
                finally:
                    if not target.keep:
                        remove_sqlite_files(ref_copy)
                ref_runs.append(out)
                log(f"  {scale:,} rows, run {k}: reference {out['agent_seconds_per_s']:,.1f} "
                    f"agent-s/s ({out['sim_seconds']} s simulated, {out['ops']:,} calls)")
        entry: dict[str, Any] = {
            "preload_seconds": round(preload_s, 2),
            "hubstore": spread([r["agent_seconds_per_s"] for r in hub_runs]),
            "hubstore_runs": hub_runs,
        }
        if raw_runs:
            entry["raw_driver"] = spread([r["agent_seconds_per_s"] for r in raw_runs])
            entry["raw_driver_runs"] = raw_runs
            entry["share_of_raw"] = float(
                f"{entry['hubstore']['median'] / entry['raw_driver']['median']:.4g}")
        if ref_runs:
            entry["reference"] = spread([r["agent_seconds_per_s"] for r in ref_runs])
            entry["reference_runs"] = ref_runs
            entry["ratio"] = float(
                f"{entry['hubstore']['median'] / entry['reference']['median']:.4g}")
            if raw_runs:
                entry["raw_ratio"] = float(
                    f"{entry['raw_driver']['median'] / entry['reference']['median']:.4g}")
        by_scale[str(scale)] = entry
    payload = {
        "mode": "hub", "url": display_url(target.last_url), "agents": args.agents,
        "repeat": args.repeat, "seconds": args.seconds, "budget_s": args.budget,
        "ops_target": args.ops, "scales": list(args.scales), "results": by_scale,
        "figure": "agent-seconds served per wall second (agents served in real time)",
    }
    header = ["history rows", "hubstore min", "median", "max"]
    if args.raw_driver:
        header += ["raw sqlite3 min", "median", "max", "hubstore/raw"]
    if reference is not None:
        header += ["reference min", "median", "max", "ratio"]
        if args.raw_driver:
            header += ["raw/reference"]
    rows = []
    for scale in args.scales:
        entry = by_scale[str(scale)]
        h = entry["hubstore"]
        row = [f"{scale:,}", rate_cell(h["min"]), rate_cell(h["median"]), rate_cell(h["max"])]
        if "raw_driver" in entry:
            w = entry["raw_driver"]
            row += [rate_cell(w["min"]), rate_cell(w["median"]), rate_cell(w["max"]),
                    f"{entry['share_of_raw']:.2f}"]
        if "reference" in entry:
            r = entry["reference"]
            row += [rate_cell(r["min"]), rate_cell(r["median"]), rate_cell(r["max"]),
                    ratio_cell(entry["ratio"])]
            if "raw_ratio" in entry:
                row += [ratio_cell(entry["raw_ratio"])]
        rows.append(row)
    lines = [f"whole hub, {args.agents} agents: agent-seconds served per wall second",
             format_table(header, rows)]
    if args.raw_driver:
        lines.append("raw sqlite3: the polls, audit_log calls and heartbeats on Python's "
                     "sqlite3 alone, with hubstore's own statements (RawDriverHub)")
    for scale in args.scales:
        for run in by_scale[str(scale)]["hubstore_runs"]:
            if "rss_after_warmup_bytes" in run:
                lines.append(
                    f"RSS ({scale:,} rows, {run['ops']:,} calls): after warm-up "
                    f"{_mib(run['rss_after_warmup_bytes'])}, end {_mib(run['rss_bytes'])}, "
                    f"peak {_mib(run['rss_peak_bytes'])}: {run['rss_growth']:+.1%} "
                    f"({'flat' if run['rss_flat'] else 'NOT flat'}, within 10%)")
    emit(payload, "\n".join(lines), args.json_only)
