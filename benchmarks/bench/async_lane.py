"""The standard workloads through hubstore.aio.AsyncHubStore (when it is installed)."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.workloads import agent_name, agent_topics

AsyncOp = Callable[[Any, int], Awaitable[None]]


async def aop_register_agent(store: Any, i: int) -> None:
    await store.register_agent(agent_name(i), "codex", topics=agent_topics(i))


async def aop_heartbeat(store: Any, i: int) -> None:
    await store.refresh_lease(agent_name(i))


async def aop_audit_log(store: Any, i: int) -> None:
    if i % 3 == 0:
        to_agent, topic = "topic:t.a", "t.a"
    else:
        to_agent, topic = agent_name(i + 1), f"t.{i % 7}"
    await store.audit_log(type="event", from_agent=agent_name(i), to_agent=to_agent, topic=topic,
                          payload={"i": i, "text": "benchmark message"})


async def aop_poll_for_agent(store: Any, i: int) -> None:
    await store.poll_for_agent(agent_name(i))


async def aop_assign_lifecycle(store: Any, i: int) -> None:
    job = await store.create_assign(supervisor_agent="lead", worker_agent=agent_name(i),
                                    task=f"t{i}")
    await store.update_assign_status(job.job_id, "running")
    await store.update_assign_status(job.job_id, "succeeded", result={"ok": True})


async def aop_sweep_and_stats(store: Any, i: int) -> None:
    await store.get_hub_stats()
    await store.get_audit_stats()


# The reflexion workloads call module functions that take a sync store: left out.
ASYNC_WORKLOADS: dict[str, AsyncOp] = {
    "register_agent": aop_register_agent,
    "heartbeat": aop_heartbeat,
    "audit_log": aop_audit_log,
    "poll_for_agent": aop_poll_for_agent,
    "assign_lifecycle": aop_assign_lifecycle,
    "sweep_and_stats": aop_sweep_and_stats,
}


def load_async_store() -> tuple[Any, str | None]:
    """hubstore.aio.AsyncHubStore, or None and why not."""
    try:
        module = importlib.import_module("hubstore.aio")
    except ImportError as exc:
        return None, f"async skipped: hubstore.aio is not importable ({exc})"
    store_class = getattr(module, "AsyncHubStore", None)
    if store_class is None:
        return None, "async skipped: hubstore.aio has no AsyncHubStore"
    return store_class, None


async def _async_plan(store_class: Any, url: str, plan: Sequence[str],
                      ops: int, tasks: int = 1) -> dict[str, float]:
    """ops/s of each workload, its ``ops`` calls shared by ``tasks`` concurrent tasks."""
    rates: dict[str, float] = {}
    async with await store_class.open(url) as store:
        for name in plan:
            op = ASYNC_WORKLOADS.get(name)
            if op is None:
                continue

            async def share(k: int, op: AsyncOp = op) -> None:
                for i in range(k, ops, tasks):
                    await op(store, i)

            started = time.perf_counter()
            await asyncio.gather(*(share(k) for k in range(tasks)))
            elapsed = time.perf_counter() - started
            rates[name] = ops / elapsed if elapsed > 0 else float("inf")
    return rates


def run_async_plan(store_class: Any, url: str, plan: Sequence[str], ops: int,
                   tasks: int = 1) -> dict[str, float]:
    return asyncio.run(_async_plan(store_class, url, plan, ops, tasks))
