"""The claim run's lanes: each one's loop claiming and finishing jobs until none is left,
and the jobs it claims (hubstore's, or the bare queue's).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import create_engine, make_url

from bench.background import PRELOAD_UNIT_ROWS
from bench.raw_driver import driver_statement
from hubstore import HubStore
from hubstore.dialects import dialect_for
from hubstore.ids import now_ms, uuidv7
from hubstore.models import AssignJob, table_of

CLAIM_WORKER = "w"


#: The assign limit the "limited" lane's jobs count against, far from binding.
LIMIT_KEY, UNBOUND = "bench", 10**9


def claim_loop(store: HubStore, batch: int = 1) -> list[str]:
    """Claim and finish jobs of CLAIM_WORKER until none is left, ``batch`` per claim
    (1: claim_next_assign and report_assign_result; more: claim_next_assigns and
    report_assign_results); the ids claimed."""
    job_ids: list[str] = []
    if batch == 1:
        while (job := store.claim_next_assign(CLAIM_WORKER)) is not None:
            store.report_assign_result(job.job_id, "succeeded", worker_agent=CLAIM_WORKER,
                                       attempt=job.attempt, result={"ok": 1})
            job_ids.append(job.job_id)
        return job_ids
    while claimed := store.claim_next_assigns(CLAIM_WORKER, batch):
        store.report_assign_results([{"job_id": job.job_id, "status": "succeeded",
                                      "attempt": job.attempt, "result": {"ok": 1}}
                                     for job in claimed], worker_agent=CLAIM_WORKER)
        job_ids.extend(job.job_id for job in claimed)
    return job_ids


def create_claim_jobs(store: HubStore, jobs: int, limited: bool = False) -> list[str]:
    """``jobs`` queued jobs of CLAIM_WORKER; ``limited``: each counting against
    LIMIT_KEY, whose limit is declared but never binds."""
    if limited:
        store.set_assign_limit(LIMIT_KEY, max_running=UNBOUND)
    ids: list[str] = []
    for first in range(0, jobs, PRELOAD_UNIT_ROWS):
        with store.unit_of_work() as uow:
            for k in range(first, min(jobs, first + PRELOAD_UNIT_ROWS)):
                job = uow.create_assign(
                    supervisor_agent="lead", worker_agent=CLAIM_WORKER, task=f"claim{k}",
                    limit_key=LIMIT_KEY if limited else None)
                ids.append(job.job_id)
    return ids


def raw_claim_loop(url: str, connected: Callable[[], None]) -> list[str]:
    """claim_loop on psycopg alone: hubstore's own claim and routine-finish statements
    (compiled from its own), prepared, in autocommit, with nothing around them (no
    validation, no pool, no unit of work, no objects: the rows' job id and attempt only).
    An anchor: about the most any Python client could do with these statements."""
    import psycopg

    from hubstore.services.assigns.claims import claim_statement
    from hubstore.services.assigns.handoffs import finish_with_event

    dialect = create_engine(url).dialect  # the URL's own (psycopg), as hubstore compiles
    claim_sql, _, claim_bound = driver_statement(claim_statement(dialect_for("postgresql")),
                                                 dialect)
    finish_sql, _, finish_bound = driver_statement(
        finish_with_event(dialect_for("postgresql"), False), dialect)
    names = list(table_of(AssignJob).c.keys())
    at_id, at_attempt = names.index("job_id"), names.index("attempt")
    job_ids: list[str] = []
    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute("SELECT 1")
        connected()
        while True:
            row = conn.execute(claim_sql, {**claim_bound, "p_worker": CLAIM_WORKER,
                                           "p_now": now_ms(), "p_limit": 1,
                                           "p_claimer": "raw-loop"},
                               prepare=True).fetchone()
            if row is None:
                return job_ids
            finished = conn.execute(finish_sql, {
                **finish_bound, "p_job_id": row[at_id], "p_worker": CLAIM_WORKER,
                "p_attempt": row[at_attempt], "p_status": "succeeded",
                "p_result": json.dumps({"ok": 1}), "p_error": None, "p_now": now_ms(),
                "m_id": uuidv7(), "m_corr": uuidv7(), "m_trace": uuidv7()},
                prepare=True).fetchone()
            assert finished is not None, f"job {row[at_id]} was not finished"
            job_ids.append(row[at_id])


#: The bare queue of the --claim --raw-driver run: a job table with its key and the one
#: partial index a claim needs, no triggers, no event; claimed and finished in two
#: autocommit statements as hubstore's are. The least two commits per job cost here.
BARE_TABLE = "bench_bare_jobs"
_BARE_CLAIM = (f"UPDATE {BARE_TABLE} SET status = 'running' WHERE job_id = (SELECT job_id "
               f"FROM {BARE_TABLE} WHERE status = 'queued' ORDER BY priority DESC, job_id "
               "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING job_id")
_BARE_FINISH = (f"UPDATE {BARE_TABLE} SET status = 'succeeded', result = %s::jsonb "
                "WHERE job_id = %s AND status = 'running'")


def _conninfo(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as libpq takes it."""
    return make_url(url).set(drivername="postgresql", query={}).render_as_string(
        hide_password=False)


def create_bare_jobs(url: str, jobs: int) -> list[str]:
    """The bare queue's table, made anew with ``jobs`` queued jobs; their ids."""
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {BARE_TABLE}")
        conn.execute(f"CREATE TABLE {BARE_TABLE} (job_id text PRIMARY KEY, status text NOT "
                     "NULL, priority int NOT NULL DEFAULT 5, result jsonb)")
        conn.execute(f"CREATE INDEX ON {BARE_TABLE} (priority DESC, job_id) "
                     "WHERE status = 'queued'")
        ids = [uuidv7() for _ in range(jobs)]
        with conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {BARE_TABLE} (job_id, status) VALUES (%s, "
                               "'queued')", [(job_id,) for job_id in ids])
        conn.execute(f"ANALYZE {BARE_TABLE}")
    return ids


def bare_statuses(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        return {status: count for status, count in conn.execute(
            f"SELECT status, count(*) FROM {BARE_TABLE} GROUP BY status")}


def bare_claim_loop(url: str, connected: Callable[[], None]) -> list[str]:
    """claim_loop on the bare queue, psycopg alone, prepared, in autocommit."""
    import psycopg

    job_ids: list[str] = []
    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute("SELECT 1")
        connected()
        while (row := conn.execute(_BARE_CLAIM, prepare=True).fetchone()) is not None:
            done = conn.execute(_BARE_FINISH, ('{"ok": 1}', row[0]), prepare=True)
            assert done.rowcount == 1, f"job {row[0]} was not finished"
            job_ids.append(row[0])
    return job_ids
