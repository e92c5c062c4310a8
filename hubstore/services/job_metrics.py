"""The jobs' reads that /metrics makes, each bounded by an index range: the age of each
worker's oldest queued job, and the jobs that finished since a mark."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, func, literal_column, select, union_all

from hubstore.execution import Prepared, execute
from hubstore.models import ASSIGN_STATUSES, AssignJob, table_of
from hubstore.services.base import const
from hubstore.transaction import Transaction

_jobs = table_of(AssignJob)
#: The priorities a job may have (assign's clamp): one range of the claim index each.
PRIORITIES = range(1, 10)
#: The statuses a job ends in.
FINAL = tuple(s for s in ASSIGN_STATUSES if s not in ("queued", "running"))


@functools.cache
def _oldest_of_a_worker() -> Prepared:
    queued = _jobs.c.status == const("queued")
    firsts = [select(_jobs.c.created_at_ms.label("at"))
              .where(_jobs.c.worker_agent == bindparam("p_worker"), queued,
                     _jobs.c.priority == literal_column(str(p)))
              .order_by(_jobs.c.created_at_ms).limit(1).subquery().select()
              for p in PRIORITIES]
    merged = union_all(*firsts).subquery()
    return Prepared(select(func.min(merged.c.at).label("at")))


OLDEST_QUEUED = _oldest_of_a_worker()


def oldest_queued(uow: Transaction, workers: Sequence[str]) -> dict[str, int]:
    """The ``created_at_ms`` of each worker's oldest queued job (workers with none are
    left out): per worker, the first entry of each priority's range of the partial index
    ix_assign_jobs_claim (queued jobs only), nine index probes, whatever the queue."""
    found: dict[str, int] = {}
    for worker in workers:
        row = OLDEST_QUEUED.first(uow, {"p_worker": worker})
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
