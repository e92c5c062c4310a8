"""The job row: read, locked, inserted and written by compare-and-set.

Rows are read and written with Core statements built once, and handed out as transient
``AssignJob`` instances (``from_row``): on SQLite every write holds the one database
write lock, so the time spent inside it is what limits many processes. Every write of a
job a listener should hear of is announced here (told after the commit).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import CTE, ColumnElement, Text, bindparam, insert, select, text, update

from hubstore import assign_rules as rules
from hubstore.dialects import SqlDialect
from hubstore.errors import DatabaseBusy, HubStoreError
from hubstore.execution import Prepared, from_row
from hubstore.models import DEDUPLICATED, LIVE_WHERE, AssignJob, table_of
from hubstore.services.base import const
from hubstore.transaction import Transaction

_jobs = table_of(AssignJob)


#: Attribute key -> column name (they differ for the JSON columns: payload -> payload_json).
NAME_OF: dict[str, str] = {
    attr.key: str(attr.columns[0].name) for attr in AssignJob.__mapper__.column_attrs}


_COLUMNS = list(NAME_OF)


_BY_ID = select(_jobs).where(_jobs.c.job_id == bindparam("p_job_id"))


def limit_keys(queued: Callable[[Any], list[ColumnElement[bool]]]) -> CTE:
    """The limit keys of the jobs that ``queued`` picks (conditions on the columns it is
    given), in order, by a skip scan of revision 0019's index of keyed jobs (one look
    per key, however many jobs it has): a recursive CTE ``queued_keys`` whose last row
    is NULL."""
    # (each look an ORDER BY ... LIMIT 1, not min(): the planner turns min() into one
    # only when its statistics say so, and reads every keyed job otherwise)
    k = _jobs.alias("key_of")
    first = (select(k.c.limit_key).where(*queued(k.c), k.c.limit_key.is_not(None))
             .order_by(k.c.limit_key).limit(1).scalar_subquery())
    keys = select(first.label("key")).cte("queued_keys", recursive=True)
    later = _jobs.alias("later_key")
    following = (select(later.c.limit_key)
                 .where(*queued(later.c), later.c.limit_key.is_not(None),
                        later.c.limit_key > keys.c.key)
                 .order_by(later.c.limit_key).limit(1).scalar_subquery())
    return keys.union_all(select(following.label("key")).where(keys.c.key.is_not(None)))


_SELECT = Prepared(_BY_ID, _jobs)


# SQLite renders no FOR UPDATE: its write lock serves.
_LOCK = Prepared(_BY_ID.with_for_update(), _jobs)


_INSERT_ROW = insert(_jobs).values({c.name: bindparam(c.name) for c in _jobs.c})


_INSERT = Prepared(_INSERT_ROW, _jobs)


#: The queued or running job that holds a unique key.
_LIVE_WITH_KEY = Prepared(
    select(_jobs).where(_jobs.c.unique_key == bindparam("p_unique_key", type_=Text),
                        _jobs.c.status.in_([const("queued"), const("running")])), _jobs)


#: How often an assign with a unique key tries again when the job that held the key
#: ended between its insert (which found the key held) and its read of that job.
UNIQUE_TRIES = 5


_GUARDS = frozenset({"p_job_id", "p_status", "p_attempt"})


@functools.cache
def _cas(columns: frozenset[str]) -> Prepared:
    """The guarded compare-and-set that writes ``columns``, built once per column set
    (only the columns that change are written, so untouched indexes stay untouched)."""
    stmt = (update(_jobs)
            .where(_jobs.c.job_id == bindparam("p_job_id"),
                   _jobs.c.status == bindparam("p_status"),
                   _jobs.c.attempt == bindparam("p_attempt"))
            .values({name: bindparam(name) for name in sorted(columns)})
            .returning(*_jobs.c))
    return Prepared(stmt, _jobs)


class ConcurrentUpdate(HubStoreError):
    """A guarded update found the row changed under it (a bug: rows are locked first)."""

    code = "ASSIGN_CONCURRENT_UPDATE"


def snapshot(job: AssignJob) -> dict[str, Any]:
    """The job's attributes as a plain mapping (listeners get a copy made from it, the
    row as it was at that move)."""
    loaded = job.__dict__  # (read past the instrumented attributes: 24 per snapshot)
    return {key: loaded[key] if key in loaded else getattr(job, key) for key in _COLUMNS}


def by_column(values: dict[str, Any]) -> dict[str, Any]:
    """Attribute-keyed values keyed by column name, as Core parameters."""
    return {NAME_OF[key]: value for key, value in values.items()}


def frozen_copy(job: AssignJob) -> AssignJob:
    """A copy of the row as it is now, for a listener: what it is told about must not
    change when a later move in the same transaction, or the caller, changes the job."""
    return from_row(AssignJob, by_column(copy.deepcopy(snapshot(job))))


def announce(tx: Transaction, job: AssignJob) -> None:
    """Queue the job's status event for the listeners, told after the commit.

    Without listeners (subscribed when the move is made) there is nothing to copy.
    """
    if tx.db.assign_listeners:
        tx.emit_assign_event(rules.status_event(snapshot(job)), frozen_copy(job))


def read_job(tx: Transaction, job_id: str) -> AssignJob | None:
    """The job, as it is now (no lock)."""
    return _SELECT.instance(tx, {"p_job_id": job_id}, AssignJob)


def lock_job(tx: Transaction, job_id: str) -> AssignJob | None:
    """The job, freshly read and locked for this transaction."""
    return _LOCK.instance(tx, {"p_job_id": job_id}, AssignJob)


def write_guarded(tx: Transaction, job: AssignJob, changes: dict[str, Any]) -> AssignJob:
    """UPDATE the job's ``changes`` where it still has the status and attempt read in
    ``job``; ConcurrentUpdate when it does not (the row lock makes that a bug)."""
    params = by_column(changes)
    params.update(p_job_id=job.job_id, p_status=job.status, p_attempt=job.attempt)
    moved = _cas(frozenset(params) - _GUARDS).instance(tx, params, AssignJob)
    if moved is None:
        raise ConcurrentUpdate(f"assign job {job.job_id} changed while it was being moved")
    return moved


@contextlib.contextmanager
def computed_from(job: AssignJob) -> Iterator[None]:
    """Rules computed from a locked job's row. A TypeError there is the row's: a number
    column holding text, which only a hand edit can store (SQLite keeps any type it is
    given). It is raised as a HubStoreError naming the job, before anything is written."""
    try:
        yield
    except TypeError as exc:
        raise HubStoreError(
            f"assign job {job.job_id!r} cannot be moved: its row holds a value of the "
            f"wrong type ({exc}); correct the row first") from exc


@functools.cache
def _insert_unless_held(sql: SqlDialect) -> Prepared:
    """The INSERT of a job with a unique key, which writes nothing when a queued or
    running job holds the key (revision 0014's partial unique index; PostgreSQL waits
    for a transaction inserting the same key, then sees its outcome)."""
    return Prepared(
        sql.insert(_jobs).values({c.name: bindparam(c.name) for c in _jobs.c})
        .on_conflict_do_nothing(index_elements=[_jobs.c.unique_key],
                                index_where=text(LIVE_WHERE))
        .returning(*_jobs.c), _jobs)


def insert_job(tx: Transaction, row: dict[str, Any]) -> AssignJob:
    """Write the job ``row`` (attribute-keyed) and return it; with a unique key that a
    queued or running job holds, write nothing and return that job instead, its
    ``deduplicated`` True. Listeners hear of a job written (after the commit)."""
    key = row["unique_key"]
    if key is None:
        job = _INSERT.inserted(tx, by_column(row), AssignJob)
        announce(tx, job)
        return job
    for _ in range(UNIQUE_TRIES):
        written = _insert_unless_held(tx.sql).instance(tx, by_column(row), AssignJob)
        if written is not None:
            announce(tx, written)
            return written
        held = _LIVE_WITH_KEY.instance(tx, {"p_unique_key": key}, AssignJob)
        if held is not None:
            held.__dict__[DEDUPLICATED] = True
            return held
    raise DatabaseBusy(f"unique_key {key!r} changed hands {UNIQUE_TRIES} times while a job "
                       "was being written with it; try again")
