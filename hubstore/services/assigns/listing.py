"""Listing assign jobs: ``list_assigns`` (the reference's: the first 100 at most) and
``page_assigns`` (every job, page after page, by a cursor).

Both list the most recently updated first, and take the same filters. A page starts
after the cursor's (updated_at_ms, job_id), so paging is as fast on the thousandth page
as on the first: without a worker or supervisor filter, each status is read from the
reference's idx_assign_jobs_status (status, updated_at_ms DESC) and the few rows each
gives are merged, so no listing reads the whole table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select, union_all

from hubstore import assign_rules as rules
from hubstore.errors import ValidationError, describe
from hubstore.execution import execute, from_row
from hubstore.models import ASSIGN_STATUSES, AssignJob, AssignLimit, table_of
from hubstore.results import AssignPage
from hubstore.services.base import const
from hubstore.transaction import Scope
from hubstore.types import AssignStatus
from hubstore.validation import (
    INT64_MAX,
    INT64_MIN,
    as_number,
    clamp,
    optional_int,
    optional_lookup,
    require_enum,
    require_int,
    require_time,
)

_jobs = table_of(AssignJob)
_c = _jobs.c
_ORDER = (_c.updated_at_ms.desc(), _c.job_id.desc())
#: The most jobs one page holds.
MAX_PAGE = 1_000
_CURSOR = re.compile(r"(-?[0-9]{1,19}):(.+)", re.DOTALL)


def _filters(supervisor_agent: object, worker_agent: object, status: object,
             statuses: Any, trace_id: object, correlation_id: object,
             active_before_ms: object) -> tuple[list[ColumnElement[bool]], list[str]]:
    """The listing's filters checked (ValidationError otherwise): the conditions on
    the columns other than status, and the statuses wanted ([] for any)."""
    for name, value in (("supervisor_agent", supervisor_agent),
                        ("worker_agent", worker_agent), ("trace_id", trace_id),
                        ("correlation_id", correlation_id)):
        optional_lookup(value, name)
    if statuses and (isinstance(statuses, str | bytes)
                     or not isinstance(statuses, Sequence | set | frozenset)):
        raise ValidationError(
            f"statuses must be a list of statuses, got {type(statuses).__name__}")
    if status is not None and status != "":
        require_enum(status, ASSIGN_STATUSES, "status")  # checked even beside statuses
    wanted = list(statuses) if statuses else ([status] if status else [])
    for item in wanted:
        require_enum(item, ASSIGN_STATUSES, "status")
    conditions: list[ColumnElement[bool]] = [
        column == value for column, value in (
            (_c.supervisor_agent, supervisor_agent), (_c.worker_agent, worker_agent),
            (_c.trace_id, trace_id), (_c.correlation_id, correlation_id)) if value]
    before = as_number(active_before_ms) if active_before_ms is not None else None
    if before is not None:
        bound = max(INT64_MIN, min(int(before), INT64_MAX))  # the same rows
        conditions += [_c.deadline_ms.is_not(None), _c.deadline_ms <= bound]
    return conditions, [str(item) for item in wanted]


def list_assigns(scope: Scope, supervisor_agent: str | None = None,
                 worker_agent: str | None = None, status: AssignStatus | None = None,
                 statuses: Sequence[AssignStatus] | None = None,
                 trace_id: str | None = None,
                 correlation_id: str | None = None, active_before_ms: object = None,
                 limit: object = 50) -> list[AssignJob]:
    """Jobs matching every given filter, most recently updated first (1..100)."""
    conditions, wanted = _filters(supervisor_agent, worker_agent, status, statuses,
                                  trace_id, correlation_id, active_before_ms)
    stmt = select(_jobs).where(*conditions)
    if wanted:
        stmt = stmt.where(_c.status.in_(wanted))
    stmt = stmt.order_by(*_ORDER).limit(clamp(limit, 50, 1, 100))
    with scope.transaction(write=False) as tx:
        return [from_row(AssignJob, row) for row in execute(tx, stmt).mappings()]


def page_cursor(job: AssignJob) -> str:
    """The cursor of the page that starts after ``job``."""
    return f"{job.updated_at_ms}:{job.job_id}"


def _after(cursor: object) -> list[ColumnElement[bool]]:
    """The conditions of the rows after ``cursor`` (ValidationError for a bad one): the
    time bound alone too, so that the indexes on updated_at_ms serve it."""
    match = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if match is None:
        raise ValidationError(f"after must be a cursor that page_assigns returned, not "
                              f"{describe(cursor)}")
    at = require_time(int(match.group(1)), "after's time")
    job_id = match.group(2)
    return [_c.updated_at_ms <= at,
            or_(_c.updated_at_ms < at, and_(_c.updated_at_ms == at, _c.job_id < job_id))]


def page_assigns(scope: Scope, supervisor_agent: str | None = None,
                 worker_agent: str | None = None, status: AssignStatus | None = None,
                 statuses: Sequence[AssignStatus] | None = None,
                 trace_id: str | None = None, correlation_id: str | None = None,
                 active_before_ms: int | None = None, limit: int = 50,
                 after: str | None = None) -> AssignPage:
    """A page of the jobs matching every given filter (``list_assigns``'), most recently
    updated first: ``limit`` jobs (1..MAX_PAGE) after the cursor ``after`` (None: from
    the newest), and the cursor of the next page (None after the last)."""
    optional_int(active_before_ms, "active_before_ms")  # (list_assigns' reads Number())
    conditions, wanted = _filters(supervisor_agent, worker_agent, status, statuses,
                                  trace_id, correlation_id, active_before_ms)
    size = require_int(limit, "limit", minimum=1, maximum=MAX_PAGE)
    if after is not None:
        conditions += _after(after)
    query: Any
    if supervisor_agent or worker_agent or trace_id or correlation_id:
        if wanted:
            conditions.append(_c.status.in_(wanted))
        query = select(_jobs).where(*conditions).order_by(*_ORDER).limit(size + 1)
    else:  # one range of the status index per status, merged
        parts = [select(_jobs).where(_c.status == const(one), *conditions)
                 .order_by(*_ORDER).limit(size + 1).subquery()
                 for one in (wanted or ASSIGN_STATUSES)]
        merged = union_all(*(select(part) for part in parts)).subquery()
        query = (select(merged).order_by(merged.c.updated_at_ms.desc(),
                                         merged.c.job_id.desc()).limit(size + 1))
    with scope.transaction(write=False) as tx:
        rows = [from_row(AssignJob, row) for row in execute(tx, query).mappings()]
    jobs = rows[:size]
    return AssignPage(jobs, page_cursor(jobs[-1]) if len(rows) > size else None)


def waiting_reason(job: Mapping[str, Any], limits: Mapping[str, AssignLimit], now: int
                   ) -> tuple[int | None, str]:
    """Why a queued job (its attribute-keyed values) is not claimed yet, for people: when
    it becomes due (None: it is due) and why ("scheduled", "back-off after retry N", or
    the limit that holds it: "limit codex: 2/2 running", "limit gemini: 60/60 starts
    in 1m"); (None, "") for a job that is not queued, or is due with room."""
    held = rules.held_until(job, now)
    if held is not None:
        at, why = held
        return at, (f"back-off after retry {job['retry_count']}" if why == "back-off"
                    else "scheduled")
    limit = limits.get(job["limit_key"] or "") if job["status"] == rules.CLAIMABLE else None
    if limit is None:
        return None, ""
    running_full, rate_full, _ = limit.fullness(now)
    if running_full:
        return None, f"limit {limit.key}: {limit.running}/{limit.max_running} running"
    if rate_full:
        window = rules.duration_text(limit.per_ms or 0)
        return None, (f"limit {limit.key}: {limit.recent_starts(now)}/{limit.max_starts} "
                      f"starts in {window}")
    return None, ""


#: The job's values that :func:`waiting_reason` reads.
_WAITING_FIELDS = ("status", "not_before_ms", "retry_count", "last_retry_at_ms",
                   "retry_backoff_ms", "limit_key")


def job_waiting_reason(job: AssignJob, limits: Mapping[str, AssignLimit], now: int
                       ) -> tuple[int | None, str]:
    """:func:`waiting_reason` of an :class:`AssignJob` as the store returns it."""
    return waiting_reason({name: getattr(job, name) for name in _WAITING_FIELDS}, limits,
                          now)


def waiting_text(job: AssignJob, limits: Mapping[str, AssignLimit], now: int) -> str:
    """Why a queued job is not running yet, in the words the console's jobs pages and
    ``hubstore jobs`` both print ('' for a job that is not queued): when it becomes due
    and why, the limit that holds it, or, when nothing holds it, that it waits for its
    worker to claim it (no worker of that name is claiming, or all of them are busy)."""
    if job.status != rules.CLAIMABLE:
        return ""
    at, why = job_waiting_reason(job, limits, now)
    if at is not None:
        return f"{why}: due {utc_text(at)} UTC"
    return why or f"due: waiting for worker {job.worker_agent!r} to claim it"


def utc_text(ms: int) -> str:
    """A millisecond time for people, in UTC (``2026-12-05 07:55:30``; the number itself
    for one no calendar holds)."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ms)
