"""Claiming: a worker's next due queued jobs become running, one or a batch at a time.

A claim is one guarded statement (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, one round
trip in autocommit; SQLite: under the database write lock), so two claimers never get
the same job. When this store's look for stalled jobs is due (services/timeouts.py),
the claim runs in a transaction that first takes them back, so a crashed worker's job
is retried (or finished) without a sweeper of the application's own.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import CTE, Integer, bindparam, exists, func, or_, select, update

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.execution import Prepared
from hubstore.ids import now_ms
from hubstore.models import AssignJob, AssignLimit, AssignLimitRelease, table_of
from hubstore.services.assign_hub import batch_size
from hubstore.services.assigns import NOW, announce, running_times
from hubstore.services.base import const
from hubstore.services.timeouts import rescue_due, rescue_stalled
from hubstore.transaction import Scope, Transaction
from hubstore.validation import require_id

_jobs = table_of(AssignJob)
_limits = table_of(AssignLimit)
_releases = table_of(AssignLimitRelease)
_c = _jobs.c
#: A job with a start time is not due before it.
_DUE = or_(_c.not_before_ms.is_(None), _c.not_before_ms <= NOW)
@functools.cache
def claim_statement(sql: SqlDialect) -> Prepared:
    """The claim, in one statement: up to p_limit of the worker's due queued jobs
    (``not_before_ms`` passed), highest priority, then oldest, become running as the
    transition table's rules write it (started now, the deadline now + timeout unless
    the job has one), guarded by status; each job whose key has an assign limit
    (revision 0014) only with room under it.

    The worker's next jobs are picked (locked, skipping rows other claimers hold) among
    those whose key had room when the statement began; of each key, no more than that
    room, in claim order; a job of another key or of none is never held up behind
    them. On SQLite that is the decision: the statement runs under the write lock. Where
    transactions run side by side (row_locks), the keys' rows are then locked and their
    room checked again on their newest version (another claimer may have taken it since
    the statement's snapshot): a key whose room went keeps its picked jobs queued. The
    trigger of revision 0014 counts each started job in its key's row; finished jobs
    are counted in rows of their own, which the claim reads as its snapshot saw them.
    """
    rooms = _rooms(sql)
    full = exists().where(rooms.c.key == _c.limit_key, rooms.c.free < 1)
    candidates = sql.materialized(
        select(_c.job_id, _c.limit_key, _c.priority, _c.created_at_ms)
        .where(_c.worker_agent == bindparam("p_worker"), _c.status == const(rules.CLAIMABLE),
               _DUE, or_(_c.limit_key.is_(None), ~full))
        .order_by(_c.priority.desc(), _c.created_at_ms, _c.job_id)
        .limit(bindparam("p_limit", type_=Integer))
        .with_for_update(of=_jobs, skip_locked=True)
        .cte("candidates"))
    cand = candidates.c
    ranked = select(
        cand.job_id, cand.limit_key, rooms.c.key.label("limited"), rooms.c.free,
        func.row_number().over(partition_by=cand.limit_key, order_by=(
            cand.priority.desc(), cand.created_at_ms, cand.job_id)).label("rn"),
    ).select_from(candidates.outerjoin(rooms, rooms.c.key == cand.limit_key)).cte("ranked")
    picked = select(ranked.c.job_id, ranked.c.limit_key, ranked.c.limited).where(or_(
        ranked.c.limited.is_(None), ranked.c.free.is_(None), ranked.c.rn <= ranked.c.free)
    ).cte("picked")
    chosen = select(picked.c.job_id)
    # A job started in the room another one left is stamped no earlier than that one's
    # end (the latest release time of its key, revision 0016).
    gone = _released()
    released: Any = select(gone.c.at).where(gone.c.key == _c.limit_key).scalar_subquery()
    if sql.row_locks:
        wanted = (select(picked.c.limit_key, func.count().label("n"))
                  .where(picked.c.limited.is_not(None)).group_by(picked.c.limit_key)
                  .cte("wanted"))
        slot = _limits.alias("slot")
        # The key's start count is read under its lock (its newest version), its
        # releases as the statement's snapshot saw them: never more than there were.
        slots = sql.materialized(
            select(slot.c.key, gone.c.at.label("released_at_ms"))
            .select_from(slot.join(wanted, slot.c.key == wanted.c.limit_key)
                         .outerjoin(gone, gone.c.key == slot.c.key))
            .where(sql.limit_room_for(slot, slot.c.started - func.coalesce(gone.c.total, 0),
                                      wanted.c.n, NOW))
            .with_for_update(of=slot, key_share=True).cte("slots"))
        chosen = chosen.where(or_(picked.c.limited.is_(None),
                                  picked.c.limit_key.in_(select(slots.c.key))))
        released = (select(slots.c.released_at_ms).where(slots.c.key == _c.limit_key)
                    .scalar_subquery())
    start = sql.greater(NOW, released)
    # The chosen jobs are found by their key alone: they were picked queued and are
    # locked (PostgreSQL) or under the write lock (SQLite) until the statement ends, so
    # no status guard is needed here; written in, it matched the claim index's predicate
    # and PostgreSQL read every queued job (dead index entries included) through it.
    return Prepared(
        update(_jobs)
        .where(sql.one_of(_c.job_id, chosen))
        .values(status="running", updated_at_ms=start, **running_times(start))
        .returning(*_c), _jobs)


@functools.cache
def _released() -> CTE:
    """Each assign limit's releases (revision 0014's rows of them, summed) and when the
    latest was."""
    r = _releases.c
    return (select(r.key, func.sum(r.released).label("total"),
                   func.max(r.released_at_ms).label("at"))
            .group_by(r.key).cte("released"))


def _rooms(sql: SqlDialect) -> CTE:
    """Each assign limit's room at p_now: how many more of its key's jobs may start
    (its running room and its rate room, the lesser; NULL: no bound), computed once
    per statement (a limit's recent starts counted by one grouped join)."""
    limit = _limits.alias("lim")
    each, start = sql.start_times(limit.c.starts_json)
    recent = (select(limit.c.key, func.count(start).label("recent"))
              .select_from(limit.outerjoin(each, start > NOW - limit.c.per_ms))
              .group_by(limit.c.key).cte("recent_starts"))
    c = _limits.c
    gone = _released()
    running = c.started - func.coalesce(gone.c.total, 0)
    return (select(c.key, sql.lesser(c.max_running - running,
                                     c.max_starts - recent.c.recent).label("free"))
            .select_from(_limits.join(recent, recent.c.key == c.key)
                         .outerjoin(gone, gone.c.key == c.key)).cte("rooms"))


def _claim_order(job: AssignJob) -> tuple[int, int, str]:
    """The claim's order: highest priority, then oldest, then by id."""
    return (-job.priority, job.created_at_ms, job.job_id)


def _claimed(uow: Transaction, worker_agent: str, limit: int | None, now: int
             ) -> list[AssignJob]:
    """Claim the worker's next job (``limit`` None) or up to ``limit`` of them, in
    claim order, their listeners told after the commit."""
    params = {"p_worker": worker_agent, "p_now": now, "p_limit": limit or 1}
    statement = claim_statement(uow.sql)
    jobs = sorted(statement.instances(uow, params, AssignJob), key=_claim_order)
    for job in jobs:
        announce(uow, job)
    return jobs


def _claim(scope: Scope, worker_agent: str, limit: int | None) -> list[AssignJob]:
    """A claim, with the stalled jobs taken back first when this store's look is due
    (one transaction), else alone (one statement: one round trip in autocommit)."""
    now = now_ms()
    if rescue_due(scope.db, now):
        with scope.transaction() as uow:
            rescue_stalled(uow, now)
            return _claimed(uow, worker_agent, limit, now)
    with scope.one_statement() as uow:
        return _claimed(uow, worker_agent, limit, now)


#: A due job of the worker that no full limit holds: where claimers run side by side,
#: a claim can find nothing while one is there (it lost a key's last room to another
#: claimer after picking its jobs), and a waiter then claims again at once.
_CLAIMABLE = Prepared(
    select(_c.job_id)
    .where(_c.worker_agent == bindparam("p_worker"), _c.status == const(rules.CLAIMABLE),
           _DUE, or_(_c.limit_key.is_(None),
                     _c.limit_key.not_in(bindparam("p_full", expanding=True))))
    .limit(1))


def claimable(scope: Scope, worker_agent: str, full: list[str]) -> bool:
    """Whether the worker has a due queued job whose key is not one of ``full``."""
    with scope.one_read() as uow:
        return _CLAIMABLE.first(uow, {"p_worker": worker_agent, "p_now": now_ms(),
                                      "p_full": full}) is not None


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
