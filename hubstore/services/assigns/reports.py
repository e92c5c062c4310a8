"""Reports and retries: a worker's reports (one, or a batch), the finish that retries a
failure with retries left, and an operator's retry.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Integer,
    Text,
    any_,
    bindparam,
    column,
    func,
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
)
from hubstore.execution import Prepared
from hubstore.ids import now_ms, uuidv7
from hubstore.jsontype import dumps
from hubstore.models import AssignJob, table_of
from hubstore.results import AssignOutcome
from hubstore.services.assigns.batches import batch_items
from hubstore.services.assigns.handoffs import (
    completed_event,
    completed_outcome,
    dispatch,
    finish_with_event,
    notify_supervisor,
)
from hubstore.services.assigns.moves import (
    finish_statement,
    finished_values,
    move,
    retry,
    routine_guards,
)
from hubstore.services.assigns.rows import announce, computed_from, lock_job
from hubstore.services.base import const, resolve_now
from hubstore.transaction import Scope, Transaction
from hubstore.validation import (
    json_value,
    lookup_key,
    optional_int,
    refuse_unknown,
    require_bool,
    require_id,
    require_text,
)

#: The keys of one report of report_assign_results.
REPORT_FIELDS = frozenset({"job_id", "status", "worker_agent", "attempt", "result", "error",
                           "metadata"})


_jobs = table_of(AssignJob)
_c = _jobs.c


def finish(tx: Transaction, job: AssignJob, target: str, patch: dict[str, Any],
           requested_by: str, now: int | None = None, **completed_extra: Any
           ) -> AssignOutcome:
    """Make a locked job terminal at ``now`` (else the clock); a failure with retries
    left is retried instead (its back-off and deadline counted from ``now``).

    The same terminal report again changes nothing and records nothing.
    """
    if job.status == target:
        return AssignOutcome(job, "completed")
    job = move(tx, job, target, patch, now=now)
    with computed_from(job):
        retries_left = job.retry_count < job.max_retries
    if target != "succeeded" and retries_left:
        job = dispatch(tx, retry(tx, job, {}, now), "retry", now)
        event = notify_supervisor(tx, job, "retry_scheduled", retry_reason=target,
                                  requested_by=requested_by)
        return AssignOutcome(job, "retry_scheduled", event)
    return AssignOutcome(job, "completed",
                         notify_supervisor(tx, job, "completed", **completed_extra))


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
    of them (``p_count``) is routine, as finish_statement's guards say. Returns the
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
               .where(*routine_guards(sql, r.worker, r.attempt, or_(
                   r.status == const("succeeded"), row.retry_count >= row.max_retries), row))
               .cte("routine"))
    every_one = (select(func.count()).select_from(routine).scalar_subquery()
                 == bindparam("p_count", type_=Integer))
    done = (update(_jobs)
            .where(_c.job_id == any_(ids), _c.job_id == r.job_id, every_one)
            .values(finished_values(r.status, r.result, r.error))
            .returning(*_c, r.m_id, r.m_corr, r.m_trace).cte("done"))
    event = completed_event(sql, done, done.c.m_id, done.c.m_corr, done.c.m_trace)
    return Prepared(select(*(done.c[c.name] for c in _c)).add_cte(event), _jobs)


def finish_many_routine(tx: Transaction, reports: list[dict[str, Any]]
                        ) -> list[AssignOutcome] | None:
    """Checked final reports (keys of _REPORT_RECORD but the message ids) on distinct
    jobs, finished in one statement where the dialect has JSON records and every report
    is routine; None (nothing written) otherwise."""
    statement = _finish_many(tx.sql)
    if statement is None:
        return None
    now = now_ms()
    records = [{**report, "m_id": uuidv7(), "m_corr": uuidv7(), "m_trace": uuidv7()}
               for report in reports]
    done = {job.job_id: job for job in statement.instances(
        tx, {"p_reports": records, "p_ids": [record["job_id"] for record in records],
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
        announce(tx, job)
        outcomes.append(completed_outcome(job, record["m_id"], now, record["m_corr"],
                                   record["m_trace"]))
    return outcomes


def finish_routine(tx: Transaction, job_id: str, target: str, worker_agent: str | None,
                   attempt: int | None, result: Any, error: Any) -> AssignOutcome | None:
    """The routine final report (see finish_statement) and its event, or None (nothing
    written) when the report needs the general path."""
    values = {"p_job_id": job_id, "p_worker": worker_agent or None, "p_attempt": attempt,
              "p_status": target, "p_result": result, "p_error": error, "p_now": now_ms()}
    if not tx.sql.writable_ctes:  # two statements here: the update, then the event
        done = finish_statement(tx.sql, target != "succeeded").instance(
            tx, values, AssignJob)
        if done is None:
            return None
        announce(tx, done)
        return AssignOutcome(done, "completed", notify_supervisor(tx, done, "completed"))
    values.update(m_id=uuidv7(), m_corr=uuidv7(), m_trace=uuidv7())
    done = finish_with_event(tx.sql, target != "succeeded").instance(tx, values, AssignJob)
    if done is None:
        return None
    announce(tx, done)
    return completed_outcome(done, values["m_id"], values["p_now"], values["m_corr"],
                      values["m_trace"])


def report_assign_result(scope: Scope, job_id: str, status: str, worker_agent: str | None = None,
                         attempt: int | None = None, result: Any = None, error: Any = None,
                         metadata: dict[str, Any] | None = None) -> AssignOutcome:
    """A worker's report: progress, a final result, or a failure that may be retried.

    As in the reference, the report's result and error replace the job's (progress
    included), progress moves the deadline to now + timeout (and starts a queued
    job), and a retry scheduled here names the worker as ``requested_by``.
    Raises AssignNotFound, WorkerMismatch, StaleAttempt (a result from an earlier
    attempt) or IllegalTransition. Repeating the report that finished the job is a
    no-op: nothing is written or recorded; the same status with another result or
    error raises IllegalTransition (the first report stands). A report without a
    result stores {}, as the reference does (its ``result ?? payload``, the payload
    defaulting to {}).
    """
    reported = {"result": result, "error": error}  # (what the report gives, for a repeat)
    target, result = _checked_report(job_id, status, worker_agent, attempt, result, error,
                                     metadata)
    if target != "running":  # the one-statement path, when the report is routine
        # (one statement where the event can be written in its WITH clause, else two)
        with (scope.one_statement() if scope.sql.writable_ctes else scope.transaction()
              ) as tx:
            outcome = finish_routine(tx, job_id, target, worker_agent, attempt, result,
                                     error)
        if outcome is not None:
            return outcome
    with scope.transaction() as tx:
        job = fenced(lock_job(tx, job_id), job_id, worker_agent, attempt)
        patch = {"result": result, "error": error}
        if target == "running":  # progress (or the start of a queued job)
            with computed_from(job):
                patch["deadline_ms"] = resolve_now(None) + job.timeout_ms
            job = move(tx, job, "running", patch)
            return AssignOutcome(job, "progress", notify_supervisor(tx, job, "progress"))
        if job.status == target:
            refuse_conflicting_end(job, reported)
        return finish(tx, job, target, patch, worker_agent or job.worker_agent)


def refuse_conflicting_end(job: AssignJob, reported: dict[str, Any]) -> None:
    """A final report repeated on a job that ended with it: a no-op when the result and
    the error it gives (those it leaves out: nothing to compare) are the recorded ones;
    IllegalTransition when they differ (the first report stands, and the worker should
    know that its second was not taken)."""
    given = {name: value for name, value in reported.items() if value is not None}
    recorded = {"result": job.result, "error": job.error}
    if json.loads(dumps(given)) != {name: recorded[name] for name in given}:  # (as
        # stored: tuples as lists, and 1.0 == 1)
        raise IllegalTransition(
            f"assign job {job.job_id} ended {job.status} already, with another result or "
            "error than this report's: the first report stands (an identical repeat "
            "is a no-op)")


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
    with scope.transaction() as tx:
        job = lock_job(tx, job_id)
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
        job = dispatch(tx, retry(tx, job, {}), "retry")
        notify_supervisor(tx, job, "retry_scheduled", retry_reason=reason,
                          requested_by=requested_by)
        return job


def report_assign_results(scope: Scope, reports: Sequence[Mapping[str, Any]],
                          worker_agent: str | None = None) -> list[AssignOutcome]:
    """``report_assign_result`` for each of ``reports`` (each a mapping of its keyword
    arguments: job_id, status, attempt, result, error, metadata; ``worker_agent`` for
    all of them unless a report names its own), in one transaction: every report, or
    (when one raises) none of them."""
    items = batch_items(reports, "reports")
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
        with scope.one_statement() as tx:
            outcomes = finish_many_routine(tx, records)
        if outcomes is not None:
            return outcomes
    with scope.transaction() as tx:
        return [report_assign_result(tx, **report) for report in checked]


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
