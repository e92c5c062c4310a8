"""Retention: pruning old messages in short batches.

The batches are found through ``idx_messages_priority`` (priority DESC, created_at_ms):
one range per priority (the schema allows 1..9), read in created_at_ms order from where
the previous batch of that priority stopped. So no index is added to messages, where
each index costs every audit_log insert a page write, and no batch scans the rows that
stay or steps again over the rows an earlier batch deleted.

Each batch deletes the messages' inbox rows and dead letters, then the messages, in one
unit of work: called on the store, a short transaction of its own, after which the
writer's turn (SQLite's queue of writers) is free for others; inside a unit of work, a
part of its transaction. The figures stay exact because the counter triggers of
revisions 0003 and 0004 see every deleted row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Integer, bindparam, delete, func, select

from hubstore.execution import execute, scalar
from hubstore.models import DeadLetter, Message, MessageInbox, MessageLog, table_of
from hubstore.services.base import resolve_now
from hubstore.services.stats import FOLD_LOG, LOG_FOLDED, hub_counters
from hubstore.transaction import Scope
from hubstore.validation import require_callable, require_int

PRIORITIES = range(1, 10)  # the CHECK constraint of messages.priority
#: Bound values per IN list (well under SQLite's limit, whatever the batch size).
IN_CHUNK = 500
#: After each batch the store pauses for PAUSE_SHARE of the batch's own time (at least
#: MIN_PAUSE_S): hubstore's writers queue on its writer lock and get in at once, but a
#: program writing with plain sqlite3 retries on SQLite's growing sleeps (up to 100 ms),
#: and needs the lock free often enough to find it free (benchmarks/bench_prune.py).
PAUSE_SHARE = 1.0
MIN_PAUSE_S = 0.002

_messages = table_of(Message)
_inbox = table_of(MessageInbox)
_letters = table_of(DeadLetter)

BATCH = (select(_messages.c.id, _messages.c.created_at_ms)
         .where(_messages.c.priority == bindparam("p_priority"),
                _messages.c.created_at_ms >= bindparam("p_from"),
                _messages.c.created_at_ms < bindparam("p_before"))
         .order_by(_messages.c.created_at_ms)
         .limit(bindparam("p_limit", type_=Integer)))

_log = table_of(MessageLog)
_LOG_SCAN = (select(_log.c.seq, _messages.c.id.is_(None).label("gone"))
             .select_from(_log.outerjoin(_messages, _messages.c.id == _log.c.message_id))
             .where(_log.c.seq > bindparam("p_after"))
             .order_by(_log.c.seq)
             .limit(bindparam("p_limit", type_=Integer)))

#: The newest seq, which the trim keeps (a scalar subquery of each DELETE, so a row
#: written meanwhile by another writer cannot make it stale).
_LOG_HEAD = select(func.max(_log.c.seq)).scalar_subquery()
#: SQLite (revision 0009): the last seq whose insert is folded into hub_counters; the
#: rows after it still count their message in the figures, so the trim keeps them.
_LOG_FOLDED = (select(hub_counters.c.value).where(hub_counters.c.name == LOG_FOLDED)
               .scalar_subquery())

Progress = Callable[[int], None]
_K = TypeVar("_K")


def prune_messages(scope: Scope, older_than_ms: int, now_ms: int | None = None,
                   batch_size: int = 1000, *, progress: Progress | None = None) -> int:
    """Delete the messages created strictly before ``now - older_than_ms``, with
    their inbox rows and dead letters, ``batch_size`` messages per unit of work.
    Returns how many messages were deleted. ``progress(n)`` is called after each
    batch with the number of messages it deleted (the command line's progress bar).
    """
    require_int(older_than_ms, "older_than_ms", minimum=0)
    require_int(batch_size, "batch_size", minimum=1)
    if progress is not None:
        require_callable(progress, "progress")
    before = resolve_now(now_ms) - older_than_ms
    deleted = 0
    for priority in PRIORITIES:
        start: int | None = None  # created_at_ms where this priority's next batch starts
        while True:
            began = time.monotonic()
            with scope.transaction() as tx:
                rows = execute(tx, BATCH, {
                    "p_priority": priority, "p_before": before, "p_limit": batch_size,
                    "p_from": -(2 ** 63) if start is None else start}).all()
                ids = [row.id for row in rows]
                for chunk in _chunks(ids):
                    execute(tx, delete(_inbox).where(
                        _inbox.c.message_id.in_(chunk)))
                    execute(tx, delete(_letters).where(
                        _letters.c.message_id.in_(chunk)))
                    execute(tx, delete(_messages).where(
                        _messages.c.id.in_(chunk)))
            # Joined into a unit of work still open (called on it, or on the store
            # inside one), the batches are parts of its transaction: nothing to pause
            # for, the writer's turn is not given back.
            pause = tx.db.current_uow.get() is None
            if not rows:
                break
            deleted += len(ids)
            start = rows[-1].created_at_ms  # ties not yet deleted are read again
            if progress is not None:
                progress(len(ids))
            if len(rows) < batch_size:
                break
            if pause:
                time.sleep(max(MIN_PAUSE_S, (time.monotonic() - began) * PAUSE_SHARE))
    if deleted:
        trim_message_log(scope, batch_size)
    return deleted


def trim_message_log(scope: Scope, batch_size: int) -> None:
    """Delete the message_log rows (revision 0007) of deleted messages.

    Feeds join the log to messages, so such rows only cost space; and a feed's
    position stays valid without them (seqs are never handed out again, so messages
    written later still come after it). The newest log row is never deleted, even
    when its message is gone: on SQLite seq is the rowid, max(seq) + 1 (revision
    0008), and that row is the high-water mark that keeps a new message's seq above
    every cursor. On SQLite the log rows count their inserts in the figures until
    folded into hub_counters (revision 0009): each batch folds them first, and
    keeps any a fold has not reached. The oldest messages go first, and their
    log rows are the lowest seqs: the log is read from its start, a batch at a time
    (the primary key's range, each seq's message looked up by its key), until a
    batch finds no row to delete.
    """
    after = 0
    while True:
        with scope.transaction() as tx:
            rows = execute(tx, _LOG_SCAN, {
                "p_after": after, "p_limit": batch_size}).all()
            gone = [row.seq for row in rows if row.gone]
            log_counts = bool(gone) and tx.db.features.log_counts
            for statement in FOLD_LOG if log_counts else ():
                execute(tx, statement)
            for chunk in _chunks(gone):
                trim = delete(_log).where(_log.c.seq.in_(chunk), _log.c.seq < _LOG_HEAD)
                if log_counts:
                    trim = trim.where(_log.c.seq <= _LOG_FOLDED)
                execute(tx, trim)
        if not gone or len(rows) < batch_size:
            return
        after = rows[-1].seq


def count_messages_before(scope: Scope, older_than_ms: int, now_ms: int | None = None) -> int:
    """How many messages ``prune_messages`` would delete now (index-backed count)."""
    require_int(older_than_ms, "older_than_ms", minimum=0)
    before = resolve_now(now_ms) - older_than_ms
    with scope.transaction(write=False) as tx:
        return int(scalar(tx,
            select(func.count()).select_from(_messages).where(
                _messages.c.priority.in_(list(PRIORITIES)),
                _messages.c.created_at_ms < before)) or 0)


def _chunks(ids: list[_K]) -> list[list[_K]]:
    return [ids[i:i + IN_CHUNK] for i in range(0, len(ids), IN_CHUNK)]
