"""HubStore: opening a database, units of work, and the facade of every store method."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from hubstore import sqlite_setup
from hubstore.connections import ConnectionSource
from hubstore.database import AssignListener, Database, Features, OpenUnitOfWork
from hubstore.db_errors import translate
from hubstore.dialects import SqlDialect
from hubstore.engine import BUSY_TIMEOUT_MS, CALL_TIMEOUT_S, create_hub_engine
from hubstore.errors import (
    DatabaseUnavailable,
    HubStoreError,
    ValidationError,
    describe,
)
from hubstore.operations import StoreOperations
from hubstore.signals import ChangeWatcher
from hubstore.transaction import JoinedTransaction, Transaction, open_transaction
from hubstore.uow import JoinedUnitOfWork, UnitOfWork, nested
from hubstore.urls import checked_call_timeout, resolve_url, sqlite_path
from hubstore.validation import require_callable, require_int


def open_error(exc: Exception) -> HubStoreError:
    """The hubstore error for a failure to open a store."""
    error = translate(exc)
    if error is not None:
        return error
    if isinstance(exc, OSError):
        return DatabaseUnavailable(f"the SQLite file cannot be created or opened: {exc}")
    if isinstance(exc, TypeError | ValueError | LookupError):
        return ValidationError(f"cannot open the store with these arguments: {exc}")
    return HubStoreError(f"cannot open the store: {type(exc).__name__}: {exc}")


def _in_schema(url: URL, schema: str, engine_options: dict[str, Any]) -> dict[str, Any]:
    """Engine options whose connections have ``schema`` as their search path (PostgreSQL
    only: a SQLite file has no schemas)."""
    if url.get_backend_name() != "postgresql":
        raise ValidationError(
            f"schema={schema!r} is for PostgreSQL; a SQLite file has no schemas (give "
            "hubstore a file of its own, or leave schema out)")
    connect_args = dict(engine_options.get("connect_args") or {})
    options = connect_args.get("options")
    connect_args["options"] = f"{options or ''} -csearch_path={schema}".strip()
    return {**engine_options, "connect_args": connect_args}


class HubStore(StoreOperations):
    """The hub's store. Each method called here is a unit of work of its own.

    >>> with HubStore.open("sqlite:///hub.db", auto_migrate=True) as store:  # doctest: +SKIP
    ...     with store.unit_of_work() as uow:
    ...         job = uow.assign_async("lead", "worker-1", task="write tests")
    """

    def __init__(self, engine: Engine, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        """A store on ``engine`` (at head: HubStore.open checks and migrates; this does
        not). An application's own SQLite engine gets hubstore's set-up here (WAL,
        foreign keys, busy timeout, writes that begin IMMEDIATE), and its pooled
        connections are closed so that every new one has it."""
        if engine.dialect.name == "sqlite" and not sqlite_setup.is_configured(engine):
            sqlite_setup.configure_engine(engine, wal=True, foreign_keys=True,
                                    busy_timeout_ms=busy_timeout_ms)
            engine.dispose()
        #: What units of work run against (engine, connections, listeners, ...).
        self.db = db = Database(engine, busy_timeout_ms=busy_timeout_ms)
        self.sql: SqlDialect = db.sql
        self.engine: Engine = engine
        self.url: URL = db.url
        self.dialect: str = db.dialect
        self.assign_listeners: list[AssignListener] = db.assign_listeners
        self.features: Features = db.features
        self.connections: ConnectionSource = db.connections
        #: The unit of work open in this thread or task, which store calls join.
        self.current_uow: ContextVar[OpenUnitOfWork | None] = db.current_uow

    @classmethod
    def open(cls, url: str | URL | None = None, *, auto_migrate: bool = False,
             busy_timeout_ms: int = BUSY_TIMEOUT_MS, version_table: str | None = None,
             schema: str | None = None, call_timeout_s: float | None = CALL_TIMEOUT_S,
             **engine_options: Any) -> HubStore:
        """Open the store at ``url`` (else $HUBSTORE_URL, else the embedded default).

        With ``auto_migrate`` the database is migrated to head first (adopting a legacy
        triflux file); without it, a database that is not at head raises
        SchemaNotCurrent and nothing is created or changed. ``busy_timeout_ms`` bounds
        every wait for SQLite's write lock (then DatabaseBusy).

        ``version_table``: where hubstore's migrations keep their revision, when it is
        not one of the two it finds by itself (``alembic_version``,
        ``hubstore_alembic_version``: see docs/migrations.md). ``schema`` (PostgreSQL):
        hubstore's tables are in this schema of their own (the connections' search
        path).

        ``call_timeout_s`` (PostgreSQL): the longest one call may wait on the server
        before its connection is closed and the call raises DatabaseUnavailable (a
        frozen server, a network that drops packets); 0 or None: no bound. The URL's
        ``?call_timeout=`` wins. Connections also get hubstore's connect timeout and
        TCP keepalives (:mod:`hubstore.pg_connections`, docs/failover.md).

        The URL is resolved once; on PostgreSQL one engine serves the revision check,
        the migrations (``auto_migrate``) and the store.

        Every failure is a HubStoreError: ValidationError for a bad URL or argument
        (engine options included), DatabaseUnavailable for a file or server that
        cannot be used, SchemaNotCurrent, UnknownSchema.
        """
        require_int(busy_timeout_ms, "busy_timeout_ms", minimum=0, maximum=2**31 - 1)
        bound = checked_call_timeout(call_timeout_s, "call_timeout_s")
        from hubstore import migrations

        versions = migrations.checked_options(version_table, schema)
        try:
            resolved = resolve_url(url)
            if schema is not None:
                engine_options = _in_schema(resolved, schema, engine_options)
            return cls._open(resolved, auto_migrate, busy_timeout_ms,
                             {"call_timeout_s": bound, **engine_options}, *versions)
        except HubStoreError:
            raise
        except Exception as exc:
            raise open_error(exc) from exc

    @classmethod
    def _open(cls, url: URL, auto_migrate: bool, busy_timeout_ms: int,
              engine_options: dict[str, Any], version_table: str | None = None,
              schema: str | None = None) -> HubStore:
        """The URL resolved once. PostgreSQL: one engine, whose first connection reads
        the revision and runs the migrations (on it, under their own call bound).
        SQLite: the revision is read from the file without an engine (nothing created),
        and a migration runs on an engine of its own (the file's journal mode untouched
        until a legacy file is adopted, foreign keys off, a longer busy timeout); then the
        store's engine."""
        from hubstore import migrations

        if sqlite_path(url) is not None:
            at = migrations.revision_at(url, version_table=version_table)
            if at != migrations.head():
                if not auto_migrate:
                    raise migrations.not_current(url, at)
                migrations.run_upgrade(url, version_table=version_table)
            return cls(create_hub_engine(url, busy_timeout_ms=busy_timeout_ms,
                                         **engine_options), busy_timeout_ms=busy_timeout_ms)
        engine = create_hub_engine(url, busy_timeout_ms=busy_timeout_ms, **engine_options)
        try:
            with engine.connect() as conn:
                at = migrations.current_version(conn, version_table=version_table,
                                                schema=schema).revision
                if at != migrations.head():
                    if not auto_migrate:
                        raise migrations.not_current(url, at)
                    migrations.upgrade(conn, version_table=version_table, schema=schema)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, busy_timeout_ms=busy_timeout_ms)

    def unit_of_work(self, write: bool = True, *, join: Session | Connection | None = None
                     ) -> AbstractContextManager[UnitOfWork]:
        """A unit of work: one transaction, one Session (see :class:`UnitOfWork`).

        While one is open in this thread or task, this joins it instead: as a SAVEPOINT
        when ``write``, so that an exception inside rolls back this block only.

        ``join``: the application's own Session (or Connection) on this database: the
        unit of work is a SAVEPOINT of the application's transaction (an exception
        leaving it rolls back this block only), which commits or rolls back the hub's
        writes with its own (see docs/concurrency.md).
        """
        if join is not None and not isinstance(join, Session | Connection):
            raise ValidationError(f"join takes the application's Session or Connection, "
                                  f"not {describe(join)}")
        current = self.current_uow.get()
        if current is not None:
            if join is not None and getattr(current, "joined", None) is not join:
                raise ValidationError(
                    "join: a unit of work of this store is open in this thread already; "
                    "call the store inside it (it joins), or join before opening it")
            return nested(cast(Transaction, current), write)
        if join is not None:
            return JoinedUnitOfWork(JoinedTransaction(self.db, join, write=write))
        return UnitOfWork(Transaction(self.db, write=write))

    # -- the scope of the store methods (see hubstore.transaction.Scope) -------------

    def transaction(self, write: bool = True) -> AbstractContextManager[Transaction]:
        """A transaction for a store method: its own, or a nested block (a SAVEPOINT
        when ``write``) of the unit of work open in this thread or task."""
        return open_transaction(self.db, write)

    def one_statement(self) -> AbstractContextManager[Transaction]:
        """A writing transaction for a store method that runs one statement: on
        PostgreSQL in autocommit, the statement its own transaction (one round trip, no
        BEGIN or COMMIT). Inside an open unit of work it joins it, as transaction()."""
        return open_transaction(self.db, True, single_statement=True)

    def one_read(self) -> AbstractContextManager[Transaction]:
        """A reading transaction for a store method that runs one SELECT: in
        autocommit on both dialects, the statement its own snapshot (no BEGIN or COMMIT;
        PostgreSQL: one round trip). Inside an open unit of work it joins it."""
        return open_transaction(self.db, False, single_statement=True)

    # -- waiting -----------------------------------------------------------------------

    @property
    def listen_url(self) -> URL | str | bool | None:
        """Where the PostgreSQL listener of the waiters connects: None means the store's
        URL; a direct URL when the store goes through PgBouncer in transaction mode;
        False for no LISTEN (waiters then look at the tables every few seconds). Set it
        before the first wait."""
        return self.db.listen_url

    @listen_url.setter
    def listen_url(self, value: URL | str | bool | None) -> None:
        self.db.listen_url = value

    def change_watcher(self) -> ChangeWatcher:
        """The watcher that wakes this store's waiters (made on first use)."""
        return self.db.change_watcher()

    def close_waiters(self) -> None:
        """Stop this store's watcher thread and wake its waiters (store.close calls it)."""
        self.db.close_waiters()

    def on_assign_status_change(self, listener: AssignListener) -> Callable[[], None]:
        """Call ``listener(event, job)`` after each committed assign status change.

        Returns a function that unsubscribes it.
        """
        require_callable(listener, "listener")
        self.assign_listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self.assign_listeners:
                self.assign_listeners.remove(listener)

        return unsubscribe

    def close(self) -> None:
        """Release everything: wake and stop the waiters (``wait_for_assign`` and
        message feeds return as on a timeout), then close every connection. From then on
        every call of the store raises StoreClosed (closing again does nothing)."""
        self.close_waiters()
        self.connections.close()

    def __enter__(self) -> HubStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
