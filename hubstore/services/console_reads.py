"""The console's reads that no store method makes: each one statement on an index.

- :func:`snapshot`: the figures (the trigger-kept counters, as ``get_hub_stats``), agents
  by status (``idx_agents_status``: one entry per agent), pending human requests
  (``idx_human_requests_state``: one entry per pending request), the jobs finished in the
  last minute and each status's latest update (``idx_assign_jobs_status``, a range per
  status). What the overview, /metrics and the live updates show.
- :func:`with_worker_depths`: the snapshot, and queued and running jobs per worker
  (revision 0015's counts), in one reading.
- :func:`messages_by_id`: the messages of a page of dead letters.

They run in a read-only transaction of the sync store (the console calls them on the
async store's lanes, off the event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, func, literal, select, union_all

from hubstore import assign_rules as rules
from hubstore.execution import execute, from_row
from hubstore.ids import now_ms
from hubstore.models import ASSIGN_STATUSES, Agent, AssignJob, HumanRequest, Message, table_of
from hubstore.services.stats import counts, jobs_by_worker
from hubstore.transaction import Scope, Transaction

_jobs = table_of(AssignJob)
_messages = table_of(Message)
_agents = table_of(Agent)
_humans = table_of(HumanRequest)
#: The statuses a job ends in (those a "finished" count reads).
TERMINAL = tuple(s for s in ASSIGN_STATUSES if s in rules.TERMINAL)
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


def read_snapshot(tx: Transaction) -> Snapshot:
    """The :class:`Snapshot` in ``tx``."""
    figures = counts(tx)
    agents = {str(s): int(n) for s, n in execute(tx, AGENTS_BY_STATUS)}
    pending = int(execute(tx, PENDING).scalar_one())
    finished = int(execute(tx, finished_since(now_ms() - WINDOW_MS)).scalar_one())
    latest = {str(s): (None if u is None else int(u)) for s, u in execute(tx, LATEST)}
    return Snapshot(figures, agents, pending, finished,
                    tuple((s, latest.get(s)) for s in ASSIGN_STATUSES))


def snapshot(scope: Scope) -> Snapshot:
    """The :class:`Snapshot`, in a read-only transaction of its own."""
    with scope.transaction(write=False) as tx:
        return read_snapshot(tx)


def with_worker_depths(scope: Scope) -> tuple[Snapshot, list[tuple[str, int, int]]]:
    """The :class:`Snapshot` and (worker, queued, running) for the workers with the most
    queued jobs (revision 0015's trigger-kept counts: no job is read), in one read-only
    transaction: one reading of the hub, what the overview and /metrics show."""
    with scope.transaction(write=False) as tx:
        return read_snapshot(tx), jobs_by_worker(tx, MAX_WORKERS)


@dataclass(frozen=True)
class JobFilters:
    """The jobs page's filters (as ``list_assigns`` has them); empty means any."""

    status: str = ""
    worker_agent: str = ""
    supervisor_agent: str = ""
    trace_id: str = ""
    correlation_id: str = ""

    def items(self) -> dict[str, str]:
        """The filters given, by name (for the page's links)."""
        return {k: v for k, v in vars(self).items() if v}

    def arguments(self) -> dict[str, Any]:
        """``page_assigns``' keyword arguments: None for a filter not given."""
        return {k: v or None for k, v in vars(self).items()}


def messages_by_id(scope: Scope, ids: list[str]) -> dict[str, Message]:
    """The messages with these ids (primary-key lookups, one statement)."""
    if not ids:
        return {}
    with scope.transaction(write=False) as tx:
        rows = execute(tx, select(_messages).where(_messages.c.id.in_(ids))).mappings()
        return {str(row["id"]): from_row(Message, row) for row in rows}
