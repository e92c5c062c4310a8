"""The unit of work users hold: every store method (:class:`~hubstore.operations.HubOperations`)
on one transaction (:class:`~hubstore.transaction.Transaction`), which it holds.

>>> with store.unit_of_work() as uow:  # doctest: +SKIP
...     job = uow.create_assign(supervisor_agent="lead", worker_agent="w1", task="t")
...     uow.audit_log("event", "lead", "w1", "x")

The unit of work is the facade of the store methods (as the store is) built on its
transaction: the methods it gets from HubOperations open their work through its
:meth:`UnitOfWork.transaction`, which joins the transaction it holds, so each runs in
that one transaction. The services see the transaction only.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from hubstore.operations import HubOperations
from hubstore.transaction import Frame, JoinedTransaction, Transaction


class UnitOfWork(HubOperations):
    """One connection, one transaction, a Session on them, and every store method run
    in that transaction (``store.unit_of_work()`` makes one; docs/concurrency.md gives the
    rules: nesting, read-only units of work, the Session, joining the application's)."""

    def __init__(self, transaction: Transaction) -> None:
        self._tx = transaction
        transaction.facade = self
        self.db = transaction.db
        self.sql = transaction.db.sql
        #: "sqlite" or "postgresql".
        self.dialect: str = transaction.dialect
        #: Whether it may write (``store.unit_of_work(write=False)``: it may not).
        self.write: bool = transaction.write

    # -- the outermost block ---------------------------------------------------------

    def __enter__(self) -> UnitOfWork:
        self._tx.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._tx.__exit__(exc_type, exc, tb)
        finally:
            self._tx.facade = None  # (no cycle left once it ended)

    # -- the scope of the store methods (see hubstore.transaction.Scope) -------------

    def transaction(self, write: bool = True) -> Frame[Transaction]:
        """Join the transaction: each store method of the unit of work runs through here."""
        return Frame(self._tx, write, savepoint=False)

    def one_statement(self) -> Frame[Transaction]:
        """Join the transaction, for a method of one writing statement."""
        return Frame(self._tx, True, savepoint=False)

    def one_read(self) -> Frame[Transaction]:
        """Join the transaction, for a method of one SELECT."""
        return Frame(self._tx, False, savepoint=False)

    # -- what callers use ------------------------------------------------------------

    def unit_of_work(self, write: bool = True) -> Block:
        """Join this unit of work (no savepoint: ``store.unit_of_work()`` makes one)."""
        return Block(Frame(self._tx, write, savepoint=False), self)

    @property
    def session(self) -> Session:
        """The SQLAlchemy Session of this unit of work, on its connection and transaction
        (made on first use: the hot paths run Core statements and need none)."""
        return self._tx.session

    @property
    def connection(self) -> Connection:
        """The SQLAlchemy Connection, in this unit of work's transaction."""
        return self._tx.connection

    @property
    def driver(self) -> Any:
        """The driver's connection (sqlite3 or psycopg), in this unit of work's
        transaction (see Transaction.driver)."""
        return self._tx.driver

    def begin(self) -> None:
        """Begin the transaction now (see Transaction.begin)."""
        self._tx.begin()

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once this unit of work has committed (never after a rollback,
        including the rollback of the savepoint it was queued in)."""
        self._tx.after_commit(action)


class JoinedUnitOfWork(UnitOfWork):
    """A unit of work inside the application's own transaction
    (``store.unit_of_work(join=session)``; see JoinedTransaction)."""

    def __init__(self, transaction: JoinedTransaction) -> None:
        super().__init__(transaction)
        #: The application's Session or Connection this unit of work runs in.
        self.joined: Session | Connection = transaction.joined


class Block:
    """A nested block of an open unit of work, as callers see it: entered, it is the
    unit of work (a SAVEPOINT when the store made it for a writing block)."""

    __slots__ = ("frame", "uow")

    def __init__(self, frame: Frame[Transaction], uow: UnitOfWork) -> None:
        self.frame = frame
        self.uow = uow

    def __enter__(self) -> UnitOfWork:
        self.frame.__enter__()
        return self.uow

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.frame.__exit__(exc_type, exc, tb)


def nested(current: Transaction, write: bool) -> Block:
    """A nested block of the open ``current`` (a SAVEPOINT when ``write``), entered as
    the unit of work callers hold on it (``store.unit_of_work()`` inside one)."""
    facade = current.facade
    uow = facade if isinstance(facade, UnitOfWork) else UnitOfWork(current)
    return Block(current.savepoint(write), uow)


__all__ = ["JoinedUnitOfWork", "UnitOfWork"]
