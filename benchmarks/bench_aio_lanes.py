"""hubstore.aio's lanes against greenlets over psycopg's async driver, on PostgreSQL.

The alternative to lanes (threads doing the sync store's work) is SQLAlchemy's asyncio
extension: an AsyncEngine on psycopg's async connections, the store's sync code run by
``greenlet_spawn`` over ``AsyncEngine.sync_engine``, as AsyncSession does. This times
heartbeats and audit_log calls, one task at a time and with 8 concurrent tasks, sync,
through lanes and through greenlets (docs/waiting.md has the figures). Needs
``pip install greenlet``.

    python benchmarks/bench_aio_lanes.py postgresql+psycopg://postgres@127.0.0.1/bench
    # without the WAL flush per commit, to see the per-call overhead
    python benchmarks/bench_aio_lanes.py \
        "postgresql+psycopg://postgres@127.0.0.1/bench?options=-csynchronous_commit%3Doff"

The database is migrated if needed; rows are added (agent ``bench-a``, messages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.jsontype import dumps

AGENT = "bench-a"
Timing = tuple[float, float]  # µs per heartbeat, per audit_log


def sync_run(url: str, calls: int) -> Timing:
    with HubStore.open(url) as store:
        started = time.perf_counter()
        for _ in range(calls):
            store.refresh_lease(AGENT)
        middle = time.perf_counter()
        for i in range(calls):
            store.audit_log("event", AGENT, "b", "t", payload={"i": i})
        ended = time.perf_counter()
    return (middle - started) / calls * 1e6, (ended - middle) / calls * 1e6


async def _timed(calls: int, tasks: int, heartbeat: Callable[[], Awaitable[Any]],
                 audit: Callable[[int], Awaitable[Any]]) -> Timing:
    async def beats(k: int) -> None:
        for _ in range(k, calls, tasks):
            await heartbeat()

    async def writes(k: int) -> None:
        for i in range(k, calls, tasks):
            await audit(i)

    started = time.perf_counter()
    await asyncio.gather(*(beats(k) for k in range(tasks)))
    middle = time.perf_counter()
    await asyncio.gather(*(writes(k) for k in range(tasks)))
    ended = time.perf_counter()
    return (middle - started) / calls * 1e6, (ended - middle) / calls * 1e6


async def lanes_run(url: str, calls: int, tasks: int) -> Timing:
    async with await AsyncHubStore.open(url) as store:
        return await _timed(
            calls, tasks, lambda: store.refresh_lease(AGENT),
            lambda i: store.audit_log("event", AGENT, "b", "t", payload={"i": i}))


async def greenlet_run(url: str, calls: int, tasks: int) -> Timing:
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.util import greenlet_spawn

    # hubstore's own engine writes JSON with dumps too (its json_serializer).
    engine = create_async_engine(url, json_serializer=dumps,
                                 json_deserializer=json.loads)
    try:
        store: HubStore = await greenlet_spawn(HubStore, engine.sync_engine)
        return await _timed(
            calls, tasks, lambda: greenlet_spawn(store.refresh_lease, AGENT),
            lambda i: greenlet_spawn(store.audit_log, "event", AGENT, "b", "t",
                                     payload={"i": i}))
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a PostgreSQL URL (postgresql+psycopg://...)")
    parser.add_argument("--calls", type=int, default=400, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians reported")
    args = parser.parse_args()
    with HubStore.open(args.url, auto_migrate=True) as store:
        store.register_agent(AGENT, "codex")
    runs: dict[str, list[Timing]] = {}
    kinds: list[tuple[str, Callable[[], Timing]]] = [
        ("sync", lambda: sync_run(args.url, args.calls)),
        ("lanes, 1 task", lambda: asyncio.run(lanes_run(args.url, args.calls, 1))),
        ("greenlets, 1 task", lambda: asyncio.run(greenlet_run(args.url, args.calls, 1))),
        ("lanes, 8 tasks", lambda: asyncio.run(lanes_run(args.url, args.calls, 8))),
        ("greenlets, 8 tasks", lambda: asyncio.run(greenlet_run(args.url, args.calls, 8))),
    ]
    for _ in range(args.rounds):
        for name, run in kinds:
            runs.setdefault(name, []).append(run())
    print(f"{'':20} {'heartbeat':>12} {'audit_log':>12}   (wall µs per call, median)")
    for name, timings in runs.items():
        beat = statistics.median(t[0] for t in timings)
        audit = statistics.median(t[1] for t in timings)
        print(f"{name:20} {beat:12,.0f} {audit:12,.0f}")


if __name__ == "__main__":
    main()
