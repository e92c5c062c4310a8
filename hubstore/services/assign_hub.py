"""The hub's assign-job rules: dispatch, worker reports, retries, the timeout sweep
and claiming, each in one transaction and safe when many processes race."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update

from hubstore import assign_rules as rules
from hubstore.errors import AssignNotFound, RetryExhausted, StaleAttempt, WorkerMismatch
from hubstore.models import AssignJob, Message
from hubstore.results import AssignOutcome
from hubstore.services.assigns import lock_job, move, retry
from hubstore.services.base import Operations, const, resolve_now
from hubstore.validation import json_value, optional_int, require_id, require_text

if TYPE_CHECKING:
    from hubstore.uow import UnitOfWork

EVENT_TOPIC = "assign.result"


def dispatch(uow: UnitOfWork, job: AssignJob, reason: str) -> AssignJob:
    """Record the handoff message to the worker and point last_message_id at it."""
    message = uow.audit_log(
        type="handoff", from_agent=job.supervisor_agent, to_agent=job.worker_agent,
        topic=job.topic, priority=job.priority, ttl_ms=job.ttl_ms,
        trace_id=job.trace_id, correlation_id=job.correlation_id,
        payload={
            "kind": "assign.job", "reason": reason, "assign_job_id": job.job_id,
            "attempt": job.attempt, "retry_count": job.retry_count,
            "max_retries": job.max_retries, "timeout_ms": job.timeout_ms,
            "supervisor_agent": job.supervisor_agent, "worker_agent": job.worker_agent,
            "task": job.task, "payload": job.payload,
        })
    return uow.session.scalars(
        update(AssignJob).where(AssignJob.job_id == job.job_id)
        .values(last_message_id=message.id).returning(AssignJob),
        execution_options={"populate_existing": True}).one()


def notify_supervisor(uow: UnitOfWork, job: AssignJob, event: str,
                      **extra: Any) -> Message:
    """Record the event message from the worker to the supervisor."""
    return uow.audit_log(
        type="event", from_agent=job.worker_agent, to_agent=job.supervisor_agent,
        topic=EVENT_TOPIC, priority=job.priority, trace_id=job.trace_id,
        correlation_id=job.correlation_id,
        payload={"kind": EVENT_TOPIC, "event": event, "assign_job_id": job.job_id,
                 "attempt": job.attempt, "status": job.status, "job": job.to_dict(), **extra})


def finish(uow: UnitOfWork, job: AssignJob, target: str, patch: dict[str, Any],
           requested_by: str) -> AssignOutcome:
    """Make a locked job terminal; a failure with retries left is retried instead."""
    if job.status == target:  # the same report again: nothing changes
        return AssignOutcome(job, "completed")
    job = move(uow, job, target, patch)
    if target != "succeeded" and job.retry_count < job.max_retries:
        job = dispatch(uow, retry(uow, job, {}), "retry")
        event = notify_supervisor(uow, job, "retry_scheduled", retry_reason=target,
                                  requested_by=requested_by)
        return AssignOutcome(job, "retry_scheduled", event)
    return AssignOutcome(job, "completed", notify_supervisor(uow, job, "completed"))


class AssignHubOps(Operations):
    """Assign jobs under the hub's rules."""

    def assign_async(self, supervisor_agent: str, worker_agent: str, **fields: Any
                     ) -> AssignJob:
        """Create a job and record its dispatch to the worker, in one transaction."""
        with self.unit_of_work() as uow:
            return dispatch(uow, uow.create_assign(supervisor_agent, worker_agent, **fields),
                            "create")

    def report_assign_result(self, job_id: str, status: str, worker_agent: str | None = None,
                             attempt: int | None = None, result: Any = None, error: Any = None,
                             metadata: dict[str, Any] | None = None) -> AssignOutcome:
        """A worker's report: progress, a final result, or a failure that may be retried.

        Raises AssignNotFound, WorkerMismatch, StaleAttempt (a result from an earlier
        attempt) or IllegalTransition. Repeating the report that finished the job is a
        no-op.
        """
        require_id(job_id, "job_id")
        target = rules.normalize_status(status, metadata)
        if worker_agent is not None:
            require_text(worker_agent, "worker_agent")
        optional_int(attempt, "attempt")
        json_value(result, "result")
        json_value(error, "error")
        json_value(metadata, "metadata")
        with self.unit_of_work() as uow:
            job = lock_job(uow, job_id)
            if job is None:
                raise AssignNotFound(f"no assign job {job_id}")
            if worker_agent and worker_agent != job.worker_agent:
                raise WorkerMismatch(
                    f"assign job {job_id} belongs to {job.worker_agent}, not {worker_agent}")
            if attempt is not None and attempt != job.attempt:
                raise StaleAttempt(
                    f"assign job {job_id} is on attempt {job.attempt}; "
                    f"a result for attempt {attempt} is stale")
            if target == "running":
                timeout = job.timeout_ms
                job = move(uow, job, "running",
                           {"deadline_ms": resolve_now(None) + timeout})
                return AssignOutcome(job, "progress", notify_supervisor(uow, job, "progress"))
            return finish(uow, job, target, {"result": result, "error": error}, "worker")

    def schedule_assign_retry(self, job_id: str, reason: str = "manual",
                              requested_by: str = "manual") -> AssignJob:
        """Re-queue a failed or timed-out job and dispatch it again."""
        require_id(job_id, "job_id")
        require_text(reason, "reason")
        require_text(requested_by, "requested_by")
        with self.unit_of_work() as uow:
            job = lock_job(uow, job_id)
            if job is None:
                raise AssignNotFound(f"no assign job {job_id}")
            if job.retry_count >= job.max_retries:
                raise RetryExhausted(
                    f"assign job {job_id} has used its {job.max_retries} retries")
            job = dispatch(uow, retry(uow, job, {}), "retry")
            notify_supervisor(uow, job, "retry_scheduled", retry_reason=reason,
                              requested_by=requested_by)
            return job

    def sweep_timed_out_assigns(self, now_ms: int | None = None) -> dict[str, int]:
        """Queued or running jobs past their deadline time out, and are retried while
        retries remain. A job retried here is not swept again by the same call."""
        now = resolve_now(now_ms)
        timed_out = retried = 0
        with self.unit_of_work() as uow:
            due = (select(AssignJob.job_id)
                   .where(AssignJob.status.in_([const(s) for s in rules.ACTIVE]),
                          AssignJob.deadline_ms.is_not(None), AssignJob.deadline_ms < now)
                   .order_by(AssignJob.deadline_ms, AssignJob.job_id))
            if uow.dialect == "postgresql":
                due = due.with_for_update(skip_locked=True)
            for job_id in list(uow.session.scalars(due)):
                job = lock_job(uow, job_id)
                if job is None or job.status not in rules.ACTIVE:
                    continue
                outcome = finish(uow, job, "timed_out",
                                 {"error": job.error or rules.TIMED_OUT_ERROR}, "sweeper")
                timed_out += 1
                retried += outcome.event == "retry_scheduled"
        return {"timed_out": timed_out, "retried": retried}

    def claim_next_assign(self, worker_agent: str) -> AssignJob | None:
        """The worker's highest-priority, then oldest, queued job, now running.

        PostgreSQL skips rows other claimers hold (FOR UPDATE SKIP LOCKED); SQLite
        claims under the database write lock. Two claimers never get the same job.
        """
        require_id(worker_agent, "worker_agent")
        with self.unit_of_work() as uow:
            pick = (select(AssignJob.job_id)
                    .where(AssignJob.worker_agent == worker_agent,
                           AssignJob.status == const("queued"))
                    .order_by(AssignJob.priority.desc(), AssignJob.created_at_ms,
                              AssignJob.job_id)
                    .limit(1))
            if uow.dialect == "postgresql":
                pick = pick.with_for_update(skip_locked=True)
            job_id = uow.session.scalar(pick)
            if job_id is None:
                return None
            job = lock_job(uow, job_id)
            assert job is not None
            return move(uow, job, "running", {})
