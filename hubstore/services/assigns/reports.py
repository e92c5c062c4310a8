"""The hub's assign-job rules: dispatch, worker reports, retries, the timeout sweep
and claiming, each in one transaction and safe when many processes race."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    BigInteger,
    BindParameter,
    ColumnElement,
    Integer,
    Text,
    Update,
    any_,
    bindparam,
    column,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.errors import (
    AssignCancelled,
    AssignNotFound,
    HubStoreError,
    IllegalTransition,
    RetryExhausted,
    StaleAttempt,
    ValidationError,
    WorkerMismatch,
    describe,
)
from hubstore.execution import Prepared, from_row
from hubstore.ids import now_ms, uuidv7
from hubstore.jsontype import MAX_JSON_DEPTH
from hubstore.models import AssignJob, Message, table_of
from hubstore.results import AssignOutcome
from hubstore.services.assigns.moves import (
    NOW,
    announce,
    by_column,
    computed_from,
    create_assign,
    in_sources,
    insert_job,
    kept_by_rules,
    lock_job,
    move,
    new_job,
    retry,
    snapshot,
    terminal_times,
    write_guarded,
)
from hubstore.services.base import const, resolve_now
from hubstore.services.messages import message_row, record_message
from hubstore.transaction import Scope, Transaction
from hubstore.validation import (
    json_value,
    lookup_key,
    optional_int,
    refuse_unknown,
    require_bool,
    require_id,
    require_int,
    require_text,
)

EVENT_TOPIC = "assign.result"
#: A supervisor event's priority is at least this (the reference's Math.max(5, priority)).
EVENT_MIN_PRIORITY = 5
_jobs = table_of(AssignJob)
_messages = table_of(Message)
#: The hub's messages hold a job's payload, result or error one level down.
ENVELOPE_DEPTH = MAX_JSON_DEPTH + 1
#: The keys of one report of report_assign_results.
REPORT_FIELDS = frozenset({"job_id", "status", "worker_agent", "attempt", "result", "error",
                           "metadata"})
#: The keyword arguments assign_async passes on to create_assign.
CREATE_FIELDS = frozenset(inspect.signature(create_assign).parameters) - {
    "scope", "supervisor_agent", "worker_agent"}


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


def dispatch(uow: Transaction, job: AssignJob, reason: str, now: int | None = None
             ) -> AssignJob:
    """Record the handoff message to the worker and point last_message_id at it (the
    job updated at ``now``, else the clock)."""
    message = record_message(uow, **handoff_fields(snapshot(job), reason),
                             max_depth=ENVELOPE_DEPTH)
    return write_guarded(uow, job, {"last_message_id": message.id,
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


def create_and_dispatch(uow: Transaction, rows: Sequence[dict[str, Any]]) -> list[AssignJob]:
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
    made = {job.job_id: job for job in _jobs_with_handoffs(uow.sql).instances(
        uow, {"p_jobs": jobs, "p_messages": messages}, AssignJob)}
    ordered = [made[row["job_id"]] for row in jobs]
    for job in ordered:
        announce(uow, job)
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


def notify_supervisor(uow: Transaction, job: AssignJob, event: str,
                      **extra: Any) -> Message:
    """Record the event message (event_fields) from the worker to the supervisor."""
    return record_message(uow, **event_fields(job, event, **extra), max_depth=ENVELOPE_DEPTH)


def finish(uow: Transaction, job: AssignJob, target: str, patch: dict[str, Any],
           requested_by: str, now: int | None = None, **completed_extra: Any
           ) -> AssignOutcome:
    """Make a locked job terminal at ``now`` (else the clock); a failure with retries
    left is retried instead (its back-off and deadline counted from ``now``).

    The same terminal report again changes nothing and records nothing.
    """
    if job.status == target:
        return AssignOutcome(job, "completed")
    job = move(uow, job, target, patch, now=now)
    with computed_from(job):
        retries_left = job.retry_count < job.max_retries
    if target != "succeeded" and retries_left:
        job = dispatch(uow, retry(uow, job, {}, now), "retry", now)
        event = notify_supervisor(uow, job, "retry_scheduled", retry_reason=target,
                                  requested_by=requested_by)
        return AssignOutcome(job, "retry_scheduled", event)
    return AssignOutcome(job, "completed",
                         notify_supervisor(uow, job, "completed", **completed_extra))


_c = _jobs.c
#: The most jobs one batch call takes.
MAX_BATCH = 1_000


@functools.cache
def _finish_statement(sql: SqlDialect, retryable: bool) -> Prepared:
    """A worker's final report in one guarded statement, for the common case: the job
    is queued or running, on the reported attempt, for the reporting worker, (for a
    failure) has no retry left, and its row is one the rules leave as it is (as the
    direct move's, services/assigns.py). Anything else matches no row and takes the
    general path.
    """
    worker: BindParameter[str] = bindparam("p_worker", type_=Text)
    attempt: BindParameter[int] = bindparam("p_attempt", type_=Integer)
    no_retry = _c.retry_count >= _c.max_retries if retryable else None
    return Prepared(
        update(_jobs)
        .where(_c.job_id == bindparam("p_job_id"),
               *_routine_guards(sql, worker, attempt, no_retry))
        .values(_finished(bindparam("p_status"),
                          bindparam("p_result", type_=_c.result_json.type),
                          bindparam("p_error", type_=_c.error_json.type)))
        .returning(*_c), _jobs)


def _routine_guards(sql: SqlDialect, worker: Any, attempt: Any, no_retry: Any,
                    columns: Any = _c) -> list[ColumnElement[bool]]:
    """Where a final report is routine (see _finish_statement): the job is active, the
    reporting ``worker``'s and on the reported ``attempt`` (SQL expressions, NULL for
    any), ``no_retry`` holds (None: nothing to check), and its row is one the rules
    leave as it is. ``columns``: the job row's (default: assign_jobs')."""
    return [in_sources(rules.ACTIVE, columns),
            or_(worker.is_(None), columns.worker_agent == worker),
            or_(attempt.is_(None), columns.attempt == attempt),
            *([] if no_retry is None else [no_retry]),
            *kept_by_rules(sql, columns)]


def _finished(status: Any, result: Any, error: Any) -> dict[str, Any]:
    """The SET of a routine final report: the status, result and error given (SQL
    expressions), updated now, and the terminal times; the job's limit share forgotten
    (as revision 0017's trigger would)."""
    return {"status": status, "result_json": result, "error_json": error,
            "updated_at_ms": NOW, "limit_share": None, **terminal_times()}


def _snapshot_json(done: Any) -> Any:
    """jsonb_build_object of the 'completed' event's payload, from the finished row:
    what notify_supervisor writes ({event, job_snapshot(job)}), built by the server."""
    columns = AssignJob.__mapper__.column_attrs
    parts: list[Any] = [literal_column("'event'"), literal_column("'completed'")]
    for name in SNAPSHOT_FIELDS:
        parts += [literal_column(f"'{name}'"), done.c[columns[name].columns[0].name]]
    return func.jsonb_build_object(*parts)


def _completed_event(done: Any, m_id: Any, m_corr: Any, m_trace: Any) -> Any:
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
               _snapshot_json(done), literal_column("'queued'"))
    ).cte("event")


@functools.cache
def finish_with_event(sql: SqlDialect, retryable: bool) -> Prepared:
    """PostgreSQL: the routine final report and its 'completed' event message (as
    notify_supervisor writes it) in one statement, so that a unit of work in autocommit
    finishes a job in one round trip. Returns the finished job's row, or none."""
    done = cast(Update, _finish_statement(sql, retryable).statement).cte("done")
    event = _completed_event(done, bindparam("m_id", type_=Text), bindparam("m_corr"),
                             bindparam("m_trace"))
    return Prepared(select(done).add_cte(event), _jobs)


#: The fields of one report of finish_many's JSON records.
_REPORT_RECORD = (("job_id", Text()), ("status", Text()), ("worker", Text()),
                  ("attempt", BigInteger()), ("result", _c.result_json.type),
                  ("error", _c.error_json.type), ("m_id", Text()), ("m_corr", Text()),
                  ("m_trace", Text()))


@functools.cache
def _finish_many(sql: SqlDialect) -> Prepared | None:
    """PostgreSQL: many routine final reports (on distinct jobs, bound as one JSON array
    ``p_reports``) and their 'completed' events in one statement, all or none: the jobs
    are locked first, in job_id order, and the reports are written only when every one
    of them (``p_count``) is routine, as _finish_statement's guards say. Returns the
    finished rows (none when any report needs the general path). None where the dialect
    has no JSON records."""
    records = sql.json_records("p_reports", [column(name, type_) for name, type_
                                             in _REPORT_RECORD])
    if records is None:
        return None
    reports = select(*records.c).cte("reports")
    r = reports.c
    # The reported jobs are found, and locked in job_id order, by their primary key
    # alone: with the guards beside it, a planner without statistics (a table never
    # analyzed) read every active job through the status index instead, twice a batch.
    # The guards are then checked on the locked rows, as they are now.
    ids = bindparam("p_ids", type_=ARRAY(Text))
    locked = sql.materialized(select(_jobs).where(_c.job_id == any_(ids))
                              .order_by(_c.job_id).with_for_update(of=_jobs).cte("locked"))
    row = locked.c
    routine = (select(row.job_id).join_from(locked, reports, row.job_id == r.job_id)
               .where(*_routine_guards(sql, r.worker, r.attempt, or_(
                   r.status == const("succeeded"), row.retry_count >= row.max_retries), row))
               .cte("routine"))
    every_one = (select(func.count()).select_from(routine).scalar_subquery()
                 == bindparam("p_count", type_=Integer))
    done = (update(_jobs)
            .where(_c.job_id == any_(ids), _c.job_id == r.job_id, every_one)
            .values(_finished(r.status, r.result, r.error))
            .returning(*_c, r.m_id, r.m_corr, r.m_trace).cte("done"))
    event = _completed_event(done, done.c.m_id, done.c.m_corr, done.c.m_trace)
    return Prepared(select(*(done.c[c.name] for c in _c)).add_cte(event), _jobs)


def _completed(done: AssignJob, message_id: str, now: int, correlation_id: str,
               trace_id: str) -> AssignOutcome:
    """The outcome of a routine final report written in SQL: the finished job and the
    event message the statement wrote (its correlation and trace ids the job's, else
    the ones given)."""
    fields = event_fields(done, "completed")
    fields.update(correlation_id=fields["correlation_id"] or correlation_id,
                  trace_id=fields["trace_id"] or trace_id)
    return AssignOutcome(done, "completed",
                         from_row(Message, message_row(message_id, now, **fields)))


def finish_many_routine(uow: Transaction, reports: list[dict[str, Any]]
                        ) -> list[AssignOutcome] | None:
    """Checked final reports (keys of _REPORT_RECORD but the message ids) on distinct
    jobs, finished in one statement where the dialect has JSON records and every report
    is routine; None (nothing written) otherwise."""
    statement = _finish_many(uow.sql)
    if statement is None:
        return None
    now = now_ms()
    records = [{**report, "m_id": uuidv7(), "m_corr": uuidv7(), "m_trace": uuidv7()}
               for report in reports]
    done = {job.job_id: job for job in statement.instances(
        uow, {"p_reports": records, "p_ids": [record["job_id"] for record in records],
              "p_count": len(records), "p_now": now}, AssignJob)}
    if len(done) != len(records):
        if done:  # (the statement writes every report or none: never reached)
            raise HubStoreError(f"a batch of {len(records)} reports finished "
                                f"{len(done)} jobs; the batch statement must finish all "
                                "of them or none")
        return None
    outcomes = []
    for record in records:
        job = done[record["job_id"]]
        announce(uow, job)
        outcomes.append(_completed(job, record["m_id"], now, record["m_corr"],
                                   record["m_trace"]))
    return outcomes


def finish_routine(uow: Transaction, job_id: str, target: str, worker_agent: str | None,
                   attempt: int | None, result: Any, error: Any) -> AssignOutcome | None:
    """The routine final report (see _finish_statement) and its event, or None (nothing
    written) when the report needs the general path."""
    values = {"p_job_id": job_id, "p_worker": worker_agent or None, "p_attempt": attempt,
              "p_status": target, "p_result": result, "p_error": error, "p_now": now_ms()}
    if not uow.sql.writable_ctes:  # two statements here: the update, then the event
        done = _finish_statement(uow.sql, target != "succeeded").instance(
            uow, values, AssignJob)
        if done is None:
            return None
        announce(uow, done)
        return AssignOutcome(done, "completed", notify_supervisor(uow, done, "completed"))
    values.update(m_id=uuidv7(), m_corr=uuidv7(), m_trace=uuidv7())
    done = finish_with_event(uow.sql, target != "succeeded").instance(uow, values, AssignJob)
    if done is None:
        return None
    announce(uow, done)
    return _completed(done, values["m_id"], values["p_now"], values["m_corr"],
                      values["m_trace"])


def assign_async(scope: Scope, supervisor_agent: str, worker_agent: str, **fields: Any
                 ) -> AssignJob:
    """Create a job and record its dispatch to the worker, in one transaction.

    ``fields`` are create_assign's keyword arguments; an unknown one is a
    ValidationError (nothing is written). With a ``unique_key`` that a queued or running
    job holds, nothing is written and that job is returned (``job.deduplicated``)."""
    check_fields(fields)
    [job] = assign_rows(scope, [new_job(supervisor_agent, worker_agent, **fields)])
    return job


def assign_rows(scope: Scope, make_rows: Sequence[Callable[[int], dict[str, Any]]]
            ) -> list[AssignJob]:
    """Write each job (made by ``make_rows``) and its dispatch, in one transaction; one
    statement where the dialect writes both at once and no job has a unique key (the
    jobs one a key holds are returned as found, not written again)."""
    now = now_ms()
    rows = [make_row(now) for make_row in make_rows]
    if scope.sql.writable_ctes and all(row["unique_key"] is None for row in rows):
        with scope.one_statement() as uow:  # one round trip in autocommit
            return create_and_dispatch(uow, rows)
    with scope.transaction() as uow:
        jobs = []
        for row in rows:
            job = insert_job(uow, row)
            jobs.append(job if job.deduplicated else dispatch(uow, job, "create", now))
        return jobs


def report_assign_result(scope: Scope, job_id: str, status: str, worker_agent: str | None = None,
                         attempt: int | None = None, result: Any = None, error: Any = None,
                         metadata: dict[str, Any] | None = None) -> AssignOutcome:
    """A worker's report: progress, a final result, or a failure that may be retried.

    As in the reference, the report's result and error replace the job's (progress
    included), progress moves the deadline to now + timeout (and starts a queued
    job), and a retry scheduled here names the worker as ``requested_by``.
    Raises AssignNotFound, WorkerMismatch, StaleAttempt (a result from an earlier
    attempt) or IllegalTransition. Repeating the report that finished the job is a
    no-op: nothing is written or recorded. A report without a result stores {}, as
    the reference does (its ``result ?? payload``, the payload defaulting to {}).
    """
    target, result = _checked_report(job_id, status, worker_agent, attempt, result, error,
                                     metadata)
    if target != "running":  # the one-statement path, when the report is routine
        # (one statement where the event can be written in its WITH clause, else two)
        with (scope.one_statement() if scope.sql.writable_ctes else scope.transaction()
              ) as uow:
            outcome = finish_routine(uow, job_id, target, worker_agent, attempt, result,
                                     error)
        if outcome is not None:
            return outcome
    with scope.transaction() as uow:
        job = fenced(lock_job(uow, job_id), job_id, worker_agent, attempt)
        patch = {"result": result, "error": error}
        if target == "running":  # progress (or the start of a queued job)
            with computed_from(job):
                patch["deadline_ms"] = resolve_now(None) + job.timeout_ms
            job = move(uow, job, "running", patch)
            return AssignOutcome(job, "progress", notify_supervisor(uow, job, "progress"))
        return finish(uow, job, target, patch, worker_agent or job.worker_agent)


def fenced(job: AssignJob | None, job_id: str, worker_agent: str | None,
           attempt: int | None) -> AssignJob:
    """``job`` (read for ``job_id``) when the worker's report or touch may go on: it
    exists (else AssignNotFound), is the worker's (WorkerMismatch; a worker of None
    checks nothing), is not cancelled (AssignCancelled) and is on ``attempt``
    (StaleAttempt; None checks nothing)."""
    if job is None:
        raise AssignNotFound(f"no assign job {job_id}")
    if worker_agent and worker_agent != job.worker_agent:
        raise WorkerMismatch(
            f"assign job {job_id} belongs to {job.worker_agent}, not {worker_agent}")
    if job.status == "cancelled":
        raise AssignCancelled(f"assign job {job_id} was cancelled: stop working on it")
    if attempt is not None and attempt != job.attempt:
        raise StaleAttempt(
            f"assign job {job_id} is on attempt {job.attempt}; "
            f"a result for attempt {attempt} is stale")
    return job


def _checked_report(job_id: str, status: str, worker_agent: str | None, attempt: int | None,
                    result: Any, error: Any, metadata: dict[str, Any] | None
                    ) -> tuple[str, Any]:
    """A report's arguments checked (ValidationError otherwise): its target status, and
    the result it stores (``{}`` for none, as the reference does)."""
    require_id(job_id, "job_id")
    target = rules.normalize_status(status, metadata)
    if worker_agent is not None:
        lookup_key(worker_agent, "worker_agent")
    optional_int(attempt, "attempt")
    json_value(result, "result")
    json_value(error, "error")
    json_value(metadata, "metadata")
    return target, {} if result is None else result


def schedule_assign_retry(scope: Scope, job_id: str, reason: str = "manual",
                          requested_by: str = "manual", *, force: bool = False
                          ) -> AssignJob:
    """Re-queue a failed or timed-out job and dispatch it again.

    RetryExhausted when its retries are spent, unless ``force`` (an operator's retry:
    the job gets one attempt more). A cancelled job is never run again
    (IllegalTransition)."""
    require_id(job_id, "job_id")
    require_text(reason, "reason")
    require_text(requested_by, "requested_by")
    require_bool(force, "force")
    with scope.transaction() as uow:
        job = lock_job(uow, job_id)
        if job is None:
            raise AssignNotFound(f"no assign job {job_id}")
        if job.status == "cancelled":
            raise IllegalTransition(f"assign job {job_id} was cancelled; a cancelled "
                                    "job is never run again")
        with computed_from(job):
            exhausted = job.retry_count >= job.max_retries
        if exhausted and not force:
            raise RetryExhausted(
                f"assign job {job_id} has used its {job.max_retries} retries")
        job = dispatch(uow, retry(uow, job, {}), "retry")
        notify_supervisor(uow, job, "retry_scheduled", retry_reason=reason,
                          requested_by=requested_by)
        return job


def batch_size(value: object, what: str) -> int:
    """A batch's size: a whole number in 1..MAX_BATCH."""
    return require_int(value, what, minimum=1, maximum=MAX_BATCH)


def assign_many(scope: Scope, supervisor_agent: str, worker_agent: str,
                jobs: Sequence[Mapping[str, Any]]) -> list[AssignJob]:
    """``assign_async`` for each of ``jobs`` (each a mapping of its keyword arguments:
    task, payload, priority, ...), all in one transaction: every job and its dispatch
    message, or none of them (a bad one is refused before anything is written)."""
    items = _batch_items(jobs, "jobs")
    for item in items:
        check_fields(item)
    return assign_rows(scope,
                       [new_job(supervisor_agent, worker_agent, **item) for item in items])


def report_assign_results(scope: Scope, reports: Sequence[Mapping[str, Any]],
                          worker_agent: str | None = None) -> list[AssignOutcome]:
    """``report_assign_result`` for each of ``reports`` (each a mapping of its keyword
    arguments: job_id, status, attempt, result, error, metadata; ``worker_agent`` for
    all of them unless a report names its own), in one transaction: every report, or
    (when one raises) none of them."""
    items = _batch_items(reports, "reports")
    refuse_unknown([key for item in items for key in item], REPORT_FIELDS,
                   "report_assign_results")
    for number, item in enumerate(items, 1):
        missing = [key for key in ("job_id", "status") if key not in item]
        if missing:
            raise ValidationError(f"report {number} of report_assign_results has no "
                                  f"{' and no '.join(missing)}; each report names its "
                                  "job_id and status")
    checked = [{"worker_agent": worker_agent, **item} for item in items]
    records = [_record(report) for report in checked]  # every report checked first
    if scope.sql.writable_ctes and _routine(records):  # one statement: one round trip
        with scope.one_statement() as uow:
            outcomes = finish_many_routine(uow, records)
        if outcomes is not None:
            return outcomes
    with scope.transaction() as uow:
        return [report_assign_result(uow, **report) for report in checked]


def _record(report: dict[str, Any]) -> dict[str, Any]:
    """A report (report_assign_result's keyword arguments) checked (ValidationError
    otherwise), as finish_many_routine's record."""
    target, result = _checked_report(
        report["job_id"], report["status"], report.get("worker_agent"),
        report.get("attempt"), report.get("result"), report.get("error"),
        report.get("metadata"))
    return {"job_id": report["job_id"], "status": target,
            "worker": report.get("worker_agent") or None, "attempt": report.get("attempt"),
            "result": result, "error": report.get("error")}


def _routine(records: list[dict[str, Any]]) -> bool:
    """Whether finish_many_routine may take ``records``: several final reports, each on
    a job of its own (it still falls back when a job needs the general path)."""
    return (len(records) > 1 and all(record["status"] != "running" for record in records)
            and len({record["job_id"] for record in records}) == len(records))


def _batch_items(items: object, what: str) -> list[dict[str, Any]]:
    """The batch as a list of dicts (refused unless a sequence of mappings, 1..MAX_BATCH)."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ValidationError(f"{what} must be a list of mappings, not {describe(items)}")
    batch_size(len(items), f"the number of {what}")
    for item in items:
        if not isinstance(item, Mapping):
            raise ValidationError(f"each of {what} must be a mapping, not {describe(item)}")
    return [dict(item) for item in items]


def check_fields(fields: Mapping[str, Any], what: str = "assign_async") -> None:
    """Refuse keyword arguments create_assign does not take (ValidationError)."""
    refuse_unknown(fields, CREATE_FIELDS, what)
