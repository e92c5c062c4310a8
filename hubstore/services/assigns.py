"""Assign jobs at store level: create, read, list, move and retry.

Every move locks the row (SELECT ... FOR UPDATE on PostgreSQL; SQLite's writing units
of work hold the database write lock from BEGIN IMMEDIATE), checks the transition table,
and writes with a compare-and-set UPDATE guarded by the status and attempt it read.
The routine moves of update_assign_status skip the read: one UPDATE whose WHERE names the
statuses they start from and whose SET computes what the rules write (``_direct_move``).

Rows are read and written with Core statements built once, and handed out as transient
``AssignJob`` instances (``from_row``): on SQLite every write holds the one database
write lock, so the time spent inside it is what limits many processes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any, Unpack

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Text,
    and_,
    bindparam,
    case,
    insert,
    or_,
    select,
    text,
    update,
)

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.errors import DatabaseBusy, HubStoreError
from hubstore.execution import Prepared, from_row
from hubstore.ids import now_ms, uuidv7
from hubstore.models import (
    ASSIGN_STATUSES,
    DEDUPLICATED,
    LIVE_WHERE,
    TIMEOUT_FROM,
    AssignJob,
    table_of,
)
from hubstore.services.base import const
from hubstore.services.limits import check_limit_key
from hubstore.transaction import Scope, Transaction
from hubstore.types import AssignPatch, AssignStatus, TimeoutFrom
from hubstore.validation import (
    as_number,
    clamp,
    counter,
    json_value,
    lookup_key,
    optional_id,
    optional_int,
    require_duration,
    require_enum,
    require_id,
    require_int,
    require_key,
    require_text,
    require_time,
)

_jobs = table_of(AssignJob)
#: Attribute key -> column name (they differ for the JSON columns: payload -> payload_json).
_NAME_OF: dict[str, str] = {
    attr.key: str(attr.columns[0].name) for attr in AssignJob.__mapper__.column_attrs}
_COLUMNS = list(_NAME_OF)

_BY_ID = select(_jobs).where(_jobs.c.job_id == bindparam("p_job_id"))
_SELECT = Prepared(_BY_ID, _jobs)
# SQLite renders no FOR UPDATE: its write lock serves.
_LOCK = Prepared(_BY_ID.with_for_update(), _jobs)
_INSERT_ROW = insert(_jobs).values({c.name: bindparam(c.name) for c in _jobs.c})
_INSERT = Prepared(_INSERT_ROW, _jobs)
#: The queued or running job that holds a unique key.
_LIVE_WITH_KEY = Prepared(
    select(_jobs).where(_jobs.c.unique_key == bindparam("p_unique_key", type_=Text),
                        _jobs.c.status.in_([const("queued"), const("running")])), _jobs)
#: How often an assign with a unique key tries again when the job that held the key
#: ended between its insert (which found the key held) and its read of that job.
UNIQUE_TRIES = 5
_GUARDS = frozenset({"p_job_id", "p_status", "p_attempt"})


@functools.cache
def _cas(columns: frozenset[str]) -> Prepared:
    """The guarded compare-and-set that writes ``columns``, built once per column set
    (only the columns that change are written, so untouched indexes stay untouched)."""
    stmt = (update(_jobs)
            .where(_jobs.c.job_id == bindparam("p_job_id"),
                   _jobs.c.status == bindparam("p_status"),
                   _jobs.c.attempt == bindparam("p_attempt"))
            .values({name: bindparam(name) for name in sorted(columns)})
            .returning(*_jobs.c))
    return Prepared(stmt, _jobs)


#: The moves _direct_move makes, and the patch fields it writes as given (no rule
#: reads them).
DIRECT_TARGETS = frozenset({"running", *rules.TERMINAL})
_PLAIN_PATCH = frozenset({"result", "error", "last_message_id"})
#: The time of a move, bound once per statement.
NOW: BindParameter[int] = bindparam("p_now", type_=BigInteger)


def _unset(column: ColumnElement[Any]) -> ColumnElement[bool]:
    """The rules' ``not value``: a time that is NULL or 0."""
    return or_(column.is_(None), column == 0)


def in_sources(statuses: tuple[str, ...], columns: Any = None) -> ColumnElement[bool]:
    """The job's status is one of ``statuses`` (a source list of the rule table), each
    written as a constant so that the partial indexes on status serve it. ``columns``:
    another FROM item's columns of a job row (default: assign_jobs')."""
    c = _jobs.c if columns is None else columns
    return or_(*(c.status == const(status) for status in statuses))


def running_times(at: ColumnElement[Any] = NOW) -> dict[str, Any]:
    """What next_values writes, as SQL, when a job becomes running at ``at`` (now,
    bound): started then unless it has a start time, and the deadline then + timeout
    unless it has one."""
    c = _jobs.c
    return {"started_at_ms": case((_unset(c.started_at_ms), at), else_=c.started_at_ms),
            "deadline_ms": case((_unset(c.deadline_ms), at + c.timeout_ms),
                                else_=c.deadline_ms)}


def terminal_times() -> dict[str, Any]:
    """What next_values writes, as SQL, when a job becomes terminal: no deadline, and
    completed now unless it has a completion time."""
    c = _jobs.c
    return {"deadline_ms": None,
            "completed_at_ms": case((_unset(c.completed_at_ms), NOW),
                                    else_=c.completed_at_ms)}


def put_back_times() -> dict[str, Any]:
    """What put_back_values writes, as SQL: the start time and deadline the job had
    before the claim made at ``p_claimed_at`` set them."""
    c = _jobs.c
    claimed: BindParameter[int] = bindparam("p_claimed_at", type_=BigInteger)
    return {"started_at_ms": case((c.started_at_ms == claimed, None), else_=c.started_at_ms),
            "deadline_ms": case((c.deadline_ms == claimed + c.timeout_ms, None),
                                else_=c.deadline_ms)}


#: A claim put back (the rule table's put-back move), guarded by the claim's time:
#: a job that moved since is left as it is.
_PUT_BACK = Prepared(
    update(_jobs)
    .where(_jobs.c.job_id == bindparam("p_job_id"),
           in_sources(rules.allowed_sources("queued", via_put_back=True)),
           _jobs.c.updated_at_ms == bindparam("p_claimed_at", type_=BigInteger))
    .values(status=const("queued"), updated_at_ms=NOW, **put_back_times()))


def kept_by_rules(sql: SqlDialect, columns: Any = None) -> list[ColumnElement[bool]]:
    """Where next_values would rewrite none of the columns a patch does not name: the
    counters and durations are whole numbers already in their ranges, the payload is
    not JSON null, and the times are NULL or whole numbers (SQLite keeps any type).
    ``columns``: another FROM item's columns of a job row (default: assign_jobs')."""
    c = _jobs.c if columns is None else columns
    guards = [c.attempt >= 1, c.retry_count >= 0, c.max_retries >= 0,
              c.priority.between(1, 9),
              c.timeout_ms.between(rules.MIN_TIMEOUT_MS, rules.MAX_TIMEOUT_MS),
              c.ttl_ms.between(rules.MIN_TIMEOUT_MS, rules.MAX_TIMEOUT_MS)]
    guards += sql.whole_numbers([c.attempt, c.retry_count, c.max_retries, c.priority,
                                 c.timeout_ms, c.ttl_ms], nullable=False)
    guards += sql.whole_numbers([c.deadline_ms, c.started_at_ms, c.completed_at_ms],
                                nullable=True)
    guards.append(sql.json_not_null(c.payload_json))
    return guards


@functools.cache
def _direct_move(sql: SqlDialect, target: str, fields: frozenset[str]) -> Prepared:
    """A status move in one guarded UPDATE, for the common case: the job moves from
    queued (to running) or from an active status (to a terminal one), its row is one the
    rules leave as it is, and the patch names only fields written as given. The SET
    computes what move() writes. Anything else matches no row and takes move()."""
    c = _jobs.c
    values: dict[str, Any] = {"status": const(target), "updated_at_ms": NOW}
    values.update(running_times() if target == "running" else terminal_times())
    for name in sorted(fields):
        column = c[_NAME_OF[name]]
        values[column.name] = bindparam(name, type_=column.type)
    stmt = (update(_jobs)
            .where(c.job_id == bindparam("p_job_id"), in_sources(rules.moving_sources(target)),
                   and_(*kept_by_rules(sql)))
            .values(values)
            .returning(*_jobs.c))
    return Prepared(stmt, _jobs)


class ConcurrentUpdate(HubStoreError):
    """A guarded update found the row changed under it (a bug: rows are locked first)."""

    code = "ASSIGN_CONCURRENT_UPDATE"


def snapshot(job: AssignJob) -> dict[str, Any]:
    """The job's attributes as a plain mapping (listeners get a copy made from it, the
    row as it was at that move)."""
    loaded = job.__dict__  # (read past the instrumented attributes: 24 per snapshot)
    return {key: loaded[key] if key in loaded else getattr(job, key) for key in _COLUMNS}


def by_column(values: dict[str, Any]) -> dict[str, Any]:
    """Attribute-keyed values keyed by column name, as Core parameters."""
    return {_NAME_OF[key]: value for key, value in values.items()}


def frozen_copy(job: AssignJob) -> AssignJob:
    """A copy of the row as it is now, for a listener: what it is told about must not
    change when a later move in the same unit of work, or the caller, changes the job."""
    return from_row(AssignJob, by_column(copy.deepcopy(snapshot(job))))


def announce(uow: Transaction, job: AssignJob) -> None:
    """Queue the job's status event for the listeners, told after the commit.

    Without listeners (subscribed when the move is made) there is nothing to copy.
    """
    if uow.db.assign_listeners:
        uow.emit_assign_event(rules.status_event(snapshot(job)), frozen_copy(job))


def lock_job(uow: Transaction, job_id: str) -> AssignJob | None:
    """The job, freshly read and locked for this transaction."""
    return _LOCK.instance(uow, {"p_job_id": job_id}, AssignJob)


def write_guarded(uow: Transaction, job: AssignJob, changes: dict[str, Any]) -> AssignJob:
    """UPDATE the job's ``changes`` where it still has the status and attempt read in
    ``job``; ConcurrentUpdate when it does not (the row lock makes that a bug)."""
    params = by_column(changes)
    params.update(p_job_id=job.job_id, p_status=job.status, p_attempt=job.attempt)
    moved = _cas(frozenset(params) - _GUARDS).instance(uow, params, AssignJob)
    if moved is None:
        raise ConcurrentUpdate(f"assign job {job.job_id} changed while it was being moved")
    return moved


def _same(old: Any, new: Any) -> bool:
    """Whether writing ``new`` over ``old`` changes nothing (True is not 1 here)."""
    if old is new:
        return True
    if type(old) is not type(new) or isinstance(new, dict | list):
        return False
    return bool(old == new)


def check_patch_values(patch: dict[str, Any]) -> None:
    """Validate a patch before anything is written."""
    rules.check_patch(patch)
    for name in ("supervisor_agent", "worker_agent", "trace_id", "correlation_id"):
        if patch.get(name) is not None:
            require_id(patch[name], name)
    if patch.get("last_message_id") is not None:
        require_id(patch["last_message_id"], "last_message_id")
    if patch.get("topic") is not None:
        require_key(patch["topic"], "topic")
    if patch.get("task") is not None:
        require_text(patch["task"], "task")
    for name in ("deadline_ms", "started_at_ms", "completed_at_ms", "last_retry_at_ms"):
        optional_int(patch.get(name), name)
    if patch.get("not_before_ms") is not None:
        require_time(patch["not_before_ms"], "not_before_ms")
    if patch.get("retry_backoff_ms") is not None:
        require_duration(patch["retry_backoff_ms"], "retry_backoff_ms")
    for name, minimum in (("attempt", 1), ("retry_count", 0), ("max_retries", 0)):
        if patch.get(name) is not None:
            counter(patch[name], name, default=minimum, minimum=minimum)
    for name in ("payload", "result", "error"):
        json_value(patch.get(name), name)


def move(uow: Transaction, job: AssignJob, target: str, patch: dict[str, Any], *,
         via_retry: bool = False, now: int | None = None) -> AssignJob:
    """Move a locked job to ``target`` at ``now`` (else the clock); listeners hear of a
    status change after commit."""
    if rules.check_transition(job.status, target, via_retry=via_retry) is rules.Move.NOOP:
        return job
    before = snapshot(job)
    with computed_from(job):
        values = rules.next_values(before, target, patch, now_ms() if now is None else now)
    changes = {key: value for key, value in values.items() if not _same(before[key], value)}
    changes.update(status=target, updated_at_ms=values["updated_at_ms"])
    updated = write_guarded(uow, job, changes)
    if before["status"] != target:
        announce(uow, updated)
    return updated


def retry(uow: Transaction, job: AssignJob, patch: dict[str, Any], now: int | None = None
          ) -> AssignJob:
    """Re-queue a locked failed or timed-out job for its next attempt, at ``now`` (else
    the clock: its back-off and deadline count from then)."""
    rules.check_transition(job.status, "queued", via_retry=True)
    now = now_ms() if now is None else now
    with computed_from(job):
        changes = rules.retry_patch(snapshot(job), patch, now)
    return move(uow, job, "queued", changes, via_retry=True, now=now)


@contextlib.contextmanager
def computed_from(job: AssignJob) -> Iterator[None]:
    """Rules computed from a locked job's row. A TypeError there is the row's: a number
    column holding text, which only a hand edit can store (SQLite keeps any type it is
    given). It is raised as a HubStoreError naming the job, before anything is written."""
    try:
        yield
    except TypeError as exc:
        raise HubStoreError(
            f"assign job {job.job_id!r} cannot be moved: its row holds a value of the "
            f"wrong type ({exc}); correct the row first") from exc


@functools.cache
def _insert_unless_held(sql: SqlDialect) -> Prepared:
    """The INSERT of a job with a unique key, which writes nothing when a queued or
    running job holds the key (revision 0014's partial unique index; PostgreSQL waits
    for a transaction inserting the same key, then sees its outcome)."""
    return Prepared(
        sql.insert(_jobs).values({c.name: bindparam(c.name) for c in _jobs.c})
        .on_conflict_do_nothing(index_elements=[_jobs.c.unique_key],
                                index_where=text(LIVE_WHERE))
        .returning(*_jobs.c), _jobs)


def insert_job(uow: Transaction, row: dict[str, Any]) -> AssignJob:
    """Write the job ``row`` (attribute-keyed) and return it; with a unique key that a
    queued or running job holds, write nothing and return that job instead, its
    ``deduplicated`` True. Listeners hear of a job written (after the commit)."""
    key = row["unique_key"]
    if key is None:
        job = _INSERT.inserted(uow, by_column(row), AssignJob)
        announce(uow, job)
        return job
    for _ in range(UNIQUE_TRIES):
        written = _insert_unless_held(uow.sql).instance(uow, by_column(row), AssignJob)
        if written is not None:
            announce(uow, written)
            return written
        held = _LIVE_WITH_KEY.instance(uow, {"p_unique_key": key}, AssignJob)
        if held is not None:
            held.__dict__[DEDUPLICATED] = True
            return held
    raise DatabaseBusy(f"unique_key {key!r} changed hands {UNIQUE_TRIES} times while a job "
                       "was being written with it; try again")


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
    make_row = new_job(
        supervisor_agent, worker_agent, topic, task, payload, status, attempt,
        retry_count, max_retries, priority, ttl_ms, timeout_ms, deadline_ms, trace_id,
        correlation_id, last_message_id, result, error, job_id, not_before_ms,
        retry_backoff_ms, limit_key, unique_key, timeout_from)
    # (one INSERT ... RETURNING; with a unique key, a look for its holder may follow)
    with (scope.one_statement() if unique_key is None else scope.transaction()) as uow:
        return insert_job(uow, make_row(now_ms()))


def new_job(supervisor_agent: str, worker_agent: str, topic: str = "assign.job",
            task: str = "", payload: Any = None, status: AssignStatus = "queued",
            attempt: int = 1, retry_count: int = 0, max_retries: int = 0,
            priority: object = 5, ttl_ms: object = 600_000, timeout_ms: object = 600_000,
            deadline_ms: int | None = None, trace_id: str | None = None,
            correlation_id: str | None = None, last_message_id: str | None = None,
            result: Any = None, error: Any = None, job_id: str | None = None,
            not_before_ms: int | None = None, retry_backoff_ms: int = 0,
            limit_key: str | None = None, unique_key: str | None = None,
            timeout_from: TimeoutFrom = "create") -> Callable[[int], dict[str, Any]]:
    """create_assign's arguments checked (ValidationError before anything is written),
    and the function that makes the job's row (attribute-keyed) at a given time."""
    require_id(supervisor_agent, "supervisor_agent")
    require_id(worker_agent, "worker_agent")
    require_enum(status, ASSIGN_STATUSES, "status")
    body = json_value(payload, "payload", default={})
    json_value(result, "result")
    json_value(error, "error")
    optional_id(job_id, "job_id")
    optional_id(trace_id, "trace_id")
    optional_id(correlation_id, "correlation_id")
    optional_id(last_message_id, "last_message_id")
    topic = require_key(topic, "topic") if topic else "assign.job"
    task = require_text(task, "task") if task else ""
    first_attempt = counter(attempt, "attempt", default=1, minimum=1)
    retries = counter(retry_count, "retry_count", default=0, minimum=0)
    retry_limit = counter(max_retries, "max_retries", default=0, minimum=0)
    timeout = rules.clamp_timeout(timeout_ms)
    not_before = None if not_before_ms is None else require_time(not_before_ms,
                                                                   "not_before_ms")
    backoff = require_duration(retry_backoff_ms, "retry_backoff_ms")
    if limit_key is not None:
        check_limit_key(limit_key)
    if unique_key is not None:
        require_id(unique_key, "unique_key")
    deadline = None if deadline_ms is None else as_number(deadline_ms)
    if deadline is not None:
        deadline = require_int(int(deadline), "deadline_ms")
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


def get_assign(scope: Scope, job_id: str) -> AssignJob | None:
    """The job, or None."""
    lookup_key(job_id, "job_id")
    with scope.one_read() as uow:
        return _SELECT.instance(uow, {"p_job_id": job_id}, AssignJob)


def update_assign_status(scope: Scope, job_id: str, status: AssignStatus,
                         **patch: Unpack[AssignPatch]) -> AssignJob | None:
    """Move the job to ``status`` (the transition table applies), changing the
    named fields; a field named with None clears it. None when there is no job."""
    require_id(job_id, "job_id")
    require_enum(status, ASSIGN_STATUSES, "status")
    changes = dict(patch)
    check_patch_values(changes)
    if status in DIRECT_TARGETS and _PLAIN_PATCH.issuperset(changes):
        with scope.one_statement() as uow:
            direct = _direct_move(uow.sql, status, frozenset(changes))
            job = direct.instance(uow, {"p_job_id": job_id, "p_now": now_ms(), **changes},
                                  AssignJob)
            if job is not None:
                announce(uow, job)
                return job
    # Anything the one statement does not cover (it changed nothing): lock and move.
    with scope.transaction() as uow:
        job = lock_job(uow, job_id)
        return None if job is None else move(uow, job, status, changes)


def retry_assign(scope: Scope, job_id: str, **patch: Unpack[AssignPatch]) -> AssignJob | None:
    """Re-queue a failed or timed-out job for its next attempt (no retry budget check)."""
    require_id(job_id, "job_id")
    changes = dict(patch)
    check_patch_values(changes)
    with scope.transaction() as uow:
        job = lock_job(uow, job_id)
        return None if job is None else retry(uow, job, changes)


def put_back_claim(scope: Scope, job: AssignJob) -> bool:
    """Put back a job whose claim committed while its waiter was being cancelled:
    queued again, started and deadline as before the claim (rules.put_back_values),
    unless it moved since. True when it was put back."""
    with scope.one_statement() as uow:
        return bool(_PUT_BACK.run(uow, {"p_job_id": job.job_id, "p_now": now_ms(),
                                        "p_claimed_at": job.updated_at_ms}))
