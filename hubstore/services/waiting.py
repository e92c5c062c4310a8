"""Waiting for work across processes: ``wait_for_assign``, ``wait_for_result`` and message
feeds.

Commit order comes from ``message_log`` (revision 0007: why, per dialect, is written
there): every message has a ``seq`` in the order its transaction committed, one
transaction's messages consecutive and in write order. A feed's position is a seq; a
read takes the highest committed seq first, then the agent's messages between its
position and that head, so a transaction committing meanwhile (a higher seq) is left
for the next read, never skipped. Waking is :mod:`hubstore.signals`, through the store's
change watcher (:meth:`~hubstore.database.Database.change_watcher`).

A wait would hold the transaction of a unit of work open around it (and, on SQLite, the
write lock that other processes need to queue the work it waits for), so the waits
refuse to run in one (ValidationError): wait on the store, outside any unit of work.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, func, or_, select, text

from hubstore import assign_rules as rules
from hubstore import signals
from hubstore.errors import AssignNotFound, ValidationError, describe
from hubstore.execution import Prepared, from_row
from hubstore.ids import now_ms
from hubstore.models import TOPIC_FEED_WHERE, AssignJob, Message, MessageLog, table_of
from hubstore.services.assigns.batches import MAX_BATCH
from hubstore.services.assigns.claims import (
    claim_next_assign,
    claim_next_assigns,
    claimable,
    claimer,
    next_due_ms,
)
from hubstore.services.assigns.creating import get_assign
from hubstore.services.assigns.limits import full_limits
from hubstore.services.assigns.rescue import next_rescue_ms, take_back_stalled
from hubstore.services.messages import feed_topics
from hubstore.transaction import Scope, Transaction, open_transaction
from hubstore.validation import as_number, require_id, require_int, string_list

if TYPE_CHECKING:
    from hubstore.database import Database

MAX_FEED_BATCH = 1000
#: How soon a waiter claims again when its claim found nothing but a job is there (it
#: lost a limit's last room to another claimer: see claims.claimable).
RACE_PAUSE_MS = 10
CURSOR_PREFIX = "feed1:"
_CURSOR = re.compile(r"feed1:(0|[1-9][0-9]{0,18})")

_messages = table_of(Message)
_log = table_of(MessageLog)
_HEAD = Prepared(select(func.coalesce(func.max(_log.c.seq), 0).label("head")))


@functools.lru_cache(maxsize=64)
def _feed_statement(topic_count: int) -> Prepared:
    """The agent's messages with after < seq <= head, in seq order, for that many topics."""
    m = _messages.c
    wanted = m.to_agent == bindparam("p_agent_id")
    if topic_count:
        on_topic = m.topic.in_([bindparam(f"p_topic_{k}") for k in range(topic_count)])
        wanted = or_(wanted, and_(text(TOPIC_FEED_WHERE), on_topic))
    stmt = (select(_log.c.seq.label("feed_seq"), *_messages.c)
            .join_from(_log, _messages, _messages.c.id == _log.c.message_id)
            .where(_log.c.seq > bindparam("p_after"), _log.c.seq <= bindparam("p_head"),
                   wanted)
            .order_by(_log.c.seq)
            .limit(bindparam("p_limit")))
    return Prepared(stmt, _messages)


def check_timeout(timeout_s: object) -> float | None:
    """A wait's timeout in seconds (None: no limit)."""
    if timeout_s is None:
        return None
    number = as_number(timeout_s)
    if number is None or isinstance(timeout_s, bool) or number < 0 or number != number:
        raise ValidationError(
            f"timeout_s must be a number of seconds >= 0, not {describe(timeout_s)}")
    return float(number)


def check_batch(max_messages: object) -> int:
    number = as_number(max_messages)
    if number is None or isinstance(max_messages, bool) or int(number) != number or not (
            1 <= number <= MAX_FEED_BATCH):
        raise ValidationError(f"max_messages must be an integer in 1..{MAX_FEED_BATCH}")
    return int(number)


def parse_cursor(cursor: object) -> int:
    if not isinstance(cursor, str) or not _CURSOR.fullmatch(cursor) \
            or int(cursor[len(CURSOR_PREFIX):]) > 2**63 - 1:  # a seq is 64-bit
        raise ValidationError(f"not a message feed cursor: {describe(cursor)}")
    return int(cursor[len(CURSOR_PREFIX):])


def format_cursor(position: int) -> str:
    return f"{CURSOR_PREFIX}{position}"


@dataclass(frozen=True)
class FeedBatch:
    """One read of a feed: the messages, the position after them, the topics it used."""

    messages: list[Message]
    position: int
    topics: list[str]


def feed_head(tx: Transaction) -> int:
    """The highest committed seq (0 for an empty log)."""
    row = _HEAD.first(tx, {})
    return int(row["head"]) if row else 0


def read_feed(tx: Transaction, agent_id: str, include_topics: list[str], after: int,
              limit: int) -> FeedBatch:
    """The agent's messages after ``after``, up to ``limit``; nothing moves."""
    head = feed_head(tx)
    topics = feed_topics(tx, agent_id, include_topics)
    if head <= after:
        return FeedBatch([], after, topics)
    params: dict[str, Any] = {"p_agent_id": agent_id, "p_after": after, "p_head": head,
                              "p_limit": limit}
    params.update({f"p_topic_{k}": topic for k, topic in enumerate(topics)})
    rows = _feed_statement(len(topics)).rows(tx, params)
    # Short of the limit, everything up to head was seen: the position moves to head
    # (past other agents' messages, so the next read does not scan them again).
    position = int(rows[-1]["feed_seq"]) if len(rows) == limit else head
    messages = []
    for row in rows:
        del row["feed_seq"]
        messages.append(from_row(Message, row))
    return FeedBatch(messages, position, topics)


def deadline_after(timeout_s: object) -> float | None:
    """The monotonic time a wait of ``timeout_s`` ends (None: no limit)."""
    timeout = check_timeout(timeout_s)
    return None if timeout is None else time.monotonic() + timeout


def wait_s(recheck_s: float, deadline: float | None, due: float | None) -> float | None:
    """How long a waiter sleeps: until the re-check interval, the deadline or the time
    a scheduled job becomes due (monotonic times), whichever comes first; None when the
    deadline has passed."""
    now = time.monotonic()
    wait = recheck_s
    if deadline is not None:
        if deadline - now <= 0:
            return None
        wait = min(wait, deadline - now)
    if due is not None:
        wait = min(wait, max(0.0, due - now))
    return wait


def monotonic_at(time_ms: int | None) -> float | None:
    """The monotonic time at which the clock reads ``time_ms`` (None stays None)."""
    if time_ms is None:
        return None
    return time.monotonic() + max(0, time_ms - now_ms()) / 1000


@dataclass(frozen=True)
class WaitPlan:
    """How a claimer that found nothing waits: until ``due`` (a monotonic time, or None)
    unless woken sooner by its worker's signal or by one of ``keys``."""

    due: float | None
    keys: frozenset[str]


def wait_plan(scope: Scope, worker_agent: str) -> WaitPlan:
    """When a waiting claimer should look again without a wake-up: when the worker's
    next scheduled job becomes due, when a job's deadline passes (its worker may have
    died: the claim then takes it back), or when a rate limit has room again, whichever
    comes first; and the wake-ups to listen for: the worker's, and room freed under each
    limit that is full now (its jobs are held)."""
    now = now_ms()
    with scope.transaction(write=False) as tx:
        full, reopen = full_limits(tx, now)
        times = [t for t in (next_due_ms(tx, worker_agent), next_rescue_ms(tx), reopen)
                 if t is not None]
        if tx.sql.row_locks and claimable(tx, worker_agent, full):
            times.append(now + RACE_PAUSE_MS)  # (see claims.claimable)
    keys = frozenset([signals.worker_key(worker_agent), *map(signals.limit_key, full)])
    return WaitPlan(monotonic_at(min(times)) if times else None, keys)


def result_keys(job: AssignJob) -> list[str]:
    """The wake-ups that may tell a job's end: its supervisor's messages (every end a
    hub rule writes records a 'completed' event for the supervisor)."""
    return [signals.agent_key(job.supervisor_agent)]


def look_for_result(scope: Scope, job_id: str) -> tuple[AssignJob, float | None]:
    """The job, and None when it has ended; else when to look again without a wake-up:
    when its deadline passes (then its worker may have died, and this look takes it
    back, as a claim would)."""
    job = get_assign(scope, job_id)
    now = now_ms()
    if job is not None and job.status not in rules.TERMINAL and job.deadline_ms is not None \
            and job.deadline_ms <= now and take_back_stalled(scope, now):
        job = get_assign(scope, job_id)
    if job is None:
        raise AssignNotFound(f"no assign job {job_id}")
    if job.status in rules.TERMINAL or job.deadline_ms is None:
        return job, None
    return job, monotonic_at(max(job.deadline_ms, scope.db.rescue_at_ms))


def pause(sub: signals.Subscription, deadline: float | None, due: float | None = None
          ) -> bool:
    """Wait for a wake-up, the watcher's re-check interval, the deadline or ``due`` (a
    scheduled job's time), whichever comes first; False when the deadline has passed or
    the store closed (time to give up)."""
    if sub.watcher._closed:
        return False
    wait = wait_s(sub.watcher.recheck_s, deadline, due)
    if wait is None:
        return False
    sub.wait(wait)
    return not sub.watcher._closed  # the store closed: its waiters give up


def feed_keys(agent_id: str, topics: Iterable[str]) -> frozenset[str]:
    """The NOTIFY payloads that concern a feed (revision 0007's trigger writes them)."""
    return frozenset([signals.agent_key(agent_id), *map(signals.topic_key, topics)])


class MessageFeed:
    """The messages ``poll_for_agent`` would show an agent, each once, in commit order.

    Made by ``store.message_feed(agent_id)``. ``cursor`` resumes right after the last
    message :meth:`next` returned, in any process (positions are commit-order seqs).
    Each read is a transaction of its own (or joins the unit of work open in the
    reading thread). A feed is not meant to be shared by threads reading at the same
    time.
    """

    def __init__(self, db: Database, agent_id: str, include_topics: list[str],
                 position: int) -> None:
        self.db = db
        self.agent_id = agent_id
        self.include_topics = include_topics
        self.position = position
        self._topics: list[str] = list(include_topics)

    @property
    def cursor(self) -> str:
        return format_cursor(self.position)

    def read(self, max_messages: int) -> FeedBatch:
        """One look at the tables from the current position (the position stays)."""
        max_messages = check_batch(max_messages)
        with open_transaction(self.db, write=False) as tx:
            return read_feed(tx, self.agent_id, self.include_topics, self.position,
                             max_messages)

    def keys(self) -> frozenset[str]:
        return feed_keys(self.agent_id, self._topics)

    def next(self, timeout_s: float | None = 30.0, max_messages: int = 100) -> list[Message]:
        """The next messages (at most ``max_messages``) as soon as there are any; an
        empty list once ``timeout_s`` passed with none."""
        limit = check_batch(max_messages)
        deadline = deadline_after(timeout_s)
        watcher = self.db.change_watcher()
        with watcher.subscribe(signals.MESSAGES, self.keys()) as sub:
            while True:
                sub.clear()
                batch = self.read(limit)
                self.position, self._topics = batch.position, batch.topics
                if sub.keys is not None and self.keys() != sub.keys:
                    sub.keys = self.keys()  # topics changed: listen for them too
                    if not batch.messages:
                        continue  # and look once more (one may have slipped by)
                if batch.messages:
                    return batch.messages
                if not pause(sub, deadline):
                    return []


def refuse_inside_unit_of_work(scope: Scope, call: str) -> None:
    """ValidationError when a unit of work is open in this thread: a wait in it would
    hold its transaction open while other processes need to commit what it waits for."""
    if scope.db.current_uow.get() is not None:
        raise ValidationError(
            f"{call} waits for other processes' commits, and a unit of work is open "
            "here: its transaction would stay open (on SQLite, holding the write lock "
            "they need) while it waits. Call it on the store, outside the unit of work "
            "(claim_next_assign claims inside one)")


def wait_for_assign(scope: Scope, worker_agent: str, timeout_s: float | None = 30.0,
                    claimed_by: str | None = None) -> AssignJob | None:
    """Claim the worker's next queued job (as ``claim_next_assign``, recording
    ``claimed_by``); when there is none, wait until any process queues one and claim it.
    None once ``timeout_s`` passed (never before; None waits without limit)."""
    require_id(worker_agent, "worker_agent")
    by = claimer(claimed_by)
    refuse_inside_unit_of_work(scope, "wait_for_assign")
    jobs = claim_waiting(scope, worker_agent, timeout_s, lambda tx: [
        job for job in [claim_next_assign(tx, worker_agent, by)] if job is not None])
    return jobs[0] if jobs else None


def wait_for_assigns(scope: Scope, worker_agent: str, limit: int = 10,
                     timeout_s: float | None = 30.0, claimed_by: str | None = None
                     ) -> list[AssignJob]:
    """Claim up to ``limit`` of the worker's queued jobs (as ``claim_next_assigns``,
    recording ``claimed_by``); when there are none, wait until any process queues one and
    claim what is there then. An empty list once ``timeout_s`` passed."""
    require_id(worker_agent, "worker_agent")
    require_int(limit, "limit", minimum=1, maximum=MAX_BATCH)
    by = claimer(claimed_by)
    refuse_inside_unit_of_work(scope, "wait_for_assigns")
    return claim_waiting(scope, worker_agent, timeout_s,
                         lambda tx: claim_next_assigns(tx, worker_agent, limit, by))


def claim_waiting(scope: Scope, worker_agent: str, timeout_s: float | None,
                  claim: Callable[[Transaction], list[AssignJob]]) -> list[AssignJob]:
    """``claim`` the worker's jobs; while it takes none, wait for a wake-up (or the next
    scheduled job's time) and claim again. An empty list once ``timeout_s`` passed."""
    deadline = deadline_after(timeout_s)
    watcher = scope.db.change_watcher()
    with watcher.subscribe(signals.ASSIGNS, [signals.worker_key(worker_agent)]) as sub:
        while True:
            sub.clear()
            with scope.transaction() as tx:
                jobs = claim(tx)
                plan = None if jobs else wait_plan(tx, worker_agent)
            if plan is None:
                return jobs
            sub.keys = plan.keys
            if not pause(sub, deadline, plan.due):
                return []


def wait_for_result(scope: Scope, job_id: str, timeout_s: float | None = 30.0
                    ) -> AssignJob | None:
    """The job once it has ended (succeeded, failed or timed out with no retry left,
    cancelled), else None once ``timeout_s`` passed (None waits without limit).
    AssignNotFound for an unknown job.

    Woken by the job's events (the supervisor's messages, any process); a job whose
    deadline passes meanwhile is taken back (timed out, retried while retries remain),
    as a claim would, so a dead worker's job ends without a sweeper."""
    require_id(job_id, "job_id")
    deadline = deadline_after(timeout_s)
    refuse_inside_unit_of_work(scope, "wait_for_result")
    job, due = look_for_result(scope, job_id)
    if job.status in rules.TERMINAL:
        return job
    watcher = scope.db.change_watcher()
    with watcher.subscribe(signals.MESSAGES, result_keys(job)) as sub:
        while True:
            sub.clear()
            job, due = look_for_result(scope, job_id)
            if job.status in rules.TERMINAL:
                return job
            if not pause(sub, deadline, due):
                return None


def message_feed(scope: Scope, agent_id: str, include_topics: Iterable[str] | None = None,
                 cursor: str | None = None) -> MessageFeed:
    """A feed of the agent's messages (see :class:`MessageFeed`), starting after
    ``cursor``, else after every message committed before this call."""
    require_id(agent_id, "agent_id")
    topics = string_list(include_topics, "include_topics") if include_topics else []
    if cursor is not None:
        position = parse_cursor(cursor)
    else:
        with scope.transaction(write=False) as tx:
            position = feed_head(tx)
    return MessageFeed(scope.db, agent_id, topics, position)
