"""Provider quotas as data: assign limits per key (revision 0014).

A limit bounds the jobs whose ``limit_key`` is its key: at most ``max_running`` running
at once, at most ``max_starts`` started in any ``per_ms``. Claims start a job only when
its key has room (assigns/claims.py). The running room is split in shares (revision
0017), each counting the jobs started in it, so that claims of one key lock different
rows and run side by side; the key's releases are counted in a few rows of their own
(so that finishing jobs never wait for a row claims lock), its recent start times in
its row; triggers keep them all, whoever moves a job.

``set_assign_limit`` counts both again from the jobs, in the same transaction, with the
jobs table held still (PostgreSQL: ``LOCK TABLE assign_jobs IN SHARE MODE``, a moment's
pause for writers; SQLite: its write lock), so a limit set while jobs of its key move
starts from the truth.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, update

from hubstore.errors import ValidationError
from hubstore.execution import execute, from_row
from hubstore.ids import now_ms
from hubstore.models import AssignJob, AssignLimit, AssignLimitRelease, AssignLimitShare, table_of
from hubstore.services.base import const
from hubstore.transaction import Scope, Transaction
from hubstore.validation import MAX_DURATION_MS, require_id, require_int

_limits = table_of(AssignLimit)
_releases = table_of(AssignLimitRelease)
_shares = table_of(AssignLimitShare)
_jobs = table_of(AssignJob)
#: A limit's key is short: it names a provider or a pool, and every claim compares it.
MAX_LIMIT_KEY_BYTES = 200
#: The most starts a rate may allow per window (each is a stored start time).
MAX_STARTS = 100_000
#: The most jobs a limit may allow to run at once.
MAX_RUNNING = 2**31 - 1
#: The least budget of a share when a limit's running room is split: a limit of fewer
#: than twice this many running jobs keeps one share.
SHARE_BUDGET = 2


def split_running_room(max_running: int | None, rated: bool, running: int, most: int
                       ) -> list[int | None]:
    """The budgets of a limit's shares (their sum ``max_running``; None: no bound), share
    0 first, which holds the ``running`` jobs: one share for a limit with a rate (its
    claims lock its row anyway), without ``max_running``, below 2 x SHARE_BUDGET, or
    with more jobs running than it allows now; else up to ``most`` shares, the room left
    spread evenly and share 0 holding the running jobs with its part of it."""
    if max_running is None or rated or running > max_running:
        return [max_running]
    count = max(1, min(most, max_running // SHARE_BUDGET))
    each = (max_running - running) // count
    budgets: list[int | None] = [max_running - each * (count - 1)]
    return budgets + [each] * (count - 1)


def check_limit_key(key: object, what: str = "limit_key") -> str:
    """A limit key: a non-empty string of at most MAX_LIMIT_KEY_BYTES (ValidationError)."""
    require_id(key, what)
    assert isinstance(key, str)
    if len(key.encode("utf-8")) > MAX_LIMIT_KEY_BYTES:
        raise ValidationError(f"{what} is a short name (at most {MAX_LIMIT_KEY_BYTES} bytes), "
                              f"not {len(key.encode('utf-8')):,} bytes long")
    return key


def _checked(max_running: object, max_starts: object, per_ms: object
             ) -> tuple[int | None, int | None, int | None]:
    running = None if max_running is None else require_int(
        max_running, "max_running", minimum=1, maximum=MAX_RUNNING)
    starts = None if max_starts is None else require_int(
        max_starts, "max_starts", minimum=1, maximum=MAX_STARTS)
    window = None if per_ms is None else require_int(
        per_ms, "per_ms", minimum=1, maximum=MAX_DURATION_MS)
    if (starts is None) != (window is None):
        raise ValidationError(
            "max_starts and per_ms go together (at most max_starts starts in any per_ms "
            f"milliseconds); got max_starts={max_starts!r}, per_ms={per_ms!r}")
    if running is None and starts is None:
        raise ValidationError(
            "a limit needs max_running, or max_starts with per_ms, or both "
            "(remove_assign_limit removes one)")
    return running, starts, window


def _counted(tx: Transaction, key: str, max_starts: int | None, per_ms: int | None,
             now: int) -> tuple[int, list[int]]:
    """The key's running jobs and recent start times, counted from its jobs (by the
    index on limited jobs), the jobs table held still meanwhile."""
    hold = tx.sql.hold_still(_jobs)
    if hold is not None:
        execute(tx, hold)
    c = _jobs.c
    running = execute(tx, select(func.count()).where(
        c.limit_key == key, c.status == const("running"))).scalar_one()
    starts: list[int] = []
    if max_starts is not None and per_ms is not None:
        starts = sorted(int(at) for at in execute(tx, select(c.started_at_ms).where(
            c.limit_key == key, c.started_at_ms > now - per_ms)).scalars())[-max_starts:]
    return int(running), starts


def set_assign_limit(scope: Scope, key: str, max_running: int | None = None,
                     max_starts: int | None = None, per_ms: int | None = None
                     ) -> AssignLimit:
    """Set (or replace) the limit of ``key``: at most ``max_running`` of its jobs running
    at once, at most ``max_starts`` started in any ``per_ms`` milliseconds (None: no such
    bound; a limit has at least one). Jobs name their key when queued (``limit_key=``).
    Returns the limit, with its key's running count and recent starts counted anew.
    Waiting claimers whose jobs it held look again."""
    check_limit_key(key, "key")
    running_max, starts_max, window = _checked(max_running, max_starts, per_ms)
    now = now_ms()
    with scope.transaction() as tx:
        running, starts = _counted(tx, key, starts_max, window, now)
        budgets = split_running_room(running_max, starts_max is not None, running,
                                     tx.sql.release_stripes)
        values = {"max_running": running_max, "max_starts": starts_max, "per_ms": window,
                  "shares": len(budgets), "starts_json": starts, "updated_at_ms": now}
        stmt = (tx.sql.insert(_limits).values(key=key, created_at_ms=now, **values)
                .on_conflict_do_update(index_elements=[_limits.c.key], set_=values)
                .returning(*_limits.c))
        limit = from_row(AssignLimit, execute(tx, stmt).mappings().one())
        # The shares anew: share 0 holds the running jobs. The releases start again
        # from 0; when the latest was is kept.
        execute(tx, delete(_shares).where(_shares.c.key == key))
        execute(tx, tx.sql.insert(_shares).values([
            {"key": key, "share": share, "budget": budget,
             "started": running if share == 0 else 0}
            for share, budget in enumerate(budgets)]))
        execute(tx, update(_releases).where(_releases.c.key == key).values(released=0))
        execute(tx, tx.sql.insert(_releases).values(
            [{"key": key, "stripe": stripe} for stripe in range(tx.sql.release_stripes)])
            .on_conflict_do_nothing(index_elements=[_releases.c.key, _releases.c.stripe]))
        _wake_waiters(tx, key)
        return limit.counted(running, 0)


def _wake_waiters(tx: Transaction, key: str) -> None:
    notice = tx.sql.room_notice(key)
    if notice is not None:
        execute(tx, notice)


def get_assign_limits(scope: Scope) -> dict[str, AssignLimit]:
    """Every limit by its key (in key order), each with its key's running count and
    start times as they are now (``limit.recent_starts(now)``, ``limit.to_dict()``)."""
    with scope.one_read() as tx:
        return read_limits(tx)


def read_limits(tx: Transaction) -> dict[str, AssignLimit]:
    """Every limit by its key, its running count as its shares' starts less its
    releases."""
    released = (select(func.coalesce(func.sum(_releases.c.released), 0))
                .where(_releases.c.key == _limits.c.key).scalar_subquery())
    started = (select(func.coalesce(func.sum(_shares.c.started), 0))
               .where(_shares.c.key == _limits.c.key).scalar_subquery())
    rows = execute(tx, select(_limits, started.label("begun"), released.label("released"))
                   .order_by(_limits.c.key)).mappings().all()
    limits: dict[str, AssignLimit] = {}
    for row in rows:
        values = dict(row)
        begun, gone = int(values.pop("begun")), int(values.pop("released"))
        limits[str(row["key"])] = from_row(AssignLimit, values).counted(begun, gone)
    return limits


def remove_assign_limit(scope: Scope, key: str) -> bool:
    """Remove the limit of ``key`` (its jobs run unbounded from now on); True when there
    was one. Waiting claimers whose jobs it held look again."""
    check_limit_key(key, "key")
    with scope.transaction() as tx:
        execute(tx, delete(_releases).where(_releases.c.key == key))
        execute(tx, delete(_shares).where(_shares.c.key == key))
        removed = bool(execute(tx, delete(_limits).where(_limits.c.key == key)).rowcount)
        if removed:
            _wake_waiters(tx, key)
        return removed


def full_limits(tx: Transaction, now: int) -> tuple[list[str], int | None]:
    """The keys of the limits with no room at ``now`` (a claim would skip their jobs),
    and when the first of them that a rate holds has room again (None: none does; room
    under max_running comes back when a job ends, which wakes waiters itself)."""
    full: list[str] = []
    reopen: list[int] = []
    for key, limit in read_limits(tx).items():
        running_full, rate_full, reopens_at = limit.fullness(now)
        if running_full or rate_full:
            full.append(key)
        if reopens_at is not None:
            reopen.append(reopens_at)
    return full, min(reopen) if reopen else None
