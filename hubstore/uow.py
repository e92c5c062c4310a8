"""The unit of work users hold: a transaction (:class:`~hubstore.transaction.Transaction`)
with every store method on it (:class:`~hubstore.operations.HubOperations`), each run
inside that one transaction.

>>> with store.unit_of_work() as uow:  # doctest: +SKIP
...     job = uow.create_assign(supervisor_agent="lead", worker_agent="w1", task="t")
...     uow.audit_log("event", "lead", "w1", "x")
"""

from __future__ import annotations

from hubstore.operations import HubOperations
from hubstore.transaction import JoinedTransaction, Transaction


class UnitOfWork(Transaction, HubOperations):
    """One connection, one transaction, a Session on them, and every store method run
    in that transaction (``store.unit_of_work()`` makes one; docs/concurrency.md gives the
    rules: nesting, read-only units of work, the Session, joining the application's)."""


class JoinedUnitOfWork(JoinedTransaction, UnitOfWork):
    """A unit of work inside the application's own transaction
    (``store.unit_of_work(join=session)``; see JoinedTransaction)."""

__all__ = ["JoinedUnitOfWork", "UnitOfWork"]
