"""The state machine's moves as SQL, beside the rules they compute (hubstore/assign_rules.py).

Every move locks the row (SELECT ... FOR UPDATE on PostgreSQL; SQLite's writing
transactions hold the database write lock from BEGIN IMMEDIATE), checks the transition
table, and writes with a compare-and-set UPDATE guarded by the status and attempt it read
(``move``, ``retry``). The routine moves skip the read: one UPDATE whose WHERE names the
statuses they start from (``rules.moving_sources``) and whose SET computes what
``rules.next_values`` writes: the direct move of ``update_assign_status``, a worker's
routine final report (``finish_statement``), the put-back of a claim
(``rules.put_back_values``), and the claim's start (``running_times``).
"""

from __future__ import annotations

import functools
from typing import Any, Unpack

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Integer,
    Text,
    and_,
    bindparam,
    case,
    or_,
    update,
)

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.execution import Prepared
from hubstore.ids import now_ms
from hubstore.models import ASSIGN_STATUSES, AssignJob, table_of
from hubstore.services.assigns.rows import (
    NAME_OF,
    announce,
    computed_from,
    lock_job,
    snapshot,
    write_guarded,
)
from hubstore.services.base import const
from hubstore.transaction import Scope, Transaction
from hubstore.types import AssignPatch, AssignStatus
from hubstore.validation import (
    counter,
    json_value,
    optional_int,
    require_duration,
    require_enum,
    require_id,
    require_key,
    require_text,
    require_time,
)

_jobs = table_of(AssignJob)


_c = _jobs.c


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
        column = c[NAME_OF[name]]
        values[column.name] = bindparam(name, type_=column.type)
    stmt = (update(_jobs)
            .where(c.job_id == bindparam("p_job_id"), in_sources(rules.moving_sources(target)),
                   and_(*kept_by_rules(sql)))
            .values(values)
            .returning(*_jobs.c))
    return Prepared(stmt, _jobs)


@functools.cache
def finish_statement(sql: SqlDialect, retryable: bool) -> Prepared:
    """A worker's final report in one guarded statement, for the common case: the job
    is queued or running, on the reported attempt, for the reporting worker, (for a
    failure) has no retry left, and its row is one the rules leave as it is (as the
    direct move's). Anything else matches no row and takes the
    general path.
    """
    worker: BindParameter[str] = bindparam("p_worker", type_=Text)
    attempt: BindParameter[int] = bindparam("p_attempt", type_=Integer)
    no_retry = _c.retry_count >= _c.max_retries if retryable else None
    return Prepared(
        update(_jobs)
        .where(_c.job_id == bindparam("p_job_id"),
               *routine_guards(sql, worker, attempt, no_retry))
        .values(finished_values(bindparam("p_status"),
                          bindparam("p_result", type_=_c.result_json.type),
                          bindparam("p_error", type_=_c.error_json.type)))
        .returning(*_c), _jobs)


def routine_guards(sql: SqlDialect, worker: Any, attempt: Any, no_retry: Any,
                    columns: Any = _c) -> list[ColumnElement[bool]]:
    """Where a final report is routine (see finish_statement): the job is active, the
    reporting ``worker``'s and on the reported ``attempt`` (SQL expressions, NULL for
    any), ``no_retry`` holds (None: nothing to check), and its row is one the rules
    leave as it is. ``columns``: the job row's (default: assign_jobs')."""
    return [in_sources(rules.ACTIVE, columns),
            or_(worker.is_(None), columns.worker_agent == worker),
            or_(attempt.is_(None), columns.attempt == attempt),
            *([] if no_retry is None else [no_retry]),
            *kept_by_rules(sql, columns)]


def finished_values(status: Any, result: Any, error: Any) -> dict[str, Any]:
    """The SET of a routine final report: the status, result and error given (SQL
    expressions), updated now, and the terminal times; the job's limit share forgotten
    (as revision 0017's trigger would)."""
    return {"status": status, "result_json": result, "error_json": error,
            "updated_at_ms": NOW, "limit_share": None, **terminal_times()}


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


def move(tx: Transaction, job: AssignJob, target: str, patch: dict[str, Any], *,
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
    updated = write_guarded(tx, job, changes)
    if before["status"] != target:
        announce(tx, updated)
    return updated


def retry(tx: Transaction, job: AssignJob, patch: dict[str, Any], now: int | None = None
          ) -> AssignJob:
    """Re-queue a locked failed or timed-out job for its next attempt, at ``now`` (else
    the clock: its back-off and deadline count from then)."""
    rules.check_transition(job.status, "queued", via_retry=True)
    now = now_ms() if now is None else now
    with computed_from(job):
        changes = rules.retry_patch(snapshot(job), patch, now)
    return move(tx, job, "queued", changes, via_retry=True, now=now)


def update_assign_status(scope: Scope, job_id: str, status: AssignStatus,
                         **patch: Unpack[AssignPatch]) -> AssignJob | None:
    """Move the job to ``status`` (the transition table applies), changing the
    named fields; a field named with None clears it. None when there is no job."""
    require_id(job_id, "job_id")
    require_enum(status, ASSIGN_STATUSES, "status")
    changes = dict(patch)
    check_patch_values(changes)
    if status in DIRECT_TARGETS and _PLAIN_PATCH.issuperset(changes):
        with scope.one_statement() as tx:
            direct = _direct_move(tx.sql, status, frozenset(changes))
            job = direct.instance(tx, {"p_job_id": job_id, "p_now": now_ms(), **changes},
                                  AssignJob)
            if job is not None:
                announce(tx, job)
                return job
    # Anything the one statement does not cover (it changed nothing): lock and move.
    with scope.transaction() as tx:
        job = lock_job(tx, job_id)
        return None if job is None else move(tx, job, status, changes)


def retry_assign(scope: Scope, job_id: str, **patch: Unpack[AssignPatch]) -> AssignJob | None:
    """Re-queue a failed or timed-out job for its next attempt (no retry budget check)."""
    require_id(job_id, "job_id")
    changes = dict(patch)
    check_patch_values(changes)
    with scope.transaction() as tx:
        job = lock_job(tx, job_id)
        return None if job is None else retry(tx, job, changes)


def put_back_claim(scope: Scope, job: AssignJob) -> bool:
    """Put back a job whose claim committed while its waiter was being cancelled:
    queued again, started and deadline as before the claim (rules.put_back_values),
    unless it moved since. True when it was put back."""
    with scope.one_statement() as tx:
        return bool(_PUT_BACK.run(tx, {"p_job_id": job.job_id, "p_now": now_ms(),
                                        "p_claimed_at": job.updated_at_ms}))
