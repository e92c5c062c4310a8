"""The unit of work: one connection and transaction (a Session when needed), events after
commit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from hubstore.connections import WriterQueue
from hubstore.services import HubOperations

if TYPE_CHECKING:
    from hubstore.models import AssignJob
    from hubstore.store import HubStore

log = logging.getLogger(__name__)


class UnitOfWork(HubOperations):
    """One connection, one transaction, and a Session on them when ORM work needs one.

    Leaving the block normally commits; an exception rolls back and propagates. Assign
    status events collected during the work reach the store's listeners only after the
    commit, in order with the other actions queued by :meth:`after_commit`. ``write=True``
    (the default) starts SQLite transactions with BEGIN IMMEDIATE.
    """

    connection: Connection

    def __init__(self, store: HubStore, *, write: bool = True) -> None:
        self.store = store
        self.dialect: str = store.engine.dialect.name
        self._write = write
        self._after_commit: list[Callable[[], None]] = []
        self._session: Session | None = None
        self._queue: WriterQueue | None = None
        self._entered = False

    def __enter__(self) -> UnitOfWork:
        if self._entered:
            raise RuntimeError("a unit of work can be entered only once")
        self._entered = True
        source = self.store.connections
        self._queue = source.writers if self._write else None
        if self._queue is not None:
            self._queue.acquire()
        try:
            self.connection = source.acquire()
            if self.dialect == "sqlite":
                # BEGIN straight on the driver: SQLAlchemy's own transaction, when a Core
                # statement or the Session needs one, joins it (see engine.py's begin hook).
                self.driver.execute("BEGIN IMMEDIATE" if self._write else "BEGIN DEFERRED")
            else:
                self.connection.begin()
        except BaseException:
            if self._queue is not None:
                self._queue.release()
            raise
        return self

    @property
    def driver(self) -> Any:
        """The DBAPI connection under ``connection`` (SQLite's hot paths use it)."""
        return self.connection.connection.driver_connection

    @property
    def session(self) -> Session:
        """The SQLAlchemy Session of this unit of work, on its connection and transaction.

        Made on first use: Core statements on the hot paths run on ``connection`` and
        need no Session.
        """
        if self._session is None:
            if not self._entered:
                raise RuntimeError("the unit of work has not been entered")
            if not self.connection.in_transaction():
                self.connection.begin()  # joins the driver's BEGIN (engine.py)
            self._session = Session(bind=self.connection, expire_on_commit=False,
                                    autoflush=False, join_transaction_mode="rollback_only")
        return self._session

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        session, self._session = self._session, None
        try:
            if exc_type is None:
                if session is not None:
                    session.flush()
                self._end("COMMIT")
            else:
                if session is not None:
                    # Detach first, so that rows handed out stay readable (not expired).
                    session.expunge_all()
                self._end("ROLLBACK")
        finally:
            if session is not None:
                session.close()
            if self.connection.in_transaction() or (
                    self.dialect == "sqlite" and self.driver.in_transaction):
                self._end("ROLLBACK")  # only after a failed COMMIT: leave the connection clean
            self.store.connections.release(self.connection)
            if self._queue is not None:
                self._queue.release()
        if exc_type is None:
            self._publish()

    def _end(self, how: str) -> None:
        """Commit or roll back: SQLAlchemy's transaction if one began, and on SQLite the
        driver's BEGIN if nothing else ended it."""
        if self.connection.in_transaction():
            if how == "COMMIT":
                self.connection.commit()
            else:
                self.connection.rollback()
        if self.dialect == "sqlite" and self.driver.in_transaction:
            self.driver.execute(how)

    @contextmanager
    def unit_of_work(self, write: bool = True) -> Iterator[UnitOfWork]:
        """Join this unit of work (so that store methods compose inside one transaction)."""
        yield self

    def emit_assign_event(self, event: dict[str, Any], job: AssignJob) -> None:
        """Queue an assign status event for the store's listeners, after the commit."""
        self.after_commit(lambda: self._announce(event, job))

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once this unit of work has committed (never after a rollback)."""
        self._after_commit.append(action)

    def _announce(self, event: dict[str, Any], job: AssignJob) -> None:
        for listener in list(self.store.assign_listeners):
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
