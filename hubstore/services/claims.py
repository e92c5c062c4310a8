"""Claiming: a worker's next due queued jobs become running, one or a batch at a time.

A claim is one guarded statement (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, one round
trip in autocommit; SQLite: under the database write lock), so two claimers never get
the same job. When this store's look for stalled jobs is due (services/timeouts.py),
the claim runs in a transaction that first takes them back, so a crashed worker's job
is retried (or finished) without a sweeper of the application's own.
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    Integer,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    union_all,
    update,
)

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.execution import Prepared
from hubstore.ids import now_ms
from hubstore.models import (
    AssignJob,
    AssignLimit,
    AssignLimitRelease,
    AssignLimitShare,
    table_of,
)
from hubstore.services.assign_hub import batch_size
from hubstore.services.assigns import NOW, announce, running_times
from hubstore.services.base import const
from hubstore.services.timeouts import rescue_due, rescue_stalled
from hubstore.transaction import Scope, Transaction
from hubstore.validation import require_id

_jobs = table_of(AssignJob)
_limits = table_of(AssignLimit)
_releases = table_of(AssignLimitRelease)
_shares = table_of(AssignLimitShare)
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
    them. On SQLite that is the decision: the statement runs under the write lock, and
    a limit has one share. Where transactions run side by side (row_locks), each key's
    room is then taken again under a lock, on the newest version of what it locks
    (another claimer may have taken room since the statement's snapshot):

    - a key whose running room is split in shares (revision 0017) locks one share with
      room, skipping shares other claims hold, and starts no more of its picked jobs
      than that share has room for; claims of the key run side by side;
    - a key with one share locks it (waiting for a claim that holds it) and starts its
      picked jobs only when the share has room for them all; a key with a rate also
      locks its row, where its recent start times are, likewise.

    A key whose room went keeps its picked jobs queued. The trigger of revision 0017
    counts each started job on the share written into it (``limit_share``); finished
    jobs are counted in release rows, which the claim reads as its snapshot saw them
    (never more than there were).
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
    picked = select(ranked.c.job_id, ranked.c.limit_key, ranked.c.limited, ranked.c.free,
                    ranked.c.rn).where(
        or_(ranked.c.limited.is_(None), ranked.c.free.is_(None), ranked.c.rn <= ranked.c.free)
    ).cte("picked")
    chosen: Any = select(picked.c.job_id, case((picked.c.limited.is_not(None), 0))
                         .label("share")).cte("chosen")  # (SQLite: a limit's one share)
    counted: CTE | None = None
    if sql.row_locks:
        slots, counted = _slots(sql, picked)
        taken = slots.c
        chosen = (select(picked.c.job_id, taken.share)
                  .select_from(picked.outerjoin(slots, and_(
                      taken.key == picked.c.limit_key, picked.c.rn > taken.low,
                      picked.c.rn <= taken.high)))
                  .where(or_(picked.c.limited.is_(None), taken.key.is_not(None)))
                  .cte("chosen"))
    share = select(chosen.c.share).where(chosen.c.job_id == _c.job_id).scalar_subquery()
    # A job started in the room another one left is stamped no earlier than that one's
    # end (the latest release time of its key, revision 0016).
    gone = _released()
    released: Any = select(gone.c.at).where(gone.c.key == _c.limit_key).scalar_subquery()
    start = sql.greater(NOW, released)
    # The chosen jobs are found by their key alone: they were picked queued and are
    # locked (PostgreSQL) or under the write lock (SQLite) until the statement ends, so
    # no status guard is needed here; written in, it matched the claim index's predicate
    # and PostgreSQL read every queued job (dead index entries included) through it.
    claim = (update(_jobs)
             .where(sql.one_of(_c.job_id, select(chosen.c.job_id)))
             .values(status="running", updated_at_ms=start, limit_share=share,
                     claimed_by=bindparam("p_claimer"), **running_times(start))
             .returning(*_c))
    if counted is not None:
        claim = claim.add_cte(counted)
    return Prepared(claim, _jobs)


def _slots(sql: SqlDialect, picked: CTE) -> tuple[CTE, CTE]:
    """Where row locks serialize: each share the claim took room from, of each key it
    picked jobs of, and which of the key's picked jobs start in it (those whose rank in
    claim order is above ``low`` and at most ``high``); a key whose room went since the
    statement's snapshot has none. Second, the statement that counts the starts in the
    shares of several (the statement must carry it)."""
    wanted = (select(picked.c.limit_key, func.count().label("n"),
                     func.max(picked.c.free).label("free"))
              .where(picked.c.limited.is_not(None)).group_by(picked.c.limit_key)
              .cte("wanted"))
    want = wanted.c
    released = _share_releases()
    limit = _limits.alias("limit_of")
    # A key with one share and no rate: the share counts the starts here, when it has
    # room for every picked job (waiting for a claim that holds it).
    one = released.alias("one_released")
    shares = _shares.c
    single = (
        update(_shares)
        .where(shares.key == want.limit_key, shares.share == 0, limit.c.key == shares.key,
               limit.c.shares == 1, limit.c.max_starts.is_(None),
               one.c.key == shares.key, one.c.share == 0,
               or_(shares.budget.is_(None), shares.started - one.c.released + want.n
                   <= shares.budget))
        .values(started=shares.started + want.n)
        .returning(shares.key, shares.share, literal(0, BigInteger).label("low"),
                   want.n.label("high"))
        .cte("single_share"))
    # A key with a rate (it has one share): its row and its share locked, each with room
    # for every picked job; the jobs name no share, and the trigger counts their starts
    # and start times.
    slot = _limits.alias("slot")
    rated = sql.materialized(
        select(slot.c.key)
        .select_from(slot.join(wanted, slot.c.key == want.limit_key))
        .where(slot.c.max_starts.is_not(None), sql.rate_room_for(slot, want.n, NOW))
        .with_for_update(of=slot, key_share=True).cte("rated"))
    held = _shares.alias("rated_share")
    held_released = released.alias("rated_released")
    rated_share = sql.materialized(
        select(held.c.key, literal(None, Integer).label("share"),
               literal(0, BigInteger).label("low"), want.n.label("high"))
        .select_from(held.join(wanted, held.c.key == want.limit_key)
                     .join(limit, limit.c.key == held.c.key)
                     .join(held_released, and_(held_released.c.key == held.c.key,
                                               held_released.c.share == held.c.share)))
        .where(held.c.share == 0, limit.c.max_starts.is_not(None),
               held.c.key.in_(select(rated.c.key)),
               or_(held.c.budget.is_(None),
                   held.c.started - held_released.c.released + want.n <= held.c.budget))
        .with_for_update(of=held, key_share=True).cte("rated_share"))
    # Several shares: as many with room as the picked jobs need by the snapshot's room
    # (one, far from the limit), skipping those other claims hold (each backend tries
    # them from a place of its own); the picked jobs fill them in turn, none beyond the
    # room it has, and each counts those it takes.
    each = _shares.alias("each_share")
    each_released = released.alias("each_released")
    spare = each.c.budget - (each.c.started - each_released.c.released)
    needed = func.least(limit.c.shares, (want.n * limit.c.shares + want.free - 1)
                        // func.greatest(want.free, 1))
    pick = (select(each.c.share, spare.label("room"))
            .select_from(each.join(each_released, and_(
                each_released.c.key == each.c.key, each_released.c.share == each.c.share)))
            .where(each.c.key == want.limit_key, spare >= 1)
            .order_by((each.c.share + func.pg_backend_pid()) % limit.c.shares)
            .limit(needed).with_for_update(of=each, key_share=True, skip_locked=True)
            .lateral("pick"))
    high = func.sum(pick.c.room).over(partition_by=want.limit_key, order_by=pick.c.share)
    several = sql.materialized(
        select(want.limit_key.label("key"), pick.c.share, (high - pick.c.room).label("low"),
               high.label("high"), want.n)
        .select_from(wanted.join(limit, limit.c.key == want.limit_key).join(pick, true()))
        .where(limit.c.shares > 1).cte("several_shares"))
    taken = func.least(several.c.high, several.c.n) - several.c.low
    counted = (update(_shares)
               .where(shares.key == several.c.key, shares.share == several.c.share,
                      taken > 0)
               .values(started=shares.started + taken).cte("several_counted"))
    both = union_all(
        select(single.c.key, single.c.share, single.c.low, single.c.high),
        select(rated_share.c.key, rated_share.c.share, rated_share.c.low,
               rated_share.c.high),
        select(several.c.key, several.c.share, several.c.low, several.c.high))
    return both.cte("slots"), counted


@functools.cache
def _released() -> CTE:
    """Each assign limit's releases (revision 0016's rows of them, summed) and when the
    latest was."""
    r = _releases.c
    return (select(r.key, func.sum(r.released).label("total"),
                   func.max(r.released_at_ms).label("at"))
            .group_by(r.key).cte("released"))


@functools.cache
def _share_releases() -> CTE:
    """Each share's releases: those of the release rows whose stripe falls to it (the
    stripe modulo its limit's shares)."""
    r = _releases.alias("release")
    limit = _limits.alias("release_limit")
    share = (r.c.stripe % limit.c.shares).label("share")
    return (select(r.c.key, share, func.sum(r.c.released).label("released"))
            .select_from(r.join(limit, limit.c.key == r.c.key))
            .group_by(r.c.key, share).cte("share_releases"))


@functools.cache
def _started() -> CTE:
    """Each assign limit's starts (its shares' counts, summed)."""
    c = _shares.c
    return select(c.key, func.sum(c.started).label("started")).group_by(c.key).cte("started")


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
    begun = _started()
    running = func.coalesce(begun.c.started, 0) - func.coalesce(gone.c.total, 0)
    return (select(c.key, sql.lesser(c.max_running - running,
                                     c.max_starts - recent.c.recent).label("free"))
            .select_from(_limits.join(recent, recent.c.key == c.key)
                         .outerjoin(begun, begun.c.key == c.key)
                         .outerjoin(gone, gone.c.key == c.key)).cte("rooms"))


def _claim_order(job: AssignJob) -> tuple[int, int, str]:
    """The claim's order: highest priority, then oldest, then by id."""
    return (-job.priority, job.created_at_ms, job.job_id)


def this_process() -> str:
    """The claimer a claim records when its worker names none: ``host:pid``."""
    return f"{_HOST}:{os.getpid()}"


_HOST = socket.gethostname()


def claimer(claimed_by: object) -> str:
    """The claimer to record: ``claimed_by`` checked (a non-empty string, as an id), else
    this process."""
    return this_process() if claimed_by is None else require_id(claimed_by, "claimed_by")


def _claimed(uow: Transaction, worker_agent: str, limit: int | None, now: int,
             claimed_by: str) -> list[AssignJob]:
    """Claim the worker's next job (``limit`` None) or up to ``limit`` of them, in
    claim order, recording ``claimed_by`` as their claimer, their listeners told after
    the commit."""
    params = {"p_worker": worker_agent, "p_now": now, "p_limit": limit or 1,
              "p_claimer": claimed_by}
    statement = claim_statement(uow.sql)
    jobs = sorted(statement.instances(uow, params, AssignJob), key=_claim_order)
    for job in jobs:
        announce(uow, job)
    return jobs


def _claim(scope: Scope, worker_agent: str, limit: int | None, claimed_by: str
           ) -> list[AssignJob]:
    """A claim, with the stalled jobs taken back first when this store's look is due
    (one transaction), else alone (one statement: one round trip in autocommit)."""
    now = now_ms()
    if rescue_due(scope.db, now):
        with scope.transaction() as uow:
            rescue_stalled(uow, now)
            return _claimed(uow, worker_agent, limit, now, claimed_by)
    with scope.one_statement() as uow:
        return _claimed(uow, worker_agent, limit, now, claimed_by)


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


def claim_next_assign(scope: Scope, worker_agent: str, claimed_by: str | None = None
                      ) -> AssignJob | None:
    """The worker's highest-priority, then oldest, queued job that is due (its
    not_before_ms passed, if it has one), now running.

    PostgreSQL skips rows other claimers hold (FOR UPDATE SKIP LOCKED); SQLite
    claims under the database write lock. Two claimers never get the same job. Jobs
    whose deadline passed (a crashed worker's) are timed out first, as
    ``sweep_timed_out_assigns`` does: retried while retries remain.

    The job records its claimer (``claimed_by``): the id the worker gives, else this
    process's ``host:pid``.
    """
    require_id(worker_agent, "worker_agent")
    jobs = _claim(scope, worker_agent, None, claimer(claimed_by))
    return jobs[0] if jobs else None


def claim_next_assigns(scope: Scope, worker_agent: str, limit: int = 10,
                       claimed_by: str | None = None) -> list[AssignJob]:
    """Up to ``limit`` of the worker's due queued jobs, now running, in one statement, in
    claim order (as ``claim_next_assign`` would take them one by one). Two claimers never
    get the same job. An empty list when none is queued. Stalled jobs are taken back
    first, as in ``claim_next_assign``, and each records its claimer as there."""
    require_id(worker_agent, "worker_agent")
    size = batch_size(limit, "limit")
    return _claim(scope, worker_agent, size, claimer(claimed_by))


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
