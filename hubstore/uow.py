"""The unit of work: one Session, one transaction, events after commit."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, RootTransaction
from sqlalchemy.orm import Session

from hubstore.connections import WriterQueue
from hubstore.engine import BEGIN_MODE
from hubstore.services.agents import AgentOps
from hubstore.services.assign_hub import AssignHubOps
from hubstore.services.assigns import AssignOps
from hubstore.services.dead_letters import DeadLetterOps
from hubstore.services.human_requests import HumanRequestOps
from hubstore.services.messages import MessageOps
from hubstore.services.pipelines import PipelineOps
from hubstore.services.reflexion import ReflexionOps
from hubstore.services.stats import StatsOps

if TYPE_CHECKING:
    from hubstore.models import AssignJob
    from hubstore.store import HubStore

log = logging.getLogger(__name__)


class UnitOfWork(
    AgentOps, MessageOps, HumanRequestOps, DeadLetterOps, AssignOps, AssignHubOps,
    ReflexionOps, PipelineOps, StatsOps,
):
    """One Session and one transaction.

    Leaving the block normally commits; an exception rolls back and propagates. Assign
    status events collected during the work reach the store's listeners only after the
    commit. ``write=True`` (the default) starts SQLite transactions with BEGIN IMMEDIATE.
    """

    connection: Connection

    def __init__(self, store: HubStore, *, write: bool = True) -> None:
        self.store = store
        self.dialect: str = store.engine.dialect.name
        self._write = write
        self._events: list[tuple[dict[str, Any], AssignJob]] = []
        self._session: Session | None = None
        self._transaction: RootTransaction | None = None
        self._queue: WriterQueue | None = None

    def __enter__(self) -> UnitOfWork:
        if self._transaction is not None or self._events:
            raise RuntimeError("a unit of work can be entered only once")
        source = self.store.connections
        self._queue = source.writers if self._write else None
        if self._queue is not None:
            self._queue.acquire()
        try:
            connection = source.acquire()
            if self.dialect == "sqlite":
                mode = "IMMEDIATE" if self._write else "DEFERRED"
                connection = connection.execution_options(**{BEGIN_MODE: mode})
            self.connection = connection
            self._transaction = connection.begin()
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
            if self._transaction is None:
                raise RuntimeError("the unit of work has not been entered")
            self._session = Session(bind=self.connection, expire_on_commit=False,
                                    autoflush=False, join_transaction_mode="rollback_only")
        return self._session

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self._transaction is not None
        session, self._session = self._session, None
        try:
            if exc_type is None:
                if session is not None:
                    session.flush()
                self._transaction.commit()
            else:
                if session is not None:
                    # Detach first, so that rows handed out stay readable (not expired).
                    session.expunge_all()
                self._transaction.rollback()
        finally:
            if session is not None:
                session.close()
            self.store.connections.release(self.connection)
            if self._queue is not None:
                self._queue.release()
        if exc_type is None:
            self._publish()

    @contextmanager
    def unit_of_work(self, write: bool = True) -> Iterator[UnitOfWork]:
        """Join this unit of work (so that store methods compose inside one transaction)."""
        yield self

    def emit_assign_event(self, event: dict[str, Any], job: AssignJob) -> None:
        """Queue an assign status event for after the commit."""
        self._events.append((event, job))

    def _publish(self) -> None:
        events, self._events = self._events, []
        for event, job in events:
            for listener in list(self.store.assign_listeners):
                try:
                    listener(event, job)
                except Exception:
                    log.exception("assign status listener %r failed", listener)
