"""Jobs past their deadline: the timeout sweep, and the rescue that claims run.

A job whose worker died stays ``running`` until something times it out. The reference
leaves that to its router's timer; here every claim does it: :func:`rescue_due` says
whether this store should look now (at most once every :data:`RESCUE_INTERVAL_MS`, and
not before the earliest deadline it saw could pass), and :func:`rescue_stalled`, run in
the claim's own transaction, times out what is due, as ``sweep_timed_out_assigns``
does: retried while retries remain (a new attempt, so the dead worker's late report is
refused as stale), else finished as ``timed_out`` with its 'completed' event. Any
claim rescues any worker's job: the retry goes back to that job's worker.

A claim between two looks costs nothing more than before (an integer compared); a
look is one read of the deadline index's first entry.
"""

from __future__ import annotations

from sqlalchemy import select

from hubstore import assign_rules as rules
from hubstore.database import Database
from hubstore.execution import Prepared, execute, from_row
from hubstore.models import AssignJob, table_of
from hubstore.services.assigns.moves import in_sources
from hubstore.services.assigns.reports import finish
from hubstore.services.base import const, resolve_now
from hubstore.transaction import Scope, Transaction

#: The timeout sweep handles at most this many due jobs per call, as the reference does.
SWEEP_BATCH = 100
#: A store's claims look for stalled jobs at most this often.
RESCUE_INTERVAL_MS = 1_000

_jobs = table_of(AssignJob)
_c = _jobs.c
#: The earliest deadline of a queued or running job: on PostgreSQL the first entry of
#: ix_assign_jobs_active_deadline, which holds exactly these rows (revision 0021: with
#: statistics behind a burst of jobs, the planner read every queued job instead); on
#: SQLite the first active entry of the reference's idx_assign_jobs_deadline.
EARLIEST_DEADLINE = Prepared(
    select(_c.deadline_ms).where(_c.deadline_ms.is_not(None), in_sources(rules.ACTIVE))
    .order_by(_c.deadline_ms).limit(1))


def time_out_due(tx: Transaction, now: int, limit: int = SWEEP_BATCH) -> tuple[int, int]:
    """Time out up to ``limit`` queued or running jobs whose deadline is at or before
    ``now`` (the most recently updated first), retrying those with retries left; the
    numbers timed out and retried. The due rows are read once (on PostgreSQL locked,
    skipping rows another transaction holds: a worker reporting right now), so a job
    retried here is not timed out again by the same call."""
    due = (select(_jobs)
           .where(_c.status.in_([const(s) for s in rules.ACTIVE]),
                  _c.deadline_ms.is_not(None), _c.deadline_ms <= now)
           .order_by(_c.updated_at_ms.desc(), _c.job_id.desc())
           .limit(limit)
           .with_for_update(skip_locked=True))
    timed_out = retried = 0
    for row in execute(tx, due).mappings().all():
        job = from_row(AssignJob, row)
        error = rules.TIMED_OUT_ERROR if job.error is None else job.error
        outcome = finish(tx, job, "timed_out", {"error": error}, "sweeper", now,
                         completion_reason="timed_out")
        timed_out += 1
        retried += outcome.event == "retry_scheduled"
    return timed_out, retried


def sweep_timed_out_assigns(scope: Scope, now_ms: int | None = None) -> dict[str, int]:
    """Queued or running jobs whose deadline is at or before ``now_ms`` time out,
    and are retried while retries remain (the retry's back-off and deadline counted
    from ``now_ms``). As in the reference, one call takes at most SWEEP_BATCH (100) due
    jobs, the most recently updated first; a job retried here is not swept again by the
    same call (the due jobs are chosen once, up front)."""
    now = resolve_now(now_ms)
    with scope.transaction() as tx:
        timed_out, retried = time_out_due(tx, now)
    return {"timed_out": timed_out, "retried": retried}


def earliest_deadline(tx: Transaction) -> int | None:
    """The earliest deadline of a queued or running job, or None."""
    row = EARLIEST_DEADLINE.first(tx, {})
    return None if row is None else int(row["deadline_ms"])


def rescue_due(db: Database, now: int) -> bool:
    """Whether a claim at ``now`` should look for stalled jobs (see the module)."""
    return now >= db.rescue_at_ms


def rescue_stalled(tx: Transaction, now: int) -> int:
    """Time out the jobs whose deadline passed (SWEEP_BATCH at most), in ``tx``; the
    number timed out. Then note when the store's next look is due: at once when a batch
    was full, else at the earliest deadline left or after RESCUE_INTERVAL_MS, whichever
    comes first (another process may make a job with an earlier deadline meanwhile)."""
    earliest = earliest_deadline(tx)
    timed_out = 0
    if earliest is not None and earliest <= now:
        timed_out, _ = time_out_due(tx, now)
        earliest = earliest_deadline(tx)
    later = now + RESCUE_INTERVAL_MS
    if timed_out == SWEEP_BATCH:  # more may be due: the next claim looks again
        tx.db.rescue_at_ms = now
    elif earliest is None or earliest <= now:  # (still due: skipped, its row locked)
        tx.db.rescue_at_ms = later
    else:
        tx.db.rescue_at_ms = min(later, earliest)
    return timed_out


def take_back_stalled(scope: Scope, now: int) -> int:
    """The stalled jobs taken back now, in a transaction of their own (or the open
    one), when this store's look is due (else nothing); the number timed out."""
    if not rescue_due(scope.db, now):
        return 0
    with scope.transaction() as tx:
        return rescue_stalled(tx, now)


def next_rescue_ms(tx: Transaction) -> int | None:
    """When a waiting claimer should look again for stalled jobs: the earliest active
    deadline, but not before this store's next look is due; None when no job has one."""
    earliest = earliest_deadline(tx)
    return None if earliest is None else max(earliest, tx.db.rescue_at_ms)
