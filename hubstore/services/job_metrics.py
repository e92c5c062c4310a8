"""The jobs' reads that /metrics makes, each bounded by an index range: the age of each
worker's oldest queued job, and the jobs that finished since a mark."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    bindparam,
    func,
    literal_column,
    select,
    union_all,
)

from hubstore.execution import Prepared, execute
from hubstore.models import ASSIGN_STATUSES, AssignJob, table_of
from hubstore.services.assigns.rows import limit_keys
from hubstore.services.base import const
from hubstore.transaction import Transaction

_jobs = table_of(AssignJob)
#: The priorities a job may have (assign's clamp): one range of the claim index each.
PRIORITIES = range(1, 10)
#: The statuses a job ends in.
FINAL = tuple(s for s in ASSIGN_STATUSES if s not in ("queued", "running"))


def _queued(columns: Any) -> list[ColumnElement[bool]]:
    """The worker's queued jobs (of ``columns``' table), due or not."""
    return [columns.worker_agent == bindparam("p_worker"), columns.status == const("queued")]


def _firsts(*where: ColumnElement[bool]) -> list[Select[Any]]:
    """Per priority, the oldest queued job's ``created_at_ms`` (one index entry each)."""
    return [select(_jobs.c.created_at_ms.label("at"))
            .where(*_queued(_jobs.c), _jobs.c.priority == literal_column(str(p)), *where)
            .order_by(_jobs.c.created_at_ms).limit(1).subquery().select()
            for p in PRIORITIES]


def _keyed_firsts() -> list[Select[Any]]:
    """Per key and priority, the oldest keyed queued job's ``created_at_ms``."""
    keys = limit_keys(_queued)  # the worker's queued jobs' keys, one look each
    return [select(select(_jobs.c.created_at_ms)
                   .where(*_queued(_jobs.c), _jobs.c.limit_key == keys.c.key,
                          _jobs.c.priority == literal_column(str(p)))
                   .order_by(_jobs.c.created_at_ms).limit(1).scalar_subquery().label("at"))
            .where(keys.c.key.is_not(None))
            for p in PRIORITIES]


@functools.cache
def _oldest_of_a_worker(split: bool) -> Prepared:
    """One worker's oldest queued job: nine probes of the claim index; where the claim
    index holds only the jobs without a limit key (PostgreSQL, revision 0019), those,
    and nine per key of the keyed jobs' index."""
    firsts = [*_firsts(_jobs.c.limit_key.is_(None)), *_keyed_firsts()] if split else _firsts()
    merged = union_all(*firsts).subquery()
    return Prepared(select(func.min(merged.c.at).label("at")))


#: The statement for each layout of the claim indexes (``SqlDialect.split_claim_indexes``).
OLDEST_QUEUED = {split: _oldest_of_a_worker(split) for split in (False, True)}


def oldest_queued(uow: Transaction, workers: Sequence[str]) -> dict[str, int]:
    """The ``created_at_ms`` of each worker's oldest queued job (workers with none are
    left out): per worker, the first entry of each priority's range of the partial claim
    index (and on PostgreSQL of each key's range of the keyed jobs' index): a few index
    probes, whatever the queue."""
    found: dict[str, int] = {}
    statement = OLDEST_QUEUED[uow.sql.split_claim_indexes]
    for worker in workers:
        row = statement.first(uow, {"p_worker": worker})
        if row is not None and row["at"] is not None:
            found[worker] = int(row["at"])
    return found


@dataclass(frozen=True, slots=True)
class Finish:
    """A job in a final status, as /metrics counts it."""

    job_id: str
    status: str
    updated_at_ms: int
    started_at_ms: int | None
    completed_at_ms: int | None


def finished_since(uow: Transaction, status: str, since_ms: int, limit: int) -> list[Finish]:
    """Jobs in the final ``status`` updated at ``since_ms`` or later, the oldest update
    first, at most ``limit``: one range of idx_assign_jobs_status."""
    rows = execute(uow, select(_jobs.c.job_id, _jobs.c.updated_at_ms, _jobs.c.started_at_ms,
                               _jobs.c.completed_at_ms)
                   .where(_jobs.c.status == status, _jobs.c.updated_at_ms >= since_ms)
                   .order_by(_jobs.c.updated_at_ms, _jobs.c.job_id).limit(limit))
    return [Finish(str(job_id), status, int(updated), started, completed)
            for job_id, updated, started, completed in rows]
