"""Random sequences of assign-job operations against a small in-memory model.

The model restates the rules of the issue and REFERENCE.md section 3 on its own (it does
not import ``hubstore.assign_rules``): the transition table, the hub's report, retry,
sweep and claim rules, which messages each step records and which status changes the
listeners hear of. After every operation the store's rows, errors and results must match
the model; at the end of each sequence, so must every recorded message.

Each backend runs the sequences inside one store, emptied between examples.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select

from hubstore import HubStore
from hubstore.errors import (
    AssignNotFound,
    HubStoreError,
    IllegalTransition,
    RetryExhausted,
    StaleAttempt,
    WorkerMismatch,
)
from hubstore.models import AssignJob, Message, table_of

WORKERS = ("w1", "w2")
STATES = ("queued", "running", "succeeded", "failed", "timed_out")
#: What a worker may report, and what the hub makes of it.
REPORTED = {
    "running": "running", "in_progress": "running", "succeeded": "succeeded",
    "success": "succeeded", "completed": "succeeded", "failed": "failed", "error": "failed",
    "timed_out": "timed_out", "timeout": "timed_out",
}
#: Plain (not retry) moves: queued/running -> running/succeeded/failed/timed_out.
ALLOWED = {
    "queued": {"running", "succeeded", "failed", "timed_out"},
    "running": {"running", "succeeded", "failed", "timed_out"},
    "succeeded": set(), "failed": set(), "timed_out": set(),
}
FINAL = {"succeeded", "failed", "timed_out"}
MISSING = "no-such-job"
FAR_FUTURE = 10**15
#: Each due sweep is this much later than the one before: past the deadline (at most a
#: day after it) of every job the earlier sweep retried.
SWEEP_STEP = 10**10

Result = tuple[type[HubStoreError] | None, Any]


@dataclass
class ModelJob:
    job_id: str
    worker: str
    priority: int
    max_retries: int
    seq: int
    status: str = "queued"
    attempt: int = 1
    retry_count: int = 0
    dispatched: bool = True  # last_message_id points at the newest handoff
    messages: Counter[str] = field(default_factory=lambda: Counter(handoff=1))


class Model:
    """The state machine as the issue states it."""

    def __init__(self) -> None:
        self.jobs: dict[str, ModelJob] = {}
        #: The due sweeps so far (each at a later time).
        self.sweeps = 0
        self.heard: dict[str, list[tuple[str, int]]] = defaultdict(list)

    def pick(self, ref: int) -> ModelJob | None:
        order = list(self.jobs.values())
        return order[ref % len(order)] if order else None

    def create(self, job_id: str, worker: str, priority: int, max_retries: int) -> None:
        job = ModelJob(job_id, worker, priority, max_retries, seq=len(self.jobs))
        self.jobs[job_id] = job
        self.heard[job_id].append(("queued", 1))

    def _set(self, job: ModelJob, status: str) -> None:
        if status != job.status:
            self.heard[job.job_id].append((status, job.attempt))
        job.status = status

    def _requeue(self, job: ModelJob, *, dispatch: bool) -> None:
        job.attempt += 1
        job.retry_count += 1
        self._set(job, "queued")
        job.dispatched = dispatch
        if dispatch:
            job.messages.update(("handoff", "retry_scheduled"))

    def claim(self, worker: str) -> Result:
        queued = [j for j in self.jobs.values() if j.worker == worker and j.status == "queued"]
        if not queued:
            return None, None
        job = min(queued, key=lambda j: (-j.priority, j.seq))
        self._set(job, "running")
        return None, job.job_id

    def report(self, job: ModelJob | None, status: str, worker: str | None,
               attempt: int | None) -> Result:
        if job is None:
            return AssignNotFound, None
        if worker is not None and worker != job.worker:
            return WorkerMismatch, None
        if attempt is not None and attempt != job.attempt:
            return StaleAttempt, None
        target = REPORTED[status]
        if target == "running":
            if job.status not in ("queued", "running"):
                return IllegalTransition, None
            self._set(job, "running")
            job.messages["progress"] += 1
            return None, ("progress", job.status, job.attempt)
        if job.status == target:
            return None, ("completed", job.status, job.attempt)  # the same report again
        if target not in ALLOWED[job.status]:
            return IllegalTransition, None
        self._set(job, target)
        if target != "succeeded" and job.retry_count < job.max_retries:
            self._requeue(job, dispatch=True)
            return None, ("retry_scheduled", job.status, job.attempt)
        job.messages["completed"] += 1
        return None, ("completed", job.status, job.attempt)

    def schedule_retry(self, job: ModelJob | None) -> Result:
        if job is None:
            return AssignNotFound, None
        if job.retry_count >= job.max_retries:
            return RetryExhausted, None
        if job.status not in ("failed", "timed_out"):
            return IllegalTransition, None
        self._requeue(job, dispatch=True)
        return None, (job.status, job.attempt)

    def update(self, job: ModelJob | None, target: str) -> Result:
        if job is None:
            return None, None
        if job.status == target and target in FINAL:
            return None, job.status
        if target not in ALLOWED[job.status]:
            return IllegalTransition, None
        self._set(job, target)
        return None, job.status

    def store_retry(self, job: ModelJob | None) -> Result:
        if job is None:
            return None, None
        if job.status not in ("failed", "timed_out"):
            return IllegalTransition, None
        self._requeue(job, dispatch=False)
        return None, (job.status, job.attempt)

    def sweep(self, due: bool) -> Result:
        timed_out = retried = 0
        if due:
            for job in [j for j in self.jobs.values() if j.status in ("queued", "running")]:
                self._set(job, "timed_out")
                timed_out += 1
                if job.retry_count < job.max_retries:
                    self._requeue(job, dispatch=True)
                    retried += 1
                else:
                    job.messages["completed"] += 1
        return None, {"timed_out": timed_out, "retried": retried}


def attempt_for(job: ModelJob | None, mode: str) -> int | None:
    if job is None or mode == "none":
        return None if mode == "none" else 1
    return {"current": job.attempt, "stale": job.attempt - 1, "ahead": job.attempt + 1}[mode]


def worker_for(job: ModelJob | None, mode: str) -> str | None:
    if mode == "none":
        return None
    own = job.worker if job is not None else "w1"
    return own if mode == "own" else next(w for w in WORKERS if w != own)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Result:
    try:
        return None, fn(*args, **kwargs)
    except HubStoreError as error:
        return type(error), None


def step(store: HubStore, model: Model, op: tuple[Any, ...]) -> None:
    """Run one operation on the store and on the model; their answers must agree."""
    kind = op[0]
    if kind == "create":
        _, worker, priority, max_retries = op
        job = store.assign_async("lead", worker, priority=priority, max_retries=max_retries)
        model.create(job.job_id, worker, priority, max_retries)
        return
    if kind == "sweep":
        model.sweeps += op[1]
        when = FAR_FUTURE + model.sweeps * SWEEP_STEP if op[1] else 0
        real: tuple[Any, Any] = call(store.sweep_timed_out_assigns, now_ms=when)
        assert real == model.sweep(op[1]), op
        return
    if kind == "claim":
        error, job = call(store.claim_next_assign, op[1])
        assert (error, job.job_id if job else None) == model.claim(op[1]), op
        return
    target = model.pick(op[1]) if kind != "missing" else None
    job_id = target.job_id if target else MISSING
    if kind in ("report", "missing"):
        status, attempt_mode, worker_mode = op[2:]
        attempt, worker = attempt_for(target, attempt_mode), worker_for(target, worker_mode)
        error, outcome = call(store.report_assign_result, job_id, status,
                              worker_agent=worker, attempt=attempt)
        got: tuple[Any, ...] | None = None if outcome is None else (
            outcome.event, outcome.job.status, outcome.job.attempt)
        assert (error, got) == model.report(target, status, worker, attempt), op
    elif kind == "retry":
        error, job = call(store.schedule_assign_retry, job_id)
        got = None if job is None else (job.status, job.attempt)
        assert (error, got) == model.schedule_retry(target), op
    elif kind == "update":
        error, job = call(store.update_assign_status, job_id, op[2])
        assert (error, job.status if job else None) == model.update(target, op[2]), op
    elif kind == "store_retry":
        error, job = call(store.retry_assign, job_id)
        got = None if job is None else (job.status, job.attempt)
        assert (error, got) == model.store_retry(target), op
    else:  # pragma: no cover - the strategy makes no other kinds
        raise AssertionError(op)


def rows(store: HubStore) -> dict[str, AssignJob]:
    with store.unit_of_work(write=False) as uow:
        return {job.job_id: job for job in uow.session.scalars(select(AssignJob))}


def check_rows(store: HubStore, model: Model, heard: list[tuple[str, str, int]]) -> None:
    found = rows(store)
    assert set(found) == set(model.jobs)
    for job_id, expected in model.jobs.items():
        job = found[job_id]
        assert (job.status, job.attempt, job.retry_count) == (
            expected.status, expected.attempt, expected.retry_count), job_id
    told: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for job_id, status, attempt in heard:
        told[job_id].append((status, attempt))
    assert told == {k: v for k, v in model.heard.items() if v}


def check_messages(store: HubStore, model: Model) -> None:
    with store.unit_of_work(write=False) as uow:
        messages = list(uow.session.scalars(
            select(Message).order_by(Message.created_at_ms, Message.id)))
    counted: dict[str, Counter[str]] = defaultdict(Counter)
    newest_handoff: dict[str, str] = {}
    for message in messages:
        if message.type == "handoff":
            job_id = message.payload["assign_job_id"]
            counted[job_id]["handoff"] += 1
            newest_handoff[job_id] = message.id
        else:
            counted[message.payload["job_id"]][message.payload["event"]] += 1
    found = rows(store)
    for job_id, expected in model.jobs.items():
        assert counted[job_id] == expected.messages, job_id
        want = newest_handoff[job_id] if expected.dispatched else None
        assert found[job_id].last_message_id == want, job_id


JOB_REF = st.integers(0, 50)
CREATE = st.tuples(st.just("create"), st.sampled_from(WORKERS), st.sampled_from([1, 5, 9]),
                   st.integers(0, 2))
REPORT = st.tuples(st.just("report"), JOB_REF, st.sampled_from(sorted(REPORTED)),
                   st.sampled_from(["current", "current", "stale", "ahead", "none"]),
                   st.sampled_from(["own", "own", "own", "other", "none"]))
#: Each kind of operation, and how often it is drawn (workers mostly report).
KINDS: dict[str, tuple[int, st.SearchStrategy[tuple[Any, ...]]]] = {
    "create": (2, CREATE),
    "claim": (2, st.tuples(st.just("claim"), st.sampled_from(WORKERS))),
    "report": (5, REPORT),
    "retry": (1, st.tuples(st.just("retry"), JOB_REF)),
    "update": (1, st.tuples(st.just("update"), JOB_REF, st.sampled_from(STATES))),
    "store_retry": (1, st.tuples(st.just("store_retry"), JOB_REF)),
    "sweep": (1, st.tuples(st.just("sweep"), st.booleans())),
    "missing": (1, st.tuples(st.just("missing"), JOB_REF,
                             st.sampled_from(["succeeded", "running"]),
                             st.sampled_from(["current", "none"]),
                             st.sampled_from(["own", "none"]))),
}
OPERATION = st.sampled_from([k for k, (weight, _) in KINDS.items() for _ in range(weight)]
                            ).flatmap(lambda kind: KINDS[kind][1])
SEQUENCES = st.tuples(CREATE, st.lists(OPERATION, min_size=5, max_size=30)).map(
    lambda first_and_rest: [first_and_rest[0], *first_and_rest[1]])
EXAMPLES = {"sqlite": 300, "postgresql": 100}


def test_random_operations_match_the_model(store: HubStore, backend: str) -> None:
    heard: list[tuple[str, str, int]] = []
    store.on_assign_status_change(
        lambda event, job: heard.append((event["job_id"], event["status"], job.attempt)))

    @settings(max_examples=EXAMPLES[backend], deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(operations=SEQUENCES)
    def run(operations: list[tuple[Any, ...]]) -> None:
        with store.unit_of_work() as uow:
            uow.connection.execute(delete(table_of(Message)))
            uow.connection.execute(delete(table_of(AssignJob)))
        heard.clear()
        model = Model()
        for op in operations:
            step(store, model, op)
            check_rows(store, model, heard)
        check_messages(store, model)

    run()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_model_catches_a_wrong_store(store: HubStore) -> None:
    """The comparison can fail: a job moved behind the model's back is noticed."""
    model = Model()
    step(store, model, ("create", "w1", 5, 0))
    [job_id] = model.jobs
    store.update_assign_status(job_id, "running")
    with pytest.raises(AssertionError):
        check_rows(store, model, [])
