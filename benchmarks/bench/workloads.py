"""The standard workloads: each operation one call on the store, in running order.

Every workload runs OPS operations, i = 0 .. OPS-1, the same ones on every repeat and in
every lane (reference_driver.mjs makes the same calls on the reference store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hubstore.reflexion import learn_from_error, lookup_solution

AGENT_COUNT = 200

Store = Any  # a HubStore or one of its units of work (duck-typed facade)
Op = Callable[[Store, int], None]


def agent_name(i: int) -> str:
    return f"agent-{i % AGENT_COUNT}"


def agent_topics(i: int) -> list[str]:
    return ["t.a", f"t.{i % 7}"]


def op_register_agent(store: Store, i: int) -> None:
    store.register_agent(agent_name(i), "codex", topics=agent_topics(i))


def op_heartbeat(store: Store, i: int) -> None:
    store.refresh_lease(agent_name(i))


def op_audit_log(store: Store, i: int) -> None:
    if i % 3 == 0:
        to_agent, topic = "topic:t.a", "t.a"
    else:
        to_agent, topic = agent_name(i + 1), f"t.{i % 7}"
    store.audit_log(
        type="event",
        from_agent=agent_name(i),
        to_agent=to_agent,
        topic=topic,
        payload={"i": i, "text": "benchmark message"},
    )


def op_poll_for_agent(store: Store, i: int) -> None:
    store.poll_for_agent(agent_name(i))


def op_assign_lifecycle(store: Store, i: int) -> None:
    job = store.create_assign(supervisor_agent="lead", worker_agent=agent_name(i), task=f"t{i}")
    store.update_assign_status(job.job_id, "running")
    store.update_assign_status(job.job_id, "succeeded", result={"ok": True})


def _reflexion_context(i: int) -> dict[str, str]:
    return {"cli": "codex", "agent": f"agent-{i % 5}"}


def op_reflexion_learn(store: Store, i: int) -> None:
    learn_from_error(
        store,
        f"TypeError: cannot read x{i % 300} of undefined at /src/a.js:{i}:3",
        "guard it",
        context=_reflexion_context(i),
        success=(i % 2 == 0),
    )


def op_reflexion_lookup_ctx(store: Store, i: int) -> None:
    lookup_solution(
        store,
        f"TypeError: cannot read x{i % 300} of undefined at /lib/b.js:{i + 7}:9",
        context=_reflexion_context(i),
    )


def op_sweep_and_stats(store: Store, i: int) -> None:
    store.get_hub_stats()
    store.get_audit_stats()


# In running order: each workload only relies on the ones before it.
WORKLOADS: dict[str, Op] = {
    "register_agent": op_register_agent,
    "heartbeat": op_heartbeat,
    "audit_log": op_audit_log,
    "poll_for_agent": op_poll_for_agent,
    "assign_lifecycle": op_assign_lifecycle,
    "reflexion_learn": op_reflexion_learn,
    "reflexion_lookup_ctx": op_reflexion_lookup_ctx,
    "sweep_and_stats": op_sweep_and_stats,
}
# Workloads that need others to have run first (they are run, and timed, but not reported).
DEPENDS: dict[str, tuple[str, ...]] = {
    "heartbeat": ("register_agent",),
    "poll_for_agent": ("register_agent", "audit_log"),
    "reflexion_lookup_ctx": ("reflexion_learn",),
    "sweep_and_stats": ("register_agent", "audit_log"),
}


def plan_workloads(selected: Iterable[str]) -> list[str]:
    """The selected workloads and what they depend on, in running order."""
    needed: set[str] = set()
    stack = list(selected)
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(DEPENDS.get(name, ()))
    return [name for name in WORKLOADS if name in needed]
