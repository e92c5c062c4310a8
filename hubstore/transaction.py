"""The transaction: one connection, one database transaction, and a Session on them.

A :class:`Transaction` holds one connection and one transaction, and a Session on them
made on first use. Leaving the outermost block normally commits; an exception rolls back
and propagates. Actions queued with :meth:`Transaction.after_commit` (the assign status
listeners among them) run only after the commit. Every store method runs in one (the
services take it as ``tx``); a :class:`~hubstore.uow.UnitOfWork`, what users hold, is
the store methods on one of them.

Nesting works as Django's ``atomic``: while a transaction is open in a thread (or an
asyncio task: the open one is kept in a context variable), a store method or
``store.unit_of_work()`` of the same store joins it. A writing nested block is a
SAVEPOINT: an exception inside it rolls back that block only; nothing commits before the
outermost block. A unit of work's own methods (``uow.audit_log(...)``) run directly
in its transaction.

``write=False`` makes a read-only transaction: store methods that write raise
ReadOnlyUnitOfWork before they start, and the transaction itself refuses writes (SQLite
``query_only``, PostgreSQL READ ONLY), so a write through ``uow.connection`` or
``uow.session`` raises ReadOnlyUnitOfWork too.

The Session is an ordinary one (autoflush on): its pending changes are flushed before a
store method runs a statement, and the objects it loaded are expired by the store
methods' writes, so they read fresh values. Instances returned by store methods are
detached once the transaction ends (``session.merge`` takes them back in).

Every database error that leaves a block is a HubStoreError (:mod:`hubstore.db_errors`),
with the driver's exception as ``__cause__``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar, cast

from sqlalchemy import Connection, event, inspect, select
from sqlalchemy.engine import RootTransaction
from sqlalchemy.orm import Session

from hubstore import execution, sqlite_setup
from hubstore.db_errors import failed_statement, lost_connection, translate
from hubstore.dialects import SqlDialect
from hubstore.errors import (
    DatabaseUnavailable,
    HubStoreError,
    ReadOnlyUnitOfWork,
    StoreClosed,
    ValidationError,
)
from hubstore.urls import same_database

if TYPE_CHECKING:
    from hubstore.database import Database
    from hubstore.models import AssignJob
    from hubstore.types import AssignEvent

log = logging.getLogger(__name__)

T = TypeVar("T", bound="Transaction")


class Transaction:
    """One connection, one transaction, and a Session on them when ORM work needs one.

    On SQLite, when no engine event listener watches transactions or statements (and
    echo is off), the transaction is begun and committed on the driver itself, and
    SQLAlchemy's own transaction object is made only once ``uow.connection`` (or the
    Session, or a savepoint) is used: entering and leaving SQLAlchemy's transaction cost
    more than the one-row statements of the hot paths. With a listener registered,
    everything goes through SQLAlchemy as usual, so the listener sees it.
    """

    _conn: Connection

    def __init__(self, db: Database, *, write: bool = True,
                 single_statement: bool = False) -> None:
        self.db = db
        self.dialect: str = db.dialect
        self.write = write
        #: A store method of one statement: run it in autocommit, the statement its own
        #: transaction (PostgreSQL: one round trip; SQLite: no BEGIN and COMMIT calls,
        #: when no listener watches transactions: it takes the write lock as BEGIN
        #: IMMEDIATE would, waiting out the busy timeout).
        self._autocommit = single_statement
        self._after_commit: list[Callable[[], None]] = []
        self._session: Session | None = None
        self._transaction: RootTransaction | None = None
        #: The driver connection when the transaction was begun on it (see above).
        self._raw: Any = None
        self._locked = False
        self._entered = False
        self._token: Any = None
        #: Whether listeners watch statements (None: not asked yet; statements_watched).
        self._watched: bool | None = None
        #: The failed statement after which nothing of this transaction may commit.
        self._failure: BaseException | None = None
        #: ``write`` of each nested block now open (the outermost block's first).
        self._frames: list[bool] = []
        #: SQLite in autocommit: whether its one statement has run (see ``driver``).
        self._ran = False
        #: The :class:`~hubstore.uow.UnitOfWork` that holds this transaction, when users
        #: hold one (``store.unit_of_work()``); None for a store method's own.
        self.facade: object | None = None

    # -- the outermost block ---------------------------------------------------------

    def __enter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a unit of work can be entered only once")
        self._entered = True
        source = self.db.connections
        if source.closed:
            raise StoreClosed()
        try:
            if self.write and source.writers is not None:
                source.writers.acquire()
                self._locked = True
            # (SQLite: a one-statement read may take the writer's warm connection)
            conn = self._conn = source.acquire(
                self.write, autocommit=self._autocommit and (
                    not source.is_sqlite or not self.write))
            try:
                if source.is_sqlite and execution.unwatched(conn):
                    self._watched = False
                    raw: Any = conn.connection.driver_connection
                    if not self._autocommit:
                        raw.execute(sqlite_setup.begin_statement(self.write))
                    self._raw = raw
                else:
                    self._transaction = conn.begin()
            except BaseException:
                source.release(conn, self.write)
                raise
        except BaseException as exc:
            self._unlock()
            raise self._translated(exc) from exc
        self._frames.append(self.write)
        self._token = self.db.current_uow.set(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        session, self._session = self._session, None
        committed = committing = False
        failure: BaseException | None = None
        try:
            if exc_type is None:
                self._check_open(committing=True)
                if session is not None:
                    session.flush()
                    _reload_expired(session)
                committing = True
                if self._transaction is not None:
                    self._transaction.commit()
                elif self._raw.in_transaction:
                    self._raw.commit()
                committed = True
        except BaseException as error:
            failure = error
        finally:
            self.db.current_uow.reset(self._token)
            self._frames.clear()
            if session is not None:
                session.expunge_all()  # rows handed out stay readable (detached)
                session.close()
            # A rollback that fails is not the first failure when the block raised
            # (the block's exception is): only after a clean block is it reported.
            broken = False
            if not committed and self._transaction is None and self._raw is not None:
                try:
                    if self._raw.in_transaction:
                        self._raw.rollback()
                except Exception as error:
                    broken = True
                    if exc is None:
                        failure = failure or error
            elif not committed and self._transaction is not None:
                try:  # also ends a transaction whose COMMIT failed
                    if self._conn.get_transaction() is self._transaction:
                        self._transaction.rollback()  # (a failed flush rolled it back)
                    if not self._conn.invalidated:  # (a lost one: nothing to end, and
                        # asking for its driver connection would connect again)
                        self.db.sql.end_failed_commit(self.driver)
                except Exception as error:
                    broken = True
                    if exc is None:
                        failure = failure or error
            self.db.connections.release(self._conn, self.write, broken=broken)
            self._unlock()
        if failure is not None:
            translated = self._translated(failure)
            if committing:
                _mark_outcome(translated, failure)
            if translated is failure:
                raise failure
            raise translated from failure
        if committed:
            self._publish()
        elif exc is not None:
            translated = self._translated(exc)
            if self._autocommit and self.write:  # the statement was its own COMMIT
                _mark_outcome(translated, exc)
            if translated is not exc:
                raise translated from exc

    def _unlock(self) -> None:
        if self._locked:
            self._locked = False
            writers = self.db.connections.writers
            assert writers is not None
            writers.release()

    def _translated(self, exc: BaseException, *, read_only: bool | None = None
                    ) -> BaseException:
        """``exc`` as a HubStoreError when it is a database error, else itself."""
        if isinstance(exc, HubStoreError):
            return exc
        error = translate(exc, read_only=not self.write if read_only is None else read_only)
        return exc if error is None else error

    # -- nested blocks ---------------------------------------------------------------

    def transaction(self, write: bool = True) -> Frame[Self]:
        """Join this transaction: the unit of work's own methods run through here (see
        Scope)."""
        return Frame(self, write, savepoint=False)

    def one_statement(self) -> Frame[Self]:
        """Join this transaction, for a method of one writing statement (see Scope)."""
        return Frame(self, True, savepoint=False)

    def one_read(self) -> Frame[Self]:
        """Join this transaction, for a method of one SELECT (see Scope)."""
        return Frame(self, False, savepoint=False)

    @property
    def sql(self) -> SqlDialect:
        """The dialect's SQL component (:mod:`hubstore.dialects`)."""
        return self.db.sql

    def savepoint(self, write: bool = True) -> Frame[Self]:
        """A nested block: a SAVEPOINT when it writes (a store method or
        ``store.unit_of_work()`` called while this unit of work is open). A read-only
        block inside a writing one makes the transaction refuse writes while it is open
        (see :meth:`_refuse_writes`)."""
        return Frame(self, write, savepoint=write, guard=not write and all(self._frames))

    def _refuse_writes(self, on: bool) -> None:
        """Make the open transaction refuse writes (``on``), or allow them again: SQLite's
        ``query_only`` on this connection; on PostgreSQL a savepoint made READ ONLY, which
        its rollback (nothing was written in it) makes read-write again. One round trip
        each way."""
        raw = self._raw  # (SQLite's driver connection, when it runs the transaction)
        if on and self._autocommit and raw is not None and not (
                raw.in_transaction or self._ran):
            self.begin()  # (a one-statement unit of work with a nested block: BEGIN
            # IMMEDIATE before query_only, and the rest of it one transaction)
        self.db.sql.refuse_writes(raw if raw is not None else self.driver, on)

    def _enter_frame(self, write: bool) -> None:
        if not self._frames:
            raise RuntimeError("this unit of work is not open")
        if write and not all(self._frames):
            raise ReadOnlyUnitOfWork(
                "this unit of work is read-only (unit_of_work(write=False)); open a "
                "writing one for this call")
        self._check_open()
        if self._session is not None:
            self._flush()
        self._frames.append(write)

    def _flush(self) -> None:
        assert self._session is not None
        try:
            self._session.flush()
        except BaseException as exc:
            if failed_statement(exc):
                self._fail(exc)
            raise self._translated(exc) from exc

    def _fail(self, exc: BaseException) -> None:
        """A statement failed outside any savepoint: the transaction cannot go on
        (PostgreSQL aborted it; on SQLite it may hold part of a method's writes)."""
        if self._failure is None:
            self._failure = exc

    def _check_open(self, committing: bool = False) -> None:
        """Refuse to go on (or commit) once a statement failed outside a savepoint or
        the transaction was rolled back under this unit of work (a failed Session
        flush): the same on both dialects, and never a silent loss."""
        failure = self._failure
        if failure is None:
            transaction = self._transaction
            if transaction is not None:
                alive = transaction.is_active
            else:  # (a SQLite unit of work in autocommit has no transaction to lose)
                alive = self._raw is None or self._autocommit or self._raw.in_transaction
            if alive and not (committing and self.db.sql.transaction_failed(self._conn)):
                return
        reason = "a statement failed in it" if failure is None else str(
            self._translated(failure))
        error = HubStoreError(
            f"this unit of work was rolled back, nothing of it is committed: {reason}. "
            "To go on after an expected failure, make the call inside "
            "`with store.unit_of_work():` (a savepoint)")
        if failure is not None:
            error.__cause__ = self._translated(failure)
        raise error

    def _exit_frame(self, write: bool, failed: bool) -> None:
        self._frames.pop()
        if write and self._session is not None and self._session.identity_map:
            self._session.expire_all()

    # -- what services use -----------------------------------------------------------

    @property
    def connection(self) -> Connection:
        """The SQLAlchemy Connection, in this transaction (when that was
        begun on the driver, SQLAlchemy's transaction joins it now)."""
        if self._transaction is None and self._raw is not None:
            try:
                if self._autocommit and not self._raw.in_transaction:
                    self._one_statement_ran()  # (a transaction now: the rest is atomic)
                    # Begun here, as this unit of work begins (a read may be on the
                    # writer's connection, whose SQLAlchemy BEGIN is IMMEDIATE).
                    self._raw.execute(sqlite_setup.begin_statement(self.write))
                self._transaction = self._conn.begin()  # no second BEGIN (sqlite_setup.py)
            except BaseException as exc:
                raise self._translated(exc) from exc
        return self._conn

    @property
    def driver(self) -> Any:
        """The DBAPI connection under ``connection``.

        A one-statement unit of work on SQLite runs in autocommit: a second statement
        would commit apart from the first, so asking for the driver again raises
        HubStoreError (call :meth:`begin` first where a method needs more than one statement)."""
        raw = self._raw
        if raw is None:
            return self._conn.connection.driver_connection
        if self._autocommit and not raw.in_transaction:
            self._one_statement_ran()
        return raw

    def begin(self) -> None:
        """Begin the transaction now, in a one-statement unit of work that needs more
        than one statement on this dialect (elsewhere the transaction is open already)."""
        raw = self._raw
        if self._autocommit and raw is not None and not raw.in_transaction:
            self._one_statement_ran()  # (refused after the one statement: too late)
            try:
                raw.execute(sqlite_setup.begin_statement(self.write))
            except BaseException as exc:
                raise self._translated(exc) from exc

    def _one_statement_ran(self) -> None:
        if self._ran:
            raise HubStoreError(
                "a one-statement unit of work (one_statement() or one_read()) ran a second "
                "statement; on SQLite it runs in autocommit, so the two would commit "
                "apart: call uow.begin() before the first, or use unit_of_work()")
        self._ran = True

    def statements_watched(self) -> bool:
        """Whether an engine event listener (or echo) watches statements: then the hot
        paths run theirs through SQLAlchemy's execution layer, which tells it. Decided
        once per unit of work (a listener added meanwhile counts from the next one)."""
        watched = self._watched
        if watched is None:
            watched = self._watched = execution.statements_watched(self._conn)
        return watched

    @property
    def session(self) -> Session:
        """The SQLAlchemy Session of this transaction, on its connection and transaction
        (made on first use: the hot paths run Core statements and need none)."""
        if self._session is None:
            if not self._frames:
                raise RuntimeError("the unit of work is not open")
            self._session = Session(bind=self.connection, expire_on_commit=False,
                                    autoflush=True, join_transaction_mode="rollback_only")
        return self._session

    def emit_assign_event(self, event: AssignEvent, job: AssignJob) -> None:
        """Queue an assign status event for the store's listeners, after the commit."""
        self.after_commit(lambda: self._announce(event, job))

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once this transaction has committed (never after a rollback,
        including the rollback of the savepoint it was queued in)."""
        self._after_commit.append(action)

    def _announce(self, event: AssignEvent, job: AssignJob) -> None:
        for listener in list(self.db.assign_listeners):
            try:
                listener(event, job)
            except Exception:
                log.exception("assign status listener %r failed", listener)

    def _publish(self) -> None:
        actions, self._after_commit = self._after_commit, []
        for action in actions:
            try:
                action()
            except Exception:
                log.exception("after-commit action %r failed", action)


class JoinedTransaction(Transaction):
    """A transaction inside an application's own one: its Session's (or its
    Connection's), on the same database. A writing block is a SAVEPOINT of that
    transaction, as a nested unit of work is: an exception leaving it (or a statement of
    its own that failed in it) rolls back the block's writes only, and the application's
    transaction goes on (on PostgreSQL too). Nothing commits here: the application's
    commit commits the hub's writes with its own, its rollback undoes both, and the
    assign status listeners run after the application's commit (never after its
    rollback, nor for a rolled-back block). Store calls made inside join it as usual.

    The application's transaction is its own: hubstore's writers' lock is not taken, and
    it begins as the application's engine begins it. On SQLite a transaction the driver
    has not begun yet (pysqlite begins one only before its first write) is begun by the
    block (BEGIN IMMEDIATE when it writes), so that its SAVEPOINT is inside it.
    """

    def __init__(self, db: Database, joined: Connection | Session, *, write: bool = True
                 ) -> None:
        super().__init__(db, write=write)
        #: The application's Session or Connection this transaction runs in.
        self.joined = joined
        #: The block in the application's transaction (a savepoint when it writes).
        self._block: Frame[Self] | None = None

    def __enter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a unit of work can be entered only once")
        self._entered = True
        if self.db.connections.closed:
            raise StoreClosed()
        joined = self.joined
        try:
            if isinstance(joined, Session):
                self._conn = joined.connection()
                self._session = joined  # uow.session is the application's
            elif isinstance(joined, Connection):
                self._conn = joined
                if not joined.in_transaction():
                    joined.begin()  # (autobegin, as the application's next statement)
            else:
                raise ValidationError(
                    f"join takes the application's Session or Connection, "
                    f"not {type(joined).__name__}")
        except HubStoreError:
            raise
        except BaseException as exc:
            raise self._translated(exc) from exc
        if not same_database(self._conn.engine.url, self.db.url):
            raise ValidationError(
                f"join: the application's transaction is on {self._conn.engine.url!r}, "
                f"not on this store's database {self.db.url!r}")
        self._frames.append(self.write)
        try:
            if self.write:
                self.db.sql.begin_for_savepoint(self._conn.connection.driver_connection)
            block = self._block = Frame(self, self.write, savepoint=self.write)
            block.__enter__()
        except BaseException as exc:
            self._frames.clear()
            raise self._translated(exc) from exc
        self._token = self.db.current_uow.set(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        block, self._block = self._block, None
        assert block is not None
        try:
            if exc is None:
                try:  # a statement of its own failed in it: the block cannot succeed
                    self._check_open(committing=True)
                except HubStoreError as refused:
                    block.__exit__(type(refused), refused, refused.__traceback__)
                    raise
            block.__exit__(exc_type, exc, tb)  # release, or roll back, the savepoint
        finally:
            self.db.current_uow.reset(self._token)
            self._frames.clear()
        if exc is None:
            self._after_application_commit()

    def _after_application_commit(self) -> None:
        """Hand the after-commit actions to the application's transaction: they run
        once it commits, and are dropped if it rolls back."""
        actions, self._after_commit = self._after_commit, []
        if not actions:
            return
        target: Any = self.joined
        commit, rollback = (("after_commit", "after_rollback")
                            if isinstance(target, Session) else ("commit", "rollback"))

        pending = [actions]  # (emptied by whichever of the two comes first)

        def committed(*_: Any) -> None:
            if pending:
                self._after_commit = pending.pop()
                self._publish()

        def rolled_back(*_: Any) -> None:
            pending.clear()

        # once: each listener leaves after its first call (the other one then finds
        # nothing pending); a listener cannot be removed while its event runs.
        event.listen(target, commit, committed, once=True)
        event.listen(target, rollback, rolled_back, once=True)


def open_transaction(db: Database, write: bool = True, *, single_statement: bool = False
                     ) -> AbstractContextManager[Transaction]:
    """A transaction on ``db`` (what the store's scope methods open): while a unit of work
    of the store is open in this thread or task, a nested block of it (a SAVEPOINT when
    ``write``); else a transaction of its own (``single_statement``: in autocommit, see
    Transaction)."""
    current = db.current_uow.get()
    if current is not None:
        return cast(AbstractContextManager[Transaction], current.savepoint(write))
    return Transaction(db, write=write, single_statement=single_statement)


def _mark_outcome(error: BaseException, cause: BaseException) -> None:
    """A connection lost while the server was committing: the call may have written
    (DatabaseUnavailable.outcome_unknown)."""
    if isinstance(error, DatabaseUnavailable) and lost_connection(cause):
        error.outcome_unknown = True


def _reload_expired(session: Session) -> None:
    """Load again, in the committing transaction, the objects that the store's writes
    expired: once detached, an expired instance could not be read at all."""
    stale: dict[Any, list[Any]] = {}
    for obj in list(session.identity_map.values()):
        state = inspect(obj)
        if state.expired_attributes:
            stale.setdefault(state.mapper, []).append(state)
    for mapper, states in stale.items():
        if len(mapper.primary_key) != 1:  # pragma: no cover - every hub table has one
            for state in states:
                session.refresh(state.obj())
            continue
        keys = [state.identity[0] for state in states]
        found = {inspect(obj).identity for obj in session.scalars(
            select(mapper).where(mapper.primary_key[0].in_(keys))
            .execution_options(populate_existing=True))}
        for state in states:  # deleted meanwhile: it is gone
            if state.identity not in found:
                session.expunge(state.obj())


class Frame(Generic[T]):
    """A nested block of an open transaction (see the module's docstring)."""

    __slots__ = ("_actions", "_savepoint", "guard", "savepoint", "tx", "write")

    def __init__(self, tx: T, write: bool, *, savepoint: bool,
                 guard: bool = False) -> None:
        self.tx = tx
        self.write = write
        self.savepoint = savepoint
        #: A read-only block inside a writing one: the transaction refuses writes in it.
        self.guard = guard
        self._savepoint: Any = None
        self._actions = 0

    def __enter__(self) -> T:
        tx = self.tx
        tx._enter_frame(self.write)
        if self.guard:
            try:
                tx._refuse_writes(True)
            except BaseException as exc:
                raise self._abandoned(exc) from exc
        elif self.savepoint:
            try:
                session = tx._session
                if session is not None:
                    self._savepoint = session.begin_nested()
                    session.connection()  # the SAVEPOINT now: store calls run on the
                    # connection, not through the Session, which would emit it lazily
                else:
                    self._savepoint = tx.connection.begin_nested()
            except BaseException as exc:
                tx._frames.pop()
                raise tx._translated(exc) from exc
            self._actions = len(tx._after_commit)
        return tx

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        tx = self.tx
        if self.guard:
            self._exit_guarded(exc)
            return
        failure: BaseException | None = None
        if self._savepoint is not None:
            try:
                if exc_type is None:
                    self._savepoint.commit()
                else:
                    self._savepoint.rollback()
                    tx._failure = None  # (it was None when the savepoint began)
                    del tx._after_commit[self._actions:]  # nothing of it happened
                    if tx._session is not None:
                        tx._session.expire_all()
            except BaseException as error:
                failure = error
        tx._exit_frame(self.write, exc_type is not None)
        if failure is not None and exc is None:
            raise tx._translated(failure) from failure
        if exc is not None:
            if failure is not None:  # the savepoint could not be rolled back (a lost
                tx._fail(failure)  # connection): the block's failure is the first one
            elif self._savepoint is None and failed_statement(exc):
                tx._fail(exc)
            translated = tx._translated(exc)
            if translated is not exc:
                raise translated from exc

    def _exit_guarded(self, exc: BaseException | None) -> None:
        """Leave a read-only block inside a writing one: writes allowed again (a write it
        refused failed only inside it), its refusal raised as ReadOnlyUnitOfWork. After a
        lost connection there is nothing to allow again (and asking for its driver
        connection would connect again): the error that lost it goes on."""
        tx = self.tx
        try:
            if exc is None or not tx._conn.invalidated:
                tx._refuse_writes(False)
        except BaseException as error:
            raise self._abandoned(error) from error
        tx._frames.pop()
        if exc is not None:
            translated = tx._translated(exc, read_only=True)
            if translated is not exc:
                raise translated from exc

    def _abandoned(self, exc: BaseException) -> BaseException:
        """The guard's own statement failed: leave the block, and fail the unit of work
        (its transaction is in an unknown state)."""
        self.tx._frames.pop()
        self.tx._fail(exc)
        return self.tx._translated(exc)


class Scope(Protocol):
    """Where a service function opens the transaction it runs in: the store (a
    transaction of its own, or joining the unit of work open in this thread), a unit of
    work (joining its transaction) or a Transaction itself (joining it). Every service
    function takes one as its first argument; what it opens yields a
    :class:`Transaction`, the only thing a service runs statements on."""

    @property
    def sql(self) -> SqlDialect:
        """The dialect's SQL component (to choose a transaction before opening it)."""
        ...

    @property
    def db(self) -> Database:
        """The store's shared state (its throttles, to decide before opening)."""
        ...

    def transaction(self, write: bool = True) -> AbstractContextManager[Transaction]:
        """A transaction (``write`` takes SQLite's write lock up front)."""
        ...

    def one_statement(self) -> AbstractContextManager[Transaction]:
        """For a method that writes with exactly one statement: the store runs it in
        autocommit (one round trip on PostgreSQL)."""
        ...

    def one_read(self) -> AbstractContextManager[Transaction]:
        """For a method that reads with exactly one SELECT: the store runs it in
        autocommit."""
        ...
