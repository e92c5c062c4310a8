"""Claiming: a worker's next due queued jobs become running, one or a batch at a time.

A claim is one guarded statement (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, one round
trip in autocommit; SQLite: under the database write lock), so two claimers never get
the same job. When this store's look for stalled jobs is due (services/timeouts.py),
the claim runs in a transaction that first takes them back, so a crashed worker's job
is retried (or finished) without a sweeper of the application's own.
"""

from __future__ import annotations

import functools

from sqlalchemy import Integer, bindparam, func, or_, select, update

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.execution import Prepared
from hubstore.ids import now_ms
from hubstore.models import AssignJob, table_of
from hubstore.services.assign_hub import batch_size
from hubstore.services.assigns import NOW, announce, running_times
from hubstore.services.base import const
from hubstore.services.timeouts import rescue_due, rescue_stalled
from hubstore.transaction import Scope, Transaction
from hubstore.validation import require_id

_jobs = table_of(AssignJob)
_c = _jobs.c
#: A job with a start time is not due before it.
_DUE = or_(_c.not_before_ms.is_(None), _c.not_before_ms <= NOW)
#: The worker's next queued job, locked; PostgreSQL skips rows that other claimers hold
#: (SQLite renders no FOR UPDATE: the claim runs under its database write lock).
_NEXT_QUEUED = (
    select(_c.job_id)
    .where(_c.worker_agent == bindparam("p_worker"), _c.status == const(rules.CLAIMABLE),
           _DUE)
    .order_by(_c.priority.desc(), _c.created_at_ms, _c.job_id)
    .limit(1)
    .with_for_update(skip_locked=True))
#: Claim in one statement: queued -> running as the transition table's rules write it
#: (started now, the deadline now + timeout unless the job has one), guarded by status.
CLAIM = Prepared(
    update(_jobs)
    .where(_c.job_id == _NEXT_QUEUED.scalar_subquery(), _c.status == const(rules.CLAIMABLE))
    .values(status="running", updated_at_ms=NOW, **running_times())
    .returning(*_c), _jobs)


@functools.cache
def _claim_many(sql: SqlDialect) -> Prepared:
    """Claim up to p_limit of the worker's due queued jobs in one statement (the same
    order, guard and values as CLAIM; PostgreSQL skips the rows other claimers hold).
    The rows are picked once, in a materialized WITH query: an IN subquery with SKIP
    LOCKED may be run again for each row by PostgreSQL's planner, and pick other rows
    each time (more than the limit)."""
    picked = sql.materialized(_NEXT_QUEUED.limit(bindparam("p_limit", type_=Integer))
                              .cte("picked"))
    return Prepared(
        update(_jobs)
        .where(sql.one_of(_c.job_id, select(picked.c.job_id)),
               _c.status == const(rules.CLAIMABLE))
        .values(status="running", updated_at_ms=NOW, **running_times())
        .returning(*_c), _jobs)


def _claim_order(job: AssignJob) -> tuple[int, int, str]:
    """The claim's order: highest priority, then oldest, then by id."""
    return (-job.priority, job.created_at_ms, job.job_id)


def _claimed(uow: Transaction, worker_agent: str, limit: int | None, now: int
             ) -> list[AssignJob]:
    """Claim the worker's next job (``limit`` None) or up to ``limit`` of them, in
    claim order, their listeners told after the commit."""
    params = {"p_worker": worker_agent, "p_now": now}
    if limit is None:
        one = CLAIM.instance(uow, params, AssignJob)
        jobs = [] if one is None else [one]
    else:
        jobs = sorted(_claim_many(uow.sql).instances(uow, {**params, "p_limit": limit},
                                                     AssignJob), key=_claim_order)
    for job in jobs:
        announce(uow, job)
    return jobs


def _claim(scope: Scope, worker_agent: str, limit: int | None) -> list[AssignJob]:
    """A claim, with the stalled jobs taken back first when this store's look is due
    (one transaction), else alone (one statement: one round trip in autocommit)."""
    now = now_ms()
    if rescue_due(scope.db, now):
        with scope.unit_of_work() as uow:
            rescue_stalled(uow, now)
            return _claimed(uow, worker_agent, limit, now)
    with scope.one_statement() as uow:
        return _claimed(uow, worker_agent, limit, now)


def claim_next_assign(scope: Scope, worker_agent: str) -> AssignJob | None:
    """The worker's highest-priority, then oldest, queued job that is due (its
    not_before_ms passed, if it has one), now running.

    PostgreSQL skips rows other claimers hold (FOR UPDATE SKIP LOCKED); SQLite
    claims under the database write lock. Two claimers never get the same job. Jobs
    whose deadline passed (a crashed worker's) are timed out first, as
    ``sweep_timed_out_assigns`` does: retried while retries remain.
    """
    require_id(worker_agent, "worker_agent")
    jobs = _claim(scope, worker_agent, None)
    return jobs[0] if jobs else None


def claim_next_assigns(scope: Scope, worker_agent: str, limit: int = 10) -> list[AssignJob]:
    """Up to ``limit`` of the worker's due queued jobs, now running, in one statement, in
    claim order (as ``claim_next_assign`` would take them one by one). Two claimers never
    get the same job. An empty list when none is queued. Stalled jobs are taken back
    first, as in ``claim_next_assign``."""
    require_id(worker_agent, "worker_agent")
    return _claim(scope, worker_agent, batch_size(limit, "limit"))


#: When the worker's next scheduled job (queued, not due yet) becomes due.
_NEXT_DUE = Prepared(
    select(func.min(_c.not_before_ms).label("due"))
    .where(_c.worker_agent == bindparam("p_worker"), _c.status == const(rules.CLAIMABLE),
           _c.not_before_ms > NOW))


def next_due_ms(scope: Scope, worker_agent: str) -> int | None:
    """When the worker's next queued job that is not due yet becomes due (the time its
    not_before_ms, or its retry's back-off, ends), or None when it has none: how long a
    waiter may sleep without missing it."""
    require_id(worker_agent, "worker_agent")
    with scope.one_read() as uow:
        found = _NEXT_DUE.first(uow, {"p_worker": worker_agent, "p_now": now_ms()})
    return None if found is None or found["due"] is None else int(found["due"])
