"""The handoff and supervisor messages: the handoff that dispatches a job to its worker, and
the events that tell its supervisor (as the reference writes them), in Python and, for
the one-statement paths, in SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Text, Update, bindparam, func, insert, literal_column, select

from hubstore.dialects import SqlDialect
from hubstore.execution import Prepared, from_row
from hubstore.ids import now_ms, uuidv7
from hubstore.jsontype import MAX_JSON_DEPTH
from hubstore.models import AssignJob, Message, table_of
from hubstore.results import AssignOutcome
from hubstore.services.assigns.moves import NOW, finish_statement
from hubstore.services.assigns.rows import announce, by_column, snapshot, write_guarded
from hubstore.services.messages import message_row, record_message
from hubstore.transaction import Transaction

EVENT_TOPIC = "assign.result"


#: A supervisor event's priority is at least this (the reference's Math.max(5, priority)).
EVENT_MIN_PRIORITY = 5


_jobs = table_of(AssignJob)


_messages = table_of(Message)


#: The hub's messages hold a job's payload, result or error one level down.
ENVELOPE_DEPTH = MAX_JSON_DEPTH + 1


def handoff_fields(job: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """The handoff message that dispatches ``job`` (its attribute-keyed values) to its
    worker, as the reference writes it: from the supervisor on the job's topic, with the
    job's priority, ttl, trace and correlation ids; payload kind 'assign.job'."""
    return {"type": "handoff", "from_agent": job["supervisor_agent"],
            "to_agent": job["worker_agent"], "topic": job["topic"],
            "priority": job["priority"], "ttl_ms": job["ttl_ms"], "trace_id": job["trace_id"],
            "correlation_id": job["correlation_id"], "status": "queued",
            "payload": {
                "kind": "assign.job", "reason": reason, "assign_job_id": job["job_id"],
                "attempt": job["attempt"], "retry_count": job["retry_count"],
                "max_retries": job["max_retries"], "timeout_ms": job["timeout_ms"],
                "supervisor_agent": job["supervisor_agent"],
                "worker_agent": job["worker_agent"], "task": job["task"],
                "payload": job["payload"]}}


def dispatch(tx: Transaction, job: AssignJob, reason: str, now: int | None = None
             ) -> AssignJob:
    """Record the handoff message to the worker and point last_message_id at it (the
    job updated at ``now``, else the clock)."""
    message = record_message(tx, **handoff_fields(snapshot(job), reason),
                             max_depth=ENVELOPE_DEPTH)
    return write_guarded(tx, job, {"last_message_id": message.id,
                                    "updated_at_ms": now_ms() if now is None else now})


@functools.cache
def _jobs_with_handoffs(sql: SqlDialect) -> Prepared:
    """New jobs and their handoff messages, any number, in one statement (the messages'
    INSERT in the WITH clause), each table's rows bound as one JSON array: one round
    trip in autocommit, and the same statement text (so the same server-side plan) for
    one job or a thousand. Where the dialect has no JSON rows (json_rows), None."""
    jobs, messages = sql.json_rows(_jobs, "p_jobs"), sql.json_rows(_messages, "p_messages")
    assert jobs is not None and messages is not None
    return Prepared(
        insert(_jobs).from_select(list(_jobs.c), jobs)
        .add_cte(insert(_messages).from_select(list(_messages.c), messages).cte("handoffs"))
        .returning(*_jobs.c), _jobs)


def create_and_dispatch(tx: Transaction, rows: Sequence[dict[str, Any]]) -> list[AssignJob]:
    """New jobs (their attribute-keyed rows) and their handoff messages, written in one
    statement (the rows assign_async's two steps write; where the dialect has JSON
    rows), the jobs in the order of ``rows``. The handoff's payload holds the job's
    checked values one level down (ENVELOPE_DEPTH), so it needs no check of its own:
    the rows' JSON is checked once more as it is written."""
    jobs: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for row in rows:
        message_id = uuidv7()
        row = {**row, "last_message_id": message_id}
        fields = handoff_fields(row, "create")
        jobs.append(by_column(row))
        messages.append(message_row(message_id, row["created_at_ms"], **fields))
    made = {job.job_id: job for job in _jobs_with_handoffs(tx.sql).instances(
        tx, {"p_jobs": jobs, "p_messages": messages}, AssignJob)}
    ordered = [made[row["job_id"]] for row in jobs]
    for job in ordered:
        announce(tx, job)
    return ordered


#: The job fields of a supervisor event (the reference's buildAssignSnapshot).
SNAPSHOT_FIELDS = (
    "job_id", "supervisor_agent", "worker_agent", "topic", "task", "status", "attempt",
    "retry_count", "max_retries", "timeout_ms", "deadline_ms", "trace_id", "correlation_id",
    "last_message_id", "result", "error", "updated_at_ms", "completed_at_ms",
)


def job_snapshot(job: AssignJob) -> dict[str, Any]:
    """The job as the reference shows it in events."""
    return {name: getattr(job, name) for name in SNAPSHOT_FIELDS}


def event_fields(job: AssignJob, event: str, **extra: Any) -> dict[str, Any]:
    """The supervisor's event message about ``job``, as the reference writes it: from the
    worker to the supervisor on EVENT_TOPIC, priority at least EVENT_MIN_PRIORITY, the
    job's ttl, trace and correlation ids; payload {event, the job's snapshot, extra}.
    (finish_with_event writes the same message in SQL.)"""
    return {"type": "event", "from_agent": job.worker_agent, "to_agent": job.supervisor_agent,
            "topic": EVENT_TOPIC, "priority": max(EVENT_MIN_PRIORITY, job.priority),
            "ttl_ms": job.ttl_ms, "trace_id": job.trace_id,
            "correlation_id": job.correlation_id, "status": "queued",
            "payload": {"event": event, **job_snapshot(job), **extra}}


def notify_supervisor(tx: Transaction, job: AssignJob, event: str,
                      **extra: Any) -> Message:
    """Record the event message (event_fields) from the worker to the supervisor."""
    return record_message(tx, **event_fields(job, event, **extra), max_depth=ENVELOPE_DEPTH)


def _snapshot_json(sql: SqlDialect, done: Any) -> Any:
    """The 'completed' event's payload as a JSON object, from the finished row: what
    notify_supervisor writes ({event, job_snapshot(job)}), built by the server."""
    columns = AssignJob.__mapper__.column_attrs
    pairs: list[tuple[str, Any]] = [("event", literal_column("'completed'"))]
    pairs += [(name, done.c[columns[name].columns[0].name]) for name in SNAPSHOT_FIELDS]
    payload = sql.json_object(pairs)
    assert payload is not None  # (reached where the dialect has writable CTEs only)
    return payload


def completed_event(sql: SqlDialect, done: Any, m_id: Any, m_corr: Any, m_trace: Any
                    ) -> Any:
    """The INSERT of the 'completed' event message (as notify_supervisor writes it) of
    each finished row of the WITH query ``done``; its id, and the correlation and trace
    ids a row without its own gets, are the SQL expressions given."""
    d = done.c
    return insert(_messages).from_select(
        ["id", "type", "from_agent", "to_agent", "topic", "priority", "ttl_ms",
         "created_at_ms", "expires_at_ms", "correlation_id", "trace_id", "payload_json",
         "status"],
        select(m_id, literal_column("'event'"), d.worker_agent,
               d.supervisor_agent, literal_column(f"'{EVENT_TOPIC}'"),
               func.greatest(EVENT_MIN_PRIORITY, d.priority), d.ttl_ms, NOW, NOW + d.ttl_ms,
               func.coalesce(func.nullif(d.correlation_id, ""), m_corr),
               func.coalesce(func.nullif(d.trace_id, ""), m_trace),
               _snapshot_json(sql, done), literal_column("'queued'"))
    ).cte("event")


@functools.cache
def finish_with_event(sql: SqlDialect, retryable: bool) -> Prepared:
    """PostgreSQL: the routine final report and its 'completed' event message (as
    notify_supervisor writes it) in one statement, so that a transaction in autocommit
    finishes a job in one round trip. Returns the finished job's row, or none."""
    done = cast(Update, finish_statement(sql, retryable).statement).cte("done")
    event = completed_event(sql, done, bindparam("m_id", type_=Text), bindparam("m_corr"),
                             bindparam("m_trace"))
    return Prepared(select(done).add_cte(event), _jobs)


def completed_outcome(done: AssignJob, message_id: str, now: int, correlation_id: str,
               trace_id: str) -> AssignOutcome:
    """The outcome of a routine final report written in SQL: the finished job and the
    event message the statement wrote (its correlation and trace ids the job's, else
    the ones given)."""
    fields = event_fields(done, "completed")
    fields.update(correlation_id=fields["correlation_id"] or correlation_id,
                  trace_id=fields["trace_id"] or trace_id)
    return AssignOutcome(done, "completed",
                         from_row(Message, message_row(message_id, now, **fields)))
