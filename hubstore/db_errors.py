"""Driver and SQLAlchemy errors as hubstore errors: one place, both dialects.

The unit of work passes every exception that leaves one of its blocks through
:func:`translate`, so a caller catches the same class on SQLite and PostgreSQL, with the
driver's exception as ``__cause__``. SQLite errors are told apart by their extended
result code (``sqlite_errorname``), PostgreSQL ones by SQLSTATE.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from sqlalchemy import exc as sa_exc

from hubstore.errors import (
    DatabaseBusy,
    DatabaseUnavailable,
    DuplicateKey,
    HubStoreError,
    ReadOnlyUnitOfWork,
    ValidationError,
)

_READ_ONLY_MESSAGE = "this unit of work is read-only (unit_of_work(write=False))"


def translate(exc: BaseException, *, read_only: bool = False) -> HubStoreError | None:
    """The hubstore error for a database failure, or None when ``exc`` is not one."""
    if isinstance(exc, HubStoreError):
        return exc
    orig: BaseException = exc
    if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:
        orig = exc.orig
        if exc.connection_invalidated:
            return _lost(orig)
    elif isinstance(exc, sa_exc.StatementError) and exc.orig is not None:
        orig = exc.orig  # a bind processor refused a value
        if not isinstance(orig, sqlite3.Error) and not _is_psycopg(orig):
            return ValidationError(f"a value cannot be stored: {_text(orig)}")
    if getattr(orig, "hubstore_server", None) is not None:  # (lost in a driver call made
        return _lost(orig)  # without SQLAlchemy: hubstore.pg_connections names the server)
    if isinstance(orig, sqlite3.Error):
        return _sqlite(orig, read_only)
    if _is_psycopg(orig):
        return _postgresql(orig, read_only)
    if isinstance(exc, sa_exc.TimeoutError):
        return DatabaseBusy(f"no database connection was free in time: {_text(exc)}")
    if isinstance(exc, sa_exc.SQLAlchemyError):
        return HubStoreError(f"the database call failed: {_text(exc)}")
    if isinstance(exc, OverflowError | UnicodeEncodeError) and _from_driver(exc):
        return ValidationError(f"a value cannot be stored: {exc}")
    return None


def _lost(orig: BaseException) -> DatabaseUnavailable:
    """The error for a connection lost in a call, naming the server it was lost from
    (hubstore.pg_connections tells it) and the driver's own reason."""
    server = getattr(orig, "hubstore_server", None)
    where = f"PostgreSQL server at {server}" if server else "database"
    return DatabaseUnavailable(f"the connection to the {where} was lost: {_text(orig)}")


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a connection lost in a call:
    the call may or may not have reached the server."""
    seen: BaseException | None = exc
    for _ in range(8):  # (a HubStoreError raised from SQLAlchemy's, from the driver's)
        if seen is None:
            return False
        if (isinstance(seen, sa_exc.DBAPIError) and seen.connection_invalidated) or (
                getattr(seen, "hubstore_server", None) is not None):
            return True
        seen = seen.__cause__
    return False


def failed_statement(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement's failure in the database (or a hubstore error
    raised from one): after one a transaction cannot go on as if nothing happened
    (PostgreSQL aborts it). A value refused before it was sent is not one."""
    cause = exc.__cause__ if isinstance(exc, HubStoreError) else exc
    return cause is not None and (isinstance(cause, sa_exc.DBAPIError | sqlite3.Error)
                                  or _is_psycopg(cause))


def _text(exc: BaseException) -> str:
    """The first line of the error's message; for libpq's failure to connect to any of
    several servers, each server with its reason."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    if _SEVERAL in text:
        return "no server took the connection: " + "; ".join(
            f"{host}:{port}: {reason.strip()}" for host, port, reason in _ATTEMPT.findall(text))
    return text.splitlines()[0]


#: libpq's (psycopg's) message after trying each host of a multi-host URL, and its lines.
_SEVERAL = "Multiple connection attempts failed"
_ATTEMPT = re.compile(r"^- host: '([^']*)', port: '([^']*)'[^\n]*?: connection failed: "
                      r"(?:connection to server (?:at|on) .*? failed: )?([^\n]*)$", re.M)


def _from_driver(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc`` is a database driver's (binding a value)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return module.startswith(("sqlite3", "psycopg", "sqlalchemy", "hubstore.services.base"))


def _sqlite(exc: sqlite3.Error, read_only: bool) -> HubStoreError:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = _text(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
        return DatabaseBusy(f"the SQLite database was locked past the busy timeout: {text}")
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        if read_only:
            return ReadOnlyUnitOfWork(f"{_READ_ONLY_MESSAGE}: {text}")
        return DatabaseUnavailable(f"the SQLite file cannot be written (read-only): {text}")
    if name.startswith("SQLITE_FULL"):
        return DatabaseUnavailable(f"the disk holding the SQLite file is full: {text}")
    if name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_CORRUPT", "SQLITE_NOTADB",
                        "SQLITE_PERM", "SQLITE_AUTH")):
        return DatabaseUnavailable(f"the SQLite file cannot be used: {text}")
    if name in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"):
        return DuplicateKey(f"a row with that key exists already: {text}")
    if name.startswith(("SQLITE_CONSTRAINT", "SQLITE_TOOBIG", "SQLITE_MISMATCH", "SQLITE_RANGE")):
        return ValidationError(f"the database refused a value: {text}")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in text:
        return DatabaseUnavailable(f"the store's connection is closed: {text}")
    if isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError):
        return ValidationError(f"the database refused a value: {text}")
    return HubStoreError(f"the SQLite statement failed: {text}")


def _is_psycopg(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg's (or hubstore.pg_connections' NoAnswer)."""
    return type(exc).__module__.startswith("psycopg") or hasattr(exc, "hubstore_server")


def _postgresql(exc: Any, read_only: bool) -> HubStoreError:
    state = str(getattr(exc, "sqlstate", "") or "")
    text = _text(exc)
    if state == "23505":
        return DuplicateKey(f"a row with that key exists already: {text}")
    if state.startswith(("23", "22", "54")) or state == "42804":
        return ValidationError(f"the database refused a value: {text}")
    if state == "25006":
        if read_only:
            return ReadOnlyUnitOfWork(f"{_READ_ONLY_MESSAGE}: {text}")
        return DatabaseUnavailable(f"the database accepts no writes: {text}")
    if state in ("55P03", "57014", "40P01", "40001"):
        return DatabaseBusy(f"the database was busy: {text}")
    if state.startswith(("08", "53", "57", "58", "XX")) or not state:
        return DatabaseUnavailable(f"the PostgreSQL server is unavailable: {text}")
    return HubStoreError(f"the PostgreSQL statement failed: {text}")
