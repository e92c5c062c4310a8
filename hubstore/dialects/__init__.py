"""Every difference between SQLite and PostgreSQL that the unit of work and the services
need, one component per dialect: services ask ``uow.sql`` (a :class:`SqlDialect`)
instead of testing the dialect's name.

The engine-level set-up (pragmas, BEGIN IMMEDIATE, the writers' lock) is in
:mod:`hubstore.sqlite_setup` and :mod:`hubstore.engine`; how a statement runs on each driver is
in :mod:`hubstore.execution`.
"""

from __future__ import annotations

from hubstore.dialects.base import ContextSignature, SqlDialect
from hubstore.dialects.postgresql import PostgreSQLDialect
from hubstore.dialects.sqlite import SQLiteDialect

_DIALECTS: dict[str, SqlDialect] = {"sqlite": SQLiteDialect(),
                                    "postgresql": PostgreSQLDialect()}


def dialect_for(name: str) -> SqlDialect:
    """The SQL component of the dialect named ``name`` (SQLAlchemy's dialect name)."""
    try:
        return _DIALECTS[name]
    except KeyError:
        raise ValueError(f"hubstore supports SQLite and PostgreSQL, not {name!r}") from None


__all__ = ["ContextSignature", "PostgreSQLDialect", "SQLiteDialect", "SqlDialect",
           "dialect_for"]
