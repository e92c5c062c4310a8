"""Child processes of the waiting tests: ``python -m tests.waiting.waiting_child ROLE URL ARGS``.

Each role opens its own store, does its part, and prints one JSON document on stdout.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

from hubstore import HubStore
from hubstore.ids import now_ms


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def assign_latency(store: HubStore, worker: str, count: str) -> dict[str, Any]:
    """Wait for ``count`` jobs; each latency is claim time minus the payload's sent_ms."""
    print(json.dumps({"ready": True}), flush=True)
    latencies = []
    for _ in range(int(count)):
        job = store.wait_for_assign(worker, timeout_s=10)
        assert job is not None, "no job within 10 s"
        latencies.append(time.time() * 1000 - job.payload["sent_ms"])
    return {"latencies_ms": latencies}


def feed_latency(store: HubStore, agent: str, count: str) -> dict[str, Any]:
    feed = store.message_feed(agent)
    print(json.dumps({"ready": True}), flush=True)
    latencies: list[float] = []
    while len(latencies) < int(count):
        batch = feed.next(timeout_s=10)
        assert batch, "no message within 10 s"
        latencies.extend(time.time() * 1000 - m.payload["sent_ms"] for m in batch)
    return {"latencies_ms": latencies}


def claimer(store: HubStore, worker: str, idle_s: str) -> dict[str, Any]:
    """Claim until no job came for ``idle_s`` seconds."""
    print(json.dumps({"ready": True}), flush=True)
    claimed = []
    while (job := store.wait_for_assign(worker, timeout_s=float(idle_s))) is not None:
        claimed.append(job.job_id)
    return {"claimed": claimed}


def crash_claimer(store: HubStore, worker: str) -> dict[str, Any]:
    """Claim the worker's job, say which, then hang until killed (kill -9 by the test)."""
    print(json.dumps({"ready": True}), flush=True)
    job = store.wait_for_assign(worker, timeout_s=10)
    assert job is not None, "no job within 10 s"
    print(json.dumps({"job_id": job.job_id, "attempt": job.attempt}), flush=True)
    time.sleep(3600)
    return {}


def toucher(store: HubStore, worker: str, seconds: str, every_s: str) -> dict[str, Any]:
    """Claim the worker's job and keep touching it for ``seconds``, then finish it."""
    print(json.dumps({"ready": True}), flush=True)
    job = store.wait_for_assign(worker, timeout_s=10)
    assert job is not None, "no job within 10 s"
    print(json.dumps({"job_id": job.job_id}), flush=True)
    touches, end = 0, time.monotonic() + float(seconds)
    while time.monotonic() < end:
        job = store.touch_assign(job.job_id, worker, job.attempt)
        touches += 1
        time.sleep(float(every_s))
    outcome = store.finish_assign(job, "succeeded", result={"touches": touches})
    return {"touches": touches, "event": outcome.event, "attempt": outcome.job.attempt}


def quota_worker(store: HubStore, worker: str, batch: str, seed: str, work_ms: str,
                 all_queued: str) -> dict[str, Any]:
    """Claim (``batch`` at a time; 1: claim_next_assign) and finish the worker's jobs,
    each after a moment's work (``work_ms`` / 2 to ``work_ms``), until the file
    ``all_queued`` exists and none of the worker's jobs is left queued."""
    rng = random.Random(seed)
    print(json.dumps({"ready": True}), flush=True)
    done: list[str] = []
    while not (Path(all_queued).exists()
               and not store.list_assigns(worker_agent=worker, status="queued", limit=1)):
        if int(batch) == 1:
            one = store.wait_for_assign(worker, timeout_s=0.2)
            jobs = [] if one is None else [one]
        else:
            jobs = store.wait_for_assigns(worker, int(batch), timeout_s=0.2)
        for job in jobs:
            time.sleep(rng.uniform(0.5, 1) * float(work_ms) / 1000)  # the work
            store.finish_assign(job, "succeeded")
            done.append(job.job_id)
    return {"done": done}


class Rollback(Exception):
    pass


def producer(store: HubStore, name: str, consumer: str, transactions: str) -> dict[str, Any]:
    """Write transactions of 1-3 messages, some for the consumer (direct or on its topic),
    some for others; about one in five rolls back. Each transaction sleeps between its
    writes, so that commits interleave and ids go out of commit order."""
    rng = random.Random(name)
    committed: list[list[str]] = []  # per committed transaction, the consumer's ids
    print(json.dumps({"ready": True}), flush=True)
    for i in range(int(transactions)):
        mine: list[str] = []
        roll_back = rng.random() < 0.2
        try:
            with store.unit_of_work() as uow:
                for k in range(rng.randint(1, 3)):
                    to, topic = rng.choice([(consumer, "x"), ("topic:followed", "followed"),
                                            ("someone-else", "x"),
                                            ("topic:unfollowed", "unfollowed"),
                                            ("topic:followed", "other")])
                    message = uow.audit_log("event", name, to, topic,
                                            payload={"i": i, "k": k})
                    if to == consumer or (to == "topic:followed" and topic == "followed"):
                        mine.append(message.id)
                    time.sleep(rng.random() * 0.01)
                if roll_back:
                    raise Rollback
        except Rollback:
            continue
        if mine:
            committed.append(mine)
    return {"committed": committed}


def resume(store: HubStore, agent: str, cursor: str) -> dict[str, Any]:
    feed = store.message_feed(agent, cursor=cursor)
    got: list[str] = []
    while batch := feed.next(timeout_s=0.5):
        got.extend(m.id for m in batch)
    return {"ids": got, "cursor": feed.cursor}


def idle(store: HubStore, what: str, seconds: str) -> dict[str, Any]:
    """Wait ``seconds`` with nothing happening; report CPU time and table looks."""
    looks = 0
    original = store.unit_of_work

    def counting(write: bool = True, **options: Any) -> Any:
        nonlocal looks
        looks += 1
        return original(write, **options)

    store.unit_of_work = counting  # type: ignore[method-assign]
    feed = store.message_feed("idle-agent")
    looks = 0
    start_cpu, start = cpu_s(), time.monotonic()
    if what == "assign":
        result: Any = store.wait_for_assign("idle-worker", timeout_s=float(seconds))
    else:
        result = feed.next(timeout_s=float(seconds))
    wall = time.monotonic() - start
    return {"cpu_s": cpu_s() - start_cpu, "wall_s": wall, "looks": looks,
            "result": None if result is None else len(result)}


async def async_assign_latency(url: str, worker: str, count: str) -> dict[str, Any]:
    """assign_latency through hubstore.aio (its own store: roles named async_* get a URL)."""
    from hubstore.aio import AsyncHubStore

    async with await AsyncHubStore.open(url) as store:
        print(json.dumps({"ready": True}), flush=True)
        latencies = []
        for _ in range(int(count)):
            job = await store.wait_for_assign(worker, timeout_s=10)
            assert job is not None, "no job within 10 s"
            latencies.append(time.time() * 1000 - job.payload["sent_ms"])
    return {"latencies_ms": latencies}


async def async_feed_latency(url: str, agent: str, count: str) -> dict[str, Any]:
    """feed_latency through hubstore.aio."""
    from hubstore.aio import AsyncHubStore

    async with await AsyncHubStore.open(url) as store:
        feed = await store.message_feed(agent)
        print(json.dumps({"ready": True}), flush=True)
        latencies: list[float] = []
        while len(latencies) < int(count):
            batch = await feed.next(timeout_s=10)
            assert batch, "no message within 10 s"
            latencies.extend(time.time() * 1000 - m.payload["sent_ms"] for m in batch)
    return {"latencies_ms": latencies}


def main() -> None:
    role, url, *args = sys.argv[1:]
    if role.startswith("async_"):
        result: dict[str, Any] = asyncio.run(globals()[role](url, *args))
    else:
        with HubStore.open(url) as store:
            result = globals()[role](store, *args)
    result["now_ms"] = now_ms()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
