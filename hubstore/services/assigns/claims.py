"""Claiming: a worker's next due queued jobs become running, one or a batch at a time.

A claim is one guarded statement (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, one round
trip in autocommit; SQLite: under the database write lock), so two claimers never get
the same job. When this store's look for stalled jobs is due (assigns/rescue.py),
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
    ColumnElement,
    Integer,
    and_,
    any_,
    bindparam,
    case,
    exists,
    func,
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
from hubstore.services.assigns.batches import batch_size
from hubstore.services.assigns.moves import NOW, running_times
from hubstore.services.assigns.rescue import rescue_due, rescue_stalled
from hubstore.services.assigns.rows import announce, limit_keys
from hubstore.services.base import const
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
    return Prepared(_claim_of(sql, rooms, candidates), _jobs)


def _claim_of(sql: SqlDialect, rooms: CTE, candidates: CTE) -> Any:
    """The claim's UPDATE of the ``candidates`` (picked and locked: job_id, limit_key,
    priority, created_at_ms), each key's jobs started only with room under its limit
    (see claim_statement)."""
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
    taken_room = sql.claim_slots(picked, _share_releases(), NOW)
    if taken_room is not None:  # (where row locks serialize: PostgreSQL's statement)
        slots, counted = taken_room
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
    return claim


def _queued(columns: Any = None) -> list[ColumnElement[bool]]:
    """The worker's due queued jobs (of ``columns``' table, default assign_jobs')."""
    c = _c if columns is None else columns
    return [c.worker_agent == bindparam("p_worker"), c.status == const(rules.CLAIMABLE),
            or_(c.not_before_ms.is_(None), c.not_before_ms <= NOW)]


def _keyed_queued() -> Any:
    """Whether the worker has a due queued job with a limit key (PostgreSQL: one look
    in revision 0019's index of such jobs)."""
    return exists().where(*_queued(), _c.limit_key.is_not(None))


@functools.cache
def plain_claim_statement() -> Prepared:
    """PostgreSQL: the claim of a worker none of whose due queued jobs has a limit key,
    in one plain statement: its next jobs by the claim index (revision 0019 keeps only
    jobs without a key there), ``FOR UPDATE SKIP LOCKED``, become running with the
    columns claim_statement writes for such a job (started now, the deadline now +
    timeout unless the job has them; no share). No limit, share or release row is read.

    When the worker has a due queued job with a key, nothing is claimed and the result
    is one row of NULLs: the caller then claims with keyed_claim_statement (a key's
    job may come first in claim order, and its limit decides)."""
    keyed = select(_keyed_queued().label("keyed")).cte("keyed")
    candidates = (
        select(_c.job_id).where(*_queued(), _c.limit_key.is_(None),
                                ~select(keyed.c.keyed).scalar_subquery())
        .order_by(_c.priority.desc(), _c.created_at_ms, _c.job_id)
        .limit(bindparam("p_limit", type_=Integer))
        .with_for_update(of=_jobs, skip_locked=True)
        .cte("plain_candidates").prefix_with("MATERIALIZED"))
    claimed = (update(_jobs)
               .where(_c.job_id == any_(func.array(select(candidates.c.job_id)
                                                   .scalar_subquery())))
               .values(status="running", updated_at_ms=NOW, limit_share=None,
                       claimed_by=bindparam("p_claimer"), **running_times(NOW))
               .returning(*_c).cte("claimed"))
    rows = (select(*claimed.c).select_from(keyed.outerjoin(claimed, true()))
            .where(or_(keyed.c.keyed, claimed.c.job_id.is_not(None))))
    return Prepared(rows, _jobs)


@functools.cache
def keyed_claim_statement(sql: SqlDialect) -> Prepared:
    """PostgreSQL: claim_statement, with its candidates found without reading the jobs
    of full keys: the worker's next jobs without a key (by the claim index), and of
    each of its keys with room (found by a skip scan of revision 0019's index of keyed
    jobs, one look per key; a key without a limit has room) its next ones, no more than
    the room, both ``FOR UPDATE SKIP LOCKED``; the best of them in claim order."""
    rooms = _rooms(sql)
    p_limit = bindparam("p_limit", type_=Integer)
    order = (_c.priority.desc(), _c.created_at_ms, _c.job_id)
    free = sql.materialized(
        select(_c.job_id, _c.limit_key, _c.priority, _c.created_at_ms)
        .where(*_queued(), _c.limit_key.is_(None)).order_by(*order).limit(p_limit)
        .with_for_update(of=_jobs, skip_locked=True).cte("free_jobs"))
    keys = limit_keys(_queued)
    open_keys = (select(keys.c.key, rooms.c.free)
                 .select_from(keys.outerjoin(rooms, rooms.c.key == keys.c.key))
                 .where(keys.c.key.is_not(None), or_(rooms.c.free.is_(None), rooms.c.free >= 1))
                 .cte("open_keys"))
    j = _jobs.alias("keyed_job")
    per_key = (select(j.c.job_id, j.c.limit_key, j.c.priority, j.c.created_at_ms)
               .where(*_queued(j.c), j.c.limit_key == open_keys.c.key)
               .order_by(j.c.priority.desc(), j.c.created_at_ms, j.c.job_id)
               .limit(func.least(p_limit, func.coalesce(open_keys.c.free, p_limit)))
               .with_for_update(of=j, skip_locked=True).lateral("per_key"))
    keyed = sql.materialized(
        select(per_key.c.job_id, per_key.c.limit_key, per_key.c.priority,
               per_key.c.created_at_ms)
        .select_from(open_keys.join(per_key, true())).cte("keyed_jobs"))
    both = union_all(select(*free.c), select(*keyed.c)).subquery("both_kinds")
    candidates = sql.materialized(
        select(*both.c).order_by(both.c.priority.desc(), both.c.created_at_ms,
                                 both.c.job_id).limit(p_limit).cte("candidates"))
    return Prepared(_claim_of(sql, rooms, candidates), _jobs)


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


def _claimed(tx: Transaction, worker_agent: str, limit: int | None, now: int,
             claimed_by: str) -> list[AssignJob]:
    """Claim the worker's next job (``limit`` None) or up to ``limit`` of them, in
    claim order, recording ``claimed_by`` as their claimer, their listeners told after
    the commit."""
    params = {"p_worker": worker_agent, "p_now": now, "p_limit": limit or 1,
              "p_claimer": claimed_by}
    if tx.sql.split_claim_indexes:
        found = _split_claimed(tx, worker_agent, params)
    else:
        found = claim_statement(tx.sql).instances(tx, params, AssignJob)
    jobs = sorted(found, key=_claim_order)
    for job in jobs:
        announce(tx, job)
    return jobs


#: Workers whose latest claim in this process met due queued jobs with a limit key:
#: their next claim goes to keyed_claim_statement at once, not through the plain one
#: first. A hint only (each statement claims rightly on its own), kept small.
_KEYED_WORKERS: set[str] = set()
_KEYED_WORKERS_KEPT = 4096


def _split_claimed(tx: Transaction, worker_agent: str, params: dict[str, Any]
                   ) -> list[AssignJob]:
    """PostgreSQL: the plain claim when the worker has no due queued job with a limit
    key, else the keyed one (limits, shares and releases read only then)."""
    if worker_agent not in _KEYED_WORKERS:
        jobs = plain_claim_statement().instances(tx, params, AssignJob)
        if not jobs or jobs[0].job_id is not None:
            return jobs
        if len(_KEYED_WORKERS) >= _KEYED_WORKERS_KEPT:
            _KEYED_WORKERS.clear()
        _KEYED_WORKERS.add(worker_agent)
    jobs = keyed_claim_statement(tx.sql).instances(tx, params, AssignJob)
    if jobs and all(job.limit_key is None for job in jobs):
        _KEYED_WORKERS.discard(worker_agent)
    return jobs


def _claim(scope: Scope, worker_agent: str, limit: int | None, claimed_by: str
           ) -> list[AssignJob]:
    """A claim, with the stalled jobs taken back first when this store's look is due
    (one transaction), else alone (one statement: one round trip in autocommit)."""
    now = now_ms()
    if rescue_due(scope.db, now):
        with scope.transaction() as tx:
            rescue_stalled(tx, now)
            return _claimed(tx, worker_agent, limit, now, claimed_by)
    with scope.one_statement() as tx:
        return _claimed(tx, worker_agent, limit, now, claimed_by)


#: A due job of the worker that no full limit holds: where claimers run side by side,
#: a claim can find nothing while one is there (it lost a key's last room to another
#: claimer after picking its jobs), and a waiter then claims again at once.
_CLAIMABLE = Prepared(
    select(_c.job_id)
    .where(_c.worker_agent == bindparam("p_worker"), _c.status == const(rules.CLAIMABLE),
           _DUE, or_(_c.limit_key.is_(None),
                     _c.limit_key.not_in(bindparam("p_full", expanding=True))))
    .limit(1))


#: PostgreSQL (revision 0019): the same, each half of the queued jobs by its own index,
#: the keyed half one look per key (the jobs of full keys are not read).
_SPLIT_QUEUED_KEYS = limit_keys(_queued)
_SPLIT_CLAIMABLE = Prepared(union_all(
    select(_c.job_id).where(*_queued(), _c.limit_key.is_(None)).limit(1),
    select(_SPLIT_QUEUED_KEYS.c.key).where(
        _SPLIT_QUEUED_KEYS.c.key.is_not(None),
        _SPLIT_QUEUED_KEYS.c.key.not_in(bindparam("p_full", expanding=True))).limit(1)
).limit(1))


def claimable(scope: Scope, worker_agent: str, full: list[str]) -> bool:
    """Whether the worker has a due queued job whose key is not one of ``full``."""
    with scope.one_read() as tx:
        query = _SPLIT_CLAIMABLE if tx.sql.split_claim_indexes else _CLAIMABLE
        return query.first(tx, {"p_worker": worker_agent, "p_now": now_ms(),
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


#: PostgreSQL (revision 0019): the same by the index of scheduled queued jobs (those
#: with a not_before_ms), not by reading every queued job of the worker.
_SPLIT_NEXT_DUE = Prepared(
    select(func.min(_c.not_before_ms).label("due"))
    .where(_c.worker_agent == bindparam("p_worker"), _c.status == const(rules.CLAIMABLE),
           _c.not_before_ms.is_not(None), _c.not_before_ms > NOW))


def next_due_ms(scope: Scope, worker_agent: str) -> int | None:
    """When the worker's next queued job that is not due yet becomes due (the time its
    not_before_ms, or its retry's back-off, ends), or None when it has none: how long a
    waiter may sleep without missing it."""
    require_id(worker_agent, "worker_agent")
    with scope.one_read() as tx:
        query = _SPLIT_NEXT_DUE if tx.sql.split_claim_indexes else _NEXT_DUE
        found = query.first(tx, {"p_worker": worker_agent, "p_now": now_ms()})
    return None if found is None or found["due"] is None else int(found["due"])
