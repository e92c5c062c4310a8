"""The console's reads that no store method makes: each one statement on an index.

- :func:`snapshot`: the figures (the trigger-kept counters, as ``get_hub_stats``), agents
  by status (``idx_agents_status``: one entry per agent), pending human requests
  (``idx_human_requests_state``: one entry per pending request), the jobs finished in the
  last minute and each status's latest update (``idx_assign_jobs_status``, a range per
  status). What the overview, /metrics and the live updates show.
- :func:`page_jobs`: jobs newest-updated first, a page at a time after a keyset
  cursor (paging past any count): a filter on status, worker or supervisor reads its
  index in order; without one, one range per status, merged.
- :func:`worker_depths`: queued and running jobs per worker.
- :func:`messages_by_id`: the messages of a page of dead letters.

They run in a read-only unit of work of the sync store (the console calls them on the
async store's lanes, off the event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, literal, or_, select, union_all

from hubstore.execution import execute, from_row
from hubstore.ids import now_ms
from hubstore.models import ASSIGN_STATUSES, Agent, AssignJob, HumanRequest, Message, table_of
from hubstore.services.stats import counts
from hubstore.store import HubStore
from hubstore.transaction import Transaction

_jobs = table_of(AssignJob)
_messages = table_of(Message)
_agents = table_of(Agent)
_humans = table_of(HumanRequest)
#: The statuses a job ends in (those a "finished" count reads).
TERMINAL = tuple(s for s in ASSIGN_STATUSES if s not in ("queued", "running"))
#: Jobs a page shows at most.
MAX_PAGE = 100
#: Workers the overview lists at most (those with the most queued jobs).
MAX_WORKERS = 50
WINDOW_MS = 60_000


@dataclass(frozen=True)
class Snapshot:
    """The hub at one moment, from counters and index ranges only."""

    figures: dict[str, int]
    agents_by_status: dict[str, int]
    pending_human_requests: int
    finished_last_minute: int
    latest_updates: tuple[tuple[str, int | None], ...] = field(default=())

    @property
    def jobs_by_status(self) -> dict[str, int]:
        return {name[len("assign_"):]: value for name, value in sorted(self.figures.items())
                if name.startswith("assign_")}

    def fingerprint(self) -> tuple[Any, ...]:
        """What changes when anything the console shows live changes."""
        return (tuple(sorted(self.figures.items())), tuple(sorted(self.agents_by_status.items())),
                self.pending_human_requests, self.latest_updates)


def _latest(status: str) -> Select[Any]:
    return (select(literal(status).label("status"), _jobs.c.updated_at_ms)
            .where(_jobs.c.status == status)
            .order_by(_jobs.c.updated_at_ms.desc()).limit(1))


AGENTS_BY_STATUS = select(_agents.c.status, func.count()).group_by(_agents.c.status)
PENDING = select(func.count()).select_from(_humans).where(_humans.c.state == "pending")
LATEST = union_all(*(_latest(s).subquery().select() for s in ASSIGN_STATUSES))


def finished_since(since: int) -> Select[Any]:
    return (select(func.count()).select_from(_jobs)
            .where(_jobs.c.status.in_(TERMINAL), _jobs.c.updated_at_ms >= since))


def read_snapshot(uow: Transaction) -> Snapshot:
    """The :class:`Snapshot` in ``uow``."""
    figures = counts(uow)
    agents = {str(s): int(n) for s, n in execute(uow, AGENTS_BY_STATUS)}
    pending = int(execute(uow, PENDING).scalar_one())
    finished = int(execute(uow, finished_since(now_ms() - WINDOW_MS)).scalar_one())
    latest = {str(s): (None if u is None else int(u)) for s, u in execute(uow, LATEST)}
    return Snapshot(figures, agents, pending, finished,
                    tuple((s, latest.get(s)) for s in ASSIGN_STATUSES))


def snapshot(store: HubStore) -> Snapshot:
    """The :class:`Snapshot`, in a read-only unit of work of its own."""
    with store.unit_of_work(write=False) as uow:
        return read_snapshot(uow)


def worker_depths(store: HubStore) -> list[tuple[str, int, int]]:
    """(worker, queued, running) for the workers with the most queued jobs."""
    c = _jobs.c
    stmt = (select(c.worker_agent, c.status, func.count().label("n"))
            .where(c.status.in_(("queued", "running")))
            .group_by(c.worker_agent, c.status))
    depths: dict[str, list[int]] = {}
    with store.unit_of_work(write=False) as uow:
        for worker, status, n in execute(uow, stmt):
            depths.setdefault(str(worker), [0, 0])[0 if status == "queued" else 1] = int(n)
    ranked = sorted(depths.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))
    return [(w, q, r) for w, (q, r) in ranked[:MAX_WORKERS]]


@dataclass(frozen=True)
class JobFilters:
    """The jobs page's filters (as ``list_assigns`` has them); empty means any."""

    status: str = ""
    worker_agent: str = ""
    supervisor_agent: str = ""
    trace_id: str = ""
    correlation_id: str = ""

    def items(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}


@dataclass(frozen=True)
class JobPage:
    jobs: list[AssignJob]
    #: The cursor of the next page, or None on the last.
    next_cursor: str | None


def format_cursor(job: AssignJob) -> str:
    return f"{job.updated_at_ms}:{job.job_id}"


def parse_cursor(cursor: str) -> tuple[int, str] | None:
    """(updated_at_ms, job_id) from a cursor; None for a malformed one."""
    stamp, sep, job_id = cursor.partition(":")
    if not sep or not job_id or not stamp.lstrip("-").isdigit() or len(stamp) > 20:
        return None
    value = int(stamp)
    return (value, job_id) if -(2**63) <= value < 2**63 else None


def _after(after: tuple[int, str] | None) -> ColumnElement[bool] | None:
    if after is None:
        return None
    stamp, job_id = after
    c = _jobs.c
    return and_(c.updated_at_ms <= stamp,
                or_(c.updated_at_ms < stamp, c.job_id < job_id))


def _newest_first(stmt: Select[Any], limit: int) -> Select[Any]:
    return stmt.order_by(_jobs.c.updated_at_ms.desc(), _jobs.c.job_id.desc()).limit(limit)


def page_statement(filters: JobFilters, after: tuple[int, str] | None,
                   limit: int) -> Select[Any]:
    """The page's SELECT: filtered rows newest-updated first after the cursor."""
    c = _jobs.c
    where: list[ColumnElement[bool]] = []
    for column, value in ((c.worker_agent, filters.worker_agent),
                          (c.supervisor_agent, filters.supervisor_agent),
                          (c.trace_id, filters.trace_id),
                          (c.correlation_id, filters.correlation_id)):
        if value:
            where.append(column == value)
    keyset = _after(after)
    if keyset is not None:
        where.append(keyset)
    if filters.status or where[: len(where) - (keyset is not None)]:
        if filters.status:
            where.append(c.status == filters.status)
        return _newest_first(select(_jobs).where(*where), limit)
    # No filter but the cursor: one index range per status, each cut at the limit.
    parts = [_newest_first(select(_jobs).where(c.status == status, *where), limit)
             .subquery().select() for status in ASSIGN_STATUSES]
    merged = union_all(*parts).subquery()
    return (select(merged).order_by(merged.c.updated_at_ms.desc(), merged.c.job_id.desc())
            .limit(limit))


def page_jobs(store: HubStore, filters: JobFilters, cursor: str | None,
              limit: int = 50) -> JobPage:
    """One page of jobs (see :func:`page_statement`)."""
    limit = max(1, min(limit, MAX_PAGE))
    after = parse_cursor(cursor) if cursor else None
    with store.unit_of_work(write=False) as uow:
        rows = list(execute(uow, page_statement(filters, after, limit + 1)).mappings())
    jobs = [from_row(AssignJob, row) for row in rows[:limit]]
    more = len(rows) > limit
    return JobPage(jobs, format_cursor(jobs[-1]) if more and jobs else None)


def messages_by_id(store: HubStore, ids: list[str]) -> dict[str, Message]:
    """The messages with these ids (primary-key lookups, one statement)."""
    if not ids:
        return {}
    with store.unit_of_work(write=False) as uow:
        rows = execute(uow, select(_messages).where(_messages.c.id.in_(ids))).mappings()
        return {str(row["id"]): from_row(Message, row) for row in rows}
