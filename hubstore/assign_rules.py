"""The assign-job state machine, pure: no I/O, no clock.

    queued  -> running | succeeded | failed | timed_out | cancelled
    running -> running (progress) | succeeded | failed | timed_out | cancelled
    failed, timed_out -> queued      (by a retry only)
    running -> queued                (by a put-back only: a claim whose waiter was
                                      cancelled before it got the job)
    succeeded, cancelled: final

Every statement that moves a job takes its source statuses from this table
(:func:`allowed_sources`), and its written values from :func:`next_values`,
:func:`retry_patch` or :func:`put_back_values`.

Repeating the move that made a job terminal (same status) is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from hubstore.errors import IllegalTransition, ValidationError, describe
from hubstore.types import AssignEvent
from hubstore.validation import clamp, counter, refuse_unknown

TERMINAL = frozenset({"succeeded", "failed", "timed_out", "cancelled"})

TRANSITIONS: Mapping[str, frozenset[str]] = {
    "queued": frozenset({"running", "succeeded", "failed", "timed_out", "cancelled"}),
    "running": frozenset({"running", "succeeded", "failed", "timed_out", "cancelled",
                          "queued"}),
    "failed": frozenset({"queued"}),
    "timed_out": frozenset({"queued"}),
    "succeeded": frozenset(),
    "cancelled": frozenset(),
}
#: Moves that only a retry may make.
RETRY_ONLY = frozenset({("failed", "queued"), ("timed_out", "queued")})
#: Moves that only a put-back may make (and a put-back makes no other).
PUT_BACK_ONLY = frozenset({("running", "queued")})
#: The statuses a retry starts from.
RETRYABLE = frozenset(source for source, _ in RETRY_ONLY)
#: The status a claim takes a job from (a claim is the move to running).
CLAIMABLE = "queued"

MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 86_400_000
DEFAULT_TIMEOUT_MS = 600_000
TIMED_OUT_ERROR = {"message": "assign job timed out"}
#: The error a cancelled job gets (with the reason, when one is given).
CANCELLED_ERROR = {"message": "assign job cancelled"}


class Move(Enum):
    """What a requested status change amounts to."""

    APPLY = "apply"
    NOOP = "noop"


def _permitted(current: str, target: str, via_retry: bool, via_put_back: bool) -> bool:
    """Whether the table allows the move for this kind of caller."""
    if target not in TRANSITIONS.get(current, frozenset()):
        return False
    if (current, target) in PUT_BACK_ONLY:
        return via_put_back
    return via_retry or (current, target) not in RETRY_ONLY


def check_transition(current: str, target: str, *, via_retry: bool = False,
                     via_put_back: bool = False) -> Move:
    """APPLY or NOOP for an allowed move; IllegalTransition for anything else."""
    if current == target and target in TERMINAL:
        return Move.NOOP
    if _permitted(current, target, via_retry, via_put_back):
        return Move.APPLY
    if (current, target) in RETRY_ONLY:
        raise IllegalTransition(
            f"an assign job moves from {current} to {target} only by a retry "
            "(retry_assign or schedule_assign_retry)")
    raise IllegalTransition(f"an assign job cannot move from {current} to {target}")


def allowed_sources(target: str, *, via_retry: bool = False,
                    via_put_back: bool = False) -> tuple[str, ...]:
    """The statuses a job may be in to move to ``target``."""
    return tuple(s for s in TRANSITIONS if _permitted(s, target, via_retry, via_put_back))


def moving_sources(target: str) -> tuple[str, ...]:
    """The statuses from which a plain move to ``target`` changes the status (what the
    one-statement moves' WHERE names; a repeated move takes the general path)."""
    return tuple(s for s in allowed_sources(target) if s != target)


#: The statuses a job is in until it ends: the sources of every move to an end.
ACTIVE = moving_sources("succeeded")
assert all(moving_sources(end) == ACTIVE for end in TERMINAL)
assert CLAIMABLE in allowed_sources("running")


_STATUS_ALIASES = {
    "in_progress": "running", "timeout": "timed_out", "error": "failed",
    "success": "succeeded",
}
_REPORTABLE = frozenset({"running", "succeeded", "failed", "timed_out"})


def result_tag(metadata: object) -> str | None:
    """The reference's ``metadata.result ?? metadata.status ?? metadata.outcome``.

    Only the first of the three that is set counts (a later one does not override
    it); a tag that is not a string, or metadata that is not a mapping, matches nothing.
    """
    if not isinstance(metadata, Mapping):
        return None
    for field in ("result", "status", "outcome"):
        tag = metadata.get(field)
        if tag is not None:
            return tag.strip().lower() if isinstance(tag, str) else None
    return None


def normalize_status(status: object, metadata: object = None) -> str:
    """A worker's reported status, as the hub understands it.

    in_progress -> running, timeout -> timed_out, error -> failed, success -> succeeded;
    completed -> succeeded unless metadata's result/status/outcome says failed/error
    (failed) or timed_out/timeout (timed_out).
    """
    if not isinstance(status, str):
        raise ValidationError(f"status must be a string, got {describe(status)}")
    key = status.strip().lower()
    if key == "completed":
        tag = result_tag(metadata)
        if tag in ("failed", "error"):
            return "failed"
        if tag in ("timed_out", "timeout"):
            return "timed_out"
        return "succeeded"
    key = _STATUS_ALIASES.get(key, key)
    if key not in _REPORTABLE:
        raise ValidationError(
            f"reported status must be one of running, succeeded, failed, timed_out "
            f"(or in_progress, timeout, error, success, completed); got {describe(status)}")
    return key


def clamp_timeout(value: object, fallback: int = DEFAULT_TIMEOUT_MS) -> int:
    """A timeout or ttl clamped to 1 s .. 24 h; a non-number means ``fallback``."""
    return clamp(value, fallback, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)


#: Patch fields whose None means "keep" (the reference's ``??``).
KEEP_ON_NONE = (
    "supervisor_agent", "worker_agent", "topic", "task", "payload", "attempt", "retry_count",
    "max_retries", "priority", "ttl_ms", "timeout_ms", "trace_id", "correlation_id",
    "retry_backoff_ms",
)
#: Patch fields whose None clears the column.
CLEAR_ON_NONE = (
    "deadline_ms", "last_message_id", "result", "error", "started_at_ms", "completed_at_ms",
    "last_retry_at_ms", "not_before_ms",
)
#: The longest a retry waits, whatever its back-off (as the longest timeout).
MAX_BACKOFF_MS = 86_400_000
PATCH_FIELDS = frozenset(KEEP_ON_NONE + CLEAR_ON_NONE)


def check_patch(patch: Mapping[str, Any]) -> None:
    """Refuse unknown patch fields (a typo must not pass silently)."""
    refuse_unknown(patch, PATCH_FIELDS, "the assign job's update")


def next_values(current: Mapping[str, Any], target: str, patch: Mapping[str, Any],
                now: int) -> dict[str, Any]:
    """The columns to write when ``current`` moves to ``target`` with ``patch``.

    The reference's update rules: the deadline is the patch's if named, else cleared
    for a terminal status, else now + timeout when becoming running without one;
    started_at is set when running, completed_at when terminal, unless named.
    """
    def pick(name: str) -> Any:
        value = patch.get(name)
        return current[name] if value is None else value

    terminal = target in TERMINAL
    timeout = clamp_timeout(pick("timeout_ms"), current["timeout_ms"])
    values: dict[str, Any] = {
        name: pick(name) for name in
        ("supervisor_agent", "worker_agent", "topic", "task", "trace_id", "correlation_id")
    }
    values.update(
        payload=pick("payload") if pick("payload") is not None else {},
        status=target,
        attempt=counter(pick("attempt"), "attempt", default=current["attempt"] or 1,
                        minimum=1),
        retry_count=counter(pick("retry_count"), "retry_count", default=0, minimum=0),
        max_retries=counter(pick("max_retries"), "max_retries", default=0, minimum=0),
        priority=clamp(pick("priority"), current["priority"] or 5, 1, 9),
        ttl_ms=clamp_timeout(pick("ttl_ms"), current["ttl_ms"] or timeout),
        timeout_ms=timeout,
        updated_at_ms=now,
    )
    for name in ("last_message_id", "result", "error", "last_retry_at_ms", "not_before_ms"):
        values[name] = patch[name] if name in patch else current[name]
    values["retry_backoff_ms"] = pick("retry_backoff_ms")
    if "deadline_ms" in patch:
        deadline = patch["deadline_ms"]
        values["deadline_ms"] = None if deadline is None else int(deadline)
    elif terminal:
        values["deadline_ms"] = None
    elif target == "running" and not current["deadline_ms"]:
        values["deadline_ms"] = now + timeout
    else:
        values["deadline_ms"] = current["deadline_ms"]
    if "started_at_ms" in patch:
        values["started_at_ms"] = patch["started_at_ms"]
    elif target == "running":
        values["started_at_ms"] = current["started_at_ms"] or now
    else:
        values["started_at_ms"] = current["started_at_ms"]
    if "completed_at_ms" in patch:
        values["completed_at_ms"] = patch["completed_at_ms"]
    elif terminal:
        values["completed_at_ms"] = current["completed_at_ms"] or now
    else:
        values["completed_at_ms"] = current["completed_at_ms"]
    return values


def retry_delay(backoff_ms: int, retries_before: int) -> int:
    """How long a retry waits: ``backoff_ms`` for the first, twice as long for each later
    one (``retries_before``: the retries the job had), at most MAX_BACKOFF_MS."""
    if backoff_ms <= 0:
        return 0
    if retries_before >= MAX_BACKOFF_MS.bit_length():  # (no huge power of two)
        return MAX_BACKOFF_MS
    return int(min(MAX_BACKOFF_MS, backoff_ms * 2 ** max(0, retries_before)))


def retry_patch(current: Mapping[str, Any], patch: Mapping[str, Any], now: int
                ) -> dict[str, Any]:
    """The patch that re-queues a job for its next attempt (the reference's retry):
    with a back-off (retry_backoff_ms), not claimed before its delay has passed (or
    before the patch's not_before_ms, when it names one), its deadline counted from
    then (none for a job whose timeout starts at its claim)."""
    retry_count = patch.get("retry_count")
    attempt = patch.get("attempt")
    timeout_ms = patch.get("timeout_ms")
    timeout = clamp_timeout(current["timeout_ms"] if timeout_ms is None else timeout_ms,
                            current["timeout_ms"])
    backoff = patch.get("retry_backoff_ms")
    delay = retry_delay(current["retry_backoff_ms"] if backoff is None else backoff,
                        current["retry_count"])
    not_before = patch["not_before_ms"] if "not_before_ms" in patch else (
        now + delay if delay else None)
    start = now if not_before is None else max(now, not_before)
    return {
        "not_before_ms": not_before,
        "retry_count": counter(
            retry_count if retry_count is not None else current["retry_count"] + 1,
            "retry_count", default=0, minimum=0),
        "attempt": counter(attempt if attempt is not None else current["attempt"] + 1,
                           "attempt", default=1, minimum=current["attempt"] + 1),
        "timeout_ms": timeout,
        "ttl_ms": patch.get("ttl_ms") if patch.get("ttl_ms") is not None else current["ttl_ms"],
        # A run timeout (revision 0020's timeout_from "claim") waits queued without one.
        "deadline_ms": None if current.get("timeout_from") == "claim" else start + timeout,
        "completed_at_ms": None,
        "started_at_ms": None,
        "last_retry_at_ms": now,
        "result": patch.get("result"),
        "error": patch["error"] if "error" in patch else current["error"],
        "last_message_id": None,
    }


def put_back_values(current: Mapping[str, Any], claimed_at: int, now: int
                    ) -> dict[str, Any]:
    """The columns a put-back writes: queued again, with the start time and deadline
    it had before the claim (a claim at ``claimed_at`` set them when they were empty:
    started then, the deadline then + timeout)."""
    started = current["started_at_ms"]
    deadline = current["deadline_ms"]
    return {"status": "queued", "updated_at_ms": now,
            "started_at_ms": None if started == claimed_at else started,
            "deadline_ms": (None if deadline == claimed_at + current["timeout_ms"]
                            else deadline)}


def _civil_date(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian date ``days`` after 1970-01-01, for
    any number of days (datetime stops at year 9999): H. Hinnant's civil_from_days."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, doy - (153 * mp + 2) // 5 + 1


def held_until(job: Mapping[str, Any], now: int) -> tuple[int, str] | None:
    """Why a queued job is not claimed yet, by time: (when it becomes due, why: "back-off"
    after a retry, else "scheduled"); None when it is not queued or is due now."""
    not_before = job["not_before_ms"]
    if job["status"] != CLAIMABLE or not_before is None or not_before <= now:
        return None
    retried = job["retry_count"] > 0 and job["last_retry_at_ms"] is not None \
        and job["retry_backoff_ms"] > 0
    return not_before, "back-off" if retried else "scheduled"


def duration_text(ms: int) -> str:
    """A duration for people, in the largest whole unit: 30d, 12h, 15m, 45s or 250ms."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def iso_timestamp(ms: int) -> str:
    """JavaScript's ``new Date(ms).toISOString()``, years outside 0..9999 written as it
    writes them (``+033658-09-27T01:46:40.000Z``)."""
    days, rest = divmod(ms, 86_400_000)
    year, month, day = _civil_date(days)
    hour, rest = divmod(rest, 3_600_000)
    minute, rest = divmod(rest, 60_000)
    second, milli = divmod(rest, 1_000)
    shown = f"{year:04d}" if 0 <= year <= 9999 else f"{'+' if year > 0 else '-'}{abs(year):06d}"
    return (f"{shown}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}."
            f"{milli:03d}Z")


def status_event(job: Mapping[str, Any]) -> AssignEvent:
    """What status listeners receive."""
    outcome = job["result"] if job["result"] is not None else job["error"]
    return {"job_id": job["job_id"], "status": job["status"], "result": outcome,
            "timestamp": iso_timestamp(job["updated_at_ms"])}
