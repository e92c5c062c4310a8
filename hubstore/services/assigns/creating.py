"""Creating and reading jobs: ``create_assign``, ``assign_async`` and ``assign_many`` (the
job and its handoff), ``get_assign``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack, cast

from hubstore import assign_rules as rules
from hubstore.ids import now_ms, uuidv7
from hubstore.models import ASSIGN_STATUSES, TIMEOUT_FROM, AssignJob
from hubstore.services.assigns.batches import batch_items
from hubstore.services.assigns.handoffs import create_and_dispatch, dispatch
from hubstore.services.assigns.limits import check_limit_key
from hubstore.services.assigns.rows import insert_job, read_job
from hubstore.transaction import Scope
from hubstore.types import AssignStatus, NewAssign, TimeoutFrom
from hubstore.validation import (
    as_number,
    clamp,
    counter,
    json_value,
    lookup_key,
    optional_id,
    refuse_unknown,
    require_duration,
    require_enum,
    require_id,
    require_int,
    require_key,
    require_text,
    require_time,
)


def create_assign(scope: Scope, supervisor_agent: str, worker_agent: str,
                  topic: str = "assign.job", task: str = "", payload: Any = None,
                  status: AssignStatus = "queued", attempt: int = 1, retry_count: int = 0,
                  max_retries: int = 0, priority: object = 5, ttl_ms: object = 600_000,
                  timeout_ms: object = 600_000, deadline_ms: int | None = None,
                  trace_id: str | None = None, correlation_id: str | None = None,
                  last_message_id: str | None = None, result: Any = None,
                  error: Any = None, job_id: str | None = None,
                  not_before_ms: int | None = None, retry_backoff_ms: int = 0,
                  limit_key: str | None = None, unique_key: str | None = None,
                  timeout_from: TimeoutFrom = "create") -> AssignJob:
    """A new job. Priority, timeout and ttl are clamped, as in the reference
    (JavaScript's Number() reads them: a non-number falls back to the default).

    The counters follow the reference's ``Math.max(1, Number(attempt) || 1)`` (and 0
    for retry_count and max_retries), but a count that is not a whole number is
    refused. ``topic`` and ``task`` must be strings (None or "" for the default).
    A payload that is None (or a JavaScript-falsy 0, "" or False) is stored as {}.

    hubstore's own (not in the reference): ``not_before_ms``, a time before which the
    job is not claimed (its default deadline counts from then); ``retry_backoff_ms``,
    how long its first retry waits before it may be claimed again (each later retry
    twice as long as the one before, at most 24 hours); ``limit_key``, the assign
    limit it counts against (``set_assign_limit``; None: unlimited); ``unique_key``,
    a key no two queued or running jobs share: while one holds it, this call writes
    nothing and returns that job, its ``deduplicated`` True; ``timeout_from``, when its
    timeout starts: "create" (the reference's: its deadline is set now, so time queued
    counts), or "claim" (a run timeout: no deadline while queued; each claim sets it to
    the start + ``timeout_ms``).
    """
    # (the keyword arguments as given: the signature above is their one list)
    fields = cast(NewAssign, {name: value for name, value in locals().items()
                              if name in CREATE_FIELDS})
    make_row = new_job(supervisor_agent, worker_agent, fields)
    # (one INSERT ... RETURNING; with a unique key, a look for its holder may follow)
    with (scope.one_statement() if unique_key is None else scope.transaction()) as tx:
        return insert_job(tx, make_row(now_ms()))


def new_job(supervisor_agent: str, worker_agent: str, fields: NewAssign
            ) -> Callable[[int], dict[str, Any]]:
    """A new job's fields (those not given take create_assign's defaults) checked
    (ValidationError before anything is written), and the function that makes the job's
    row (attribute-keyed) at a given time."""
    given: dict[str, Any] = {**JOB_DEFAULTS, **fields}
    status, job_id, limit_key, unique_key = (
        given["status"], given["job_id"], given["limit_key"], given["unique_key"])
    trace_id, correlation_id = given["trace_id"], given["correlation_id"]
    last_message_id, result, error = (
        given["last_message_id"], given["result"], given["error"])
    require_id(supervisor_agent, "supervisor_agent")
    require_id(worker_agent, "worker_agent")
    require_enum(status, ASSIGN_STATUSES, "status")
    body = json_value(given["payload"], "payload", default={})
    json_value(result, "result")
    json_value(error, "error")
    optional_id(job_id, "job_id")
    optional_id(trace_id, "trace_id")
    optional_id(correlation_id, "correlation_id")
    optional_id(last_message_id, "last_message_id")
    topic = require_key(given["topic"], "topic") if given["topic"] else "assign.job"
    task = require_text(given["task"], "task") if given["task"] else ""
    first_attempt = counter(given["attempt"], "attempt", default=1, minimum=1)
    retries = counter(given["retry_count"], "retry_count", default=0, minimum=0)
    retry_limit = counter(given["max_retries"], "max_retries", default=0, minimum=0)
    priority, ttl_ms = given["priority"], given["ttl_ms"]
    timeout = rules.clamp_timeout(given["timeout_ms"])
    not_before = (None if given["not_before_ms"] is None
                  else require_time(given["not_before_ms"], "not_before_ms"))
    backoff = require_duration(given["retry_backoff_ms"], "retry_backoff_ms")
    if limit_key is not None:
        check_limit_key(limit_key)
    if unique_key is not None:
        require_id(unique_key, "unique_key")
    deadline_ms = given["deadline_ms"]
    deadline = None if deadline_ms is None else as_number(deadline_ms)
    if deadline is not None:
        deadline = require_int(int(deadline), "deadline_ms")
    timeout_from = given["timeout_from"]
    require_enum(timeout_from, TIMEOUT_FROM, "timeout_from")
    # A run timeout (from the claim): no deadline while queued, unless one is given.
    runs_only = timeout_from == "claim" and status == rules.CLAIMABLE

    def make_row(now: int) -> dict[str, Any]:
        return {
            "job_id": job_id or uuidv7(),
            "supervisor_agent": supervisor_agent, "worker_agent": worker_agent,
            "topic": topic, "task": task,
            # The reference's `payload || {}`: JavaScript's falsy values become {},
            # but [] (truthy there) stays [].
            "payload": {} if body in (0, "", False) else body,
            "status": status,
            "attempt": first_attempt,
            "retry_count": retries,
            "max_retries": retry_limit,
            "priority": clamp(priority, 5, 1, 9),
            "ttl_ms": rules.clamp_timeout(ttl_ms, timeout), "timeout_ms": timeout,
            "deadline_ms": (int(deadline) if deadline is not None else None if runs_only
                            else max(now, not_before or now) + timeout),
            "trace_id": trace_id or uuidv7(), "correlation_id": correlation_id or uuidv7(),
            "last_message_id": last_message_id, "result": result, "error": error,
            "created_at_ms": now, "updated_at_ms": now,
            "started_at_ms": now if status == "running" else None,
            "completed_at_ms": now if status in rules.TERMINAL else None,
            "last_retry_at_ms": now if retries > 0 else None,
            "not_before_ms": not_before, "retry_backoff_ms": backoff,
            "limit_key": limit_key, "unique_key": unique_key, "limit_share": None,
            "timeout_from": timeout_from, "claimed_by": None,
        }

    return make_row


#: What each field of a new job (types.NewAssign) defaults to: create_assign's signature.
JOB_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in inspect.signature(create_assign).parameters.items()
    if name not in ("scope", "supervisor_agent", "worker_agent")}
#: The keyword arguments assign_async passes on to create_assign.
CREATE_FIELDS = frozenset(JOB_DEFAULTS)
if frozenset(NewAssign.__annotations__) != CREATE_FIELDS:  # (checked once, at import)
    raise TypeError("types.NewAssign must list create_assign's keyword arguments")


def get_assign(scope: Scope, job_id: str) -> AssignJob | None:
    """The job, or None."""
    lookup_key(job_id, "job_id")
    with scope.one_read() as tx:
        return read_job(tx, job_id)


def assign_async(scope: Scope, supervisor_agent: str, worker_agent: str,
                 **fields: Unpack[NewAssign]) -> AssignJob:
    """Create a job and record its dispatch to the worker, in one transaction.

    ``fields`` are create_assign's keyword arguments; an unknown one is a
    ValidationError (nothing is written). With a ``unique_key`` that a queued or running
    job holds, nothing is written and that job is returned (``job.deduplicated``)."""
    check_fields(fields)
    [job] = assign_rows(scope, [new_job(supervisor_agent, worker_agent, fields)])
    return job


def assign_rows(scope: Scope, make_rows: Sequence[Callable[[int], dict[str, Any]]]
            ) -> list[AssignJob]:
    """Write each job (made by ``make_rows``) and its dispatch, in one transaction; one
    statement where the dialect writes both at once and no job has a unique key (the
    jobs one a key holds are returned as found, not written again)."""
    now = now_ms()
    rows = [make_row(now) for make_row in make_rows]
    if scope.sql.writable_ctes and all(row["unique_key"] is None for row in rows):
        with scope.one_statement() as tx:  # one round trip in autocommit
            return create_and_dispatch(tx, rows)
    with scope.transaction() as tx:
        jobs = []
        for row in rows:
            job = insert_job(tx, row)
            jobs.append(job if job.deduplicated else dispatch(tx, job, "create", now))
        return jobs


def assign_many(scope: Scope, supervisor_agent: str, worker_agent: str,
                jobs: Sequence[Mapping[str, Any]]) -> list[AssignJob]:
    """``assign_async`` for each of ``jobs`` (each a mapping of its keyword arguments:
    task, payload, priority, ...), all in one transaction: every job and its dispatch
    message, or none of them (a bad one is refused before anything is written)."""
    items = batch_items(jobs, "jobs")
    for item in items:
        check_fields(item)
    return assign_rows(scope,
                       [new_job(supervisor_agent, worker_agent, cast(NewAssign, item))
                        for item in items])


def check_fields(fields: Mapping[str, Any], what: str = "assign_async") -> None:
    """Refuse keyword arguments create_assign does not take (ValidationError)."""
    refuse_unknown(fields, CREATE_FIELDS, what)
