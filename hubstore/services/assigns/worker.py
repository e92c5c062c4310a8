"""The worker's calls on a job it claimed: its heartbeat (touch), its safe report
(finish), and cancellation.

``touch_assign`` and the routine case of ``finish_assign`` are one guarded statement
each; ``cancel_assign`` locks the row and moves it as every move does
(services/assigns/moves.py). A cancelled job is terminal: never claimed, retried or
reported again; its worker hears of it (AssignCancelled) at its next touch or report.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Integer, Text, bindparam, func, update

from hubstore import assign_rules as rules
from hubstore.errors import StaleAttempt, ValidationError, describe
from hubstore.execution import Prepared
from hubstore.ids import now_ms
from hubstore.models import AssignJob, table_of
from hubstore.results import AssignOutcome
from hubstore.services.assigns.creating import get_assign
from hubstore.services.assigns.handoffs import notify_supervisor
from hubstore.services.assigns.moves import NOW, move
from hubstore.services.assigns.reports import fenced, report_assign_result
from hubstore.services.assigns.rows import lock_job
from hubstore.services.base import const
from hubstore.transaction import Scope
from hubstore.validation import require_id, require_int, require_text

_jobs = table_of(AssignJob)
_c = _jobs.c
_EXTEND = bindparam("p_extend", type_=BigInteger)
#: The running job's deadline moved to now + extend (else its timeout), for the worker
#: on the attempt it holds; anything else matches no row.
_TOUCH = Prepared(
    update(_jobs)
    .where(_c.job_id == bindparam("p_job_id", type_=Text), _c.status == const("running"),
           _c.worker_agent == bindparam("p_worker", type_=Text),
           _c.attempt == bindparam("p_attempt", type_=Integer))
    .values(deadline_ms=NOW + func.coalesce(_EXTEND, _c.timeout_ms), updated_at_ms=NOW)
    .returning(*_c), _jobs)


def touch_assign(scope: Scope, job_id: str, worker_agent: str, attempt: int,
                 extend_ms: int | None = None) -> AssignJob:
    """The worker's heartbeat for a long job: its deadline moved to now + ``extend_ms``
    (default: the job's timeout_ms), so that it is not timed out and taken back while
    its worker lives. Returns the job.

    Raises AssignNotFound, WorkerMismatch, AssignCancelled (stop working on it) or
    StaleAttempt (this attempt is over: the job was timed out and retried, or ended).
    No event is recorded (a progress report, ``report_assign_result(..., "running")``,
    also tells the supervisor)."""
    require_id(job_id, "job_id")
    require_id(worker_agent, "worker_agent")
    require_int(attempt, "attempt", minimum=1)
    if extend_ms is not None:
        require_int(extend_ms, "extend_ms", minimum=1, maximum=rules.MAX_TIMEOUT_MS)
    with scope.one_statement() as tx:
        job = _TOUCH.instance(tx, {"p_job_id": job_id, "p_worker": worker_agent,
                                    "p_attempt": attempt, "p_extend": extend_ms,
                                    "p_now": now_ms()}, AssignJob)
    if job is not None:
        return job
    held = fenced(get_assign(scope, job_id), job_id, worker_agent, attempt)
    raise StaleAttempt(f"assign job {job_id} is {held.status}, not running: attempt "
                       f"{attempt} is over")


def finish_assign(scope: Scope, job: AssignJob, status: str, result: Any = None,
                  error: Any = None, metadata: dict[str, Any] | None = None
                  ) -> AssignOutcome:
    """A worker's report on the job it claimed (``report_assign_result`` with the job's
    own worker and attempt, so both are always checked): progress, a final result, or
    a failure that may be retried. A report on an attempt that was since timed out and
    retried raises StaleAttempt; on a cancelled job, AssignCancelled."""
    if not isinstance(job, AssignJob):
        raise ValidationError(f"job must be the AssignJob a claim returned, got "
                              f"{describe(job)}")
    return report_assign_result(scope, job.job_id, status, worker_agent=job.worker_agent,
                                attempt=job.attempt, result=result, error=error,
                                metadata=metadata)


def cancel_assign(scope: Scope, job_id: str, reason: str | None = None
                  ) -> AssignJob | None:
    """Cancel a queued or running job: it becomes ``cancelled`` (terminal: never claimed,
    retried or reported again; its worker's next touch or report raises
    AssignCancelled), its error says so (with ``reason``), and the supervisor gets the
    job's 'completed' event with status 'cancelled'. None for an unknown job; a job
    cancelled already is returned as it is; IllegalTransition from another end."""
    require_id(job_id, "job_id")
    if reason is not None:
        require_text(reason, "reason")
    with scope.transaction() as tx:
        job = lock_job(tx, job_id)
        if job is None or job.status == "cancelled":
            return job
        why = {"reason": reason} if reason is not None else {}
        job = move(tx, job, "cancelled", {"error": {**rules.CANCELLED_ERROR, **why}})
        notify_supervisor(tx, job, "completed", completion_reason="cancelled", **why)
        return job

