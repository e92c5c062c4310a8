"""Periodic jobs: an assign queued at every tick of a schedule (revision 0014).

A schedule is a row with its next tick. ``run_due_schedules`` (run by the hub's
maintenance: ``run_maintenance``, ``hubstore db sweep``) queues the job of each
schedule whose tick has come, and moves the tick on, in one transaction: the schedule's
row is locked (PostgreSQL, skipping rows another process holds) and advanced by a guarded
update, so however many hub processes run it, each tick queues one job.

Catch-up after downtime: the ticks missed while nothing ran are one job, queued for the
latest of them; the schedule then goes on from the first tick after now.

Cron expressions have five fields (no seconds: six are refused), read by croniter, in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Unpack, cast

from croniter import croniter
from sqlalchemy import delete, select, update

from hubstore.errors import HubStoreError, ValidationError
from hubstore.execution import execute, from_row
from hubstore.ids import now_ms
from hubstore.models import AssignJob, AssignSchedule, table_of
from hubstore.services.assigns.creating import assign_rows, check_fields, new_job
from hubstore.services.assigns.limits import check_limit_key
from hubstore.services.base import resolve_now
from hubstore.transaction import Scope
from hubstore.types import NewAssign
from hubstore.validation import (
    MAX_DURATION_MS,
    json_value,
    require_cron,
    require_id,
    require_int,
)

_schedules = table_of(AssignSchedule)
#: The shortest interval between two ticks.
MIN_EVERY_MS = 1_000
#: The most due schedules one run takes (the rest are taken by the next run).
RUN_BATCH = 100


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _ms(moment: float) -> int:
    return round(moment * 1000)


def _checked_cron(cron: object) -> str:
    return require_cron(cron, "cron")


def next_tick(cron: str | None, every_ms: int | None, after: int) -> int:
    """The first tick of the schedule after ``after`` (ms)."""
    if cron is not None:
        return _ms(croniter(cron, _at(after)).get_next(float))
    assert every_ms is not None
    return after + every_ms


def latest_tick(cron: str | None, every_ms: int | None, due: int, now: int) -> int:
    """The latest tick at or before ``now`` of a schedule whose next tick ``due`` has
    come (``due`` <= ``now``)."""
    if cron is not None:
        return max(due, _ms(croniter(cron, _at(now + 1)).get_prev(float)))
    assert every_ms is not None
    return due + (now - due) // every_ms * every_ms


def set_assign_schedule(scope: Scope, name: str, supervisor_agent: str, worker_agent: str,
                        *, cron: str | None = None, every_ms: int | None = None,
                        **job: Unpack[NewAssign]) -> AssignSchedule:
    """Queue an assign from ``supervisor_agent`` to ``worker_agent`` at every tick of
    ``cron`` (a cron expression, UTC) or every ``every_ms`` milliseconds (exactly one
    of the two); ``job`` holds assign_async's keyword arguments for each job (task,
    payload, priority, max_retries, timeout_ms, limit_key, unique_key, ...). Replaces
    the schedule of that name; its next tick is the first after now."""
    check_limit_key(name, "name")
    require_id(supervisor_agent, "supervisor_agent")
    require_id(worker_agent, "worker_agent")
    if (cron is None) == (every_ms is None):
        raise ValidationError("a schedule has either cron or every_ms, not both nor neither")
    rule = _checked_cron(cron) if cron is not None else None
    interval = None if every_ms is None else require_int(
        every_ms, "every_ms", minimum=MIN_EVERY_MS, maximum=MAX_DURATION_MS)
    check_fields(job, "the schedule's job")
    for fixed in ("job_id", "status", "deadline_ms", "not_before_ms"):
        if fixed in job:
            raise ValidationError(f"a schedule's job cannot name {fixed}: each tick makes "
                                  "a new job, queued then")
    new_job(supervisor_agent, worker_agent, job)  # every field checked now
    json_value(job, "job")
    now = now_ms()
    values = {"cron": rule, "every_ms": interval, "supervisor_agent": supervisor_agent,
              "worker_agent": worker_agent, "job_json": job,
              "next_due_ms": next_tick(rule, interval, now), "updated_at_ms": now}
    with scope.transaction() as tx:
        stmt = (tx.sql.insert(_schedules).values(name=name, created_at_ms=now, **values)
                .on_conflict_do_update(index_elements=[_schedules.c.name], set_=values)
                .returning(*_schedules.c))
        return from_row(AssignSchedule, execute(tx, stmt).mappings().one())


def get_assign_schedules(scope: Scope) -> dict[str, AssignSchedule]:
    """Every schedule by its name (in name order)."""
    with scope.one_read() as tx:
        rows = execute(tx, select(_schedules).order_by(_schedules.c.name)).mappings().all()
    return {str(row["name"]): from_row(AssignSchedule, row) for row in rows}


def remove_assign_schedule(scope: Scope, name: str) -> bool:
    """Remove the schedule ``name`` (jobs it queued stay); True when there was one."""
    check_limit_key(name, "name")
    with scope.one_statement() as tx:
        return bool(execute(tx, delete(_schedules).where(_schedules.c.name == name)).rowcount)


def run_due_schedules(scope: Scope, now_ms: int | None = None) -> list[AssignJob]:
    """Queue the job of every schedule whose tick has come (at most RUN_BATCH), once per
    tick whatever the number of processes doing it; the jobs queued. Ticks missed while
    nothing ran are one job, for the latest of them. A tick whose job's ``unique_key``
    is held by a live job queues nothing and is not in the list."""
    now = resolve_now(now_ms)
    c = _schedules.c
    due = (select(_schedules).where(c.next_due_ms <= now).order_by(c.next_due_ms, c.name)
           .limit(RUN_BATCH).with_for_update(skip_locked=True))
    queued: list[AssignJob] = []
    with scope.transaction() as tx:
        for row in execute(tx, due).mappings().all():
            schedule = from_row(AssignSchedule, row)
            tick = latest_tick(schedule.cron, schedule.every_ms, schedule.next_due_ms, now)
            [job] = assign_rows(tx, [new_job(schedule.supervisor_agent,
                                              schedule.worker_agent,
                                              cast(NewAssign, schedule.job))])
            moved = execute(tx, update(_schedules).where(
                c.name == schedule.name, c.next_due_ms == schedule.next_due_ms).values(
                next_due_ms=next_tick(schedule.cron, schedule.every_ms, now),
                last_due_ms=tick, last_job_id=job.job_id, updated_at_ms=now))
            if moved.rowcount != 1:  # (the row is locked: never reached)
                raise HubStoreError(
                    f"schedule {schedule.name} moved while its tick was being queued")
            if not job.deduplicated:  # (its unique key held a live job: none queued)
                queued.append(job)
    return queued

