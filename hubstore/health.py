"""Health checks of a hub database (``hubstore db check``), and read-only connections.

Everything here only reads. A SQLite file is opened with ``mode=ro`` and no pragma that
writes (no journal-mode switch): the database file keeps its bytes and its mtime.
SQLite itself may leave empty ``-wal``/``-shm`` files beside a WAL database that no other
process had open (a read-only connection cannot remove them).
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    CheckConstraint,
    Connection,
    UniqueConstraint,
    create_engine,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.exc import SAWarning
from sqlalchemy.pool import NullPool

from hubstore import figures, migrations
from hubstore.engine import create_hub_engine, sqlite_path
from hubstore.errors import HubStoreError
from hubstore.models import metadata
from hubstore.pg_connections import MAINTENANCE_CALL_TIMEOUT_S


class MissingDatabase(FileNotFoundError):
    """A SQLite URL names a file that does not exist."""


def require_file(url: URL) -> None:
    """Raise MissingDatabase for a SQLite URL whose file is not there."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise MissingDatabase(f"there is no SQLite database at {path}")


@contextmanager
def read_only(url: URL) -> Iterator[Connection]:
    """A connection in a read-only transaction. SQLite: ``mode=ro``, nothing created.
    PostgreSQL: with the settings of every hubstore connection (connect timeout,
    keepalives, a bound on each call: :mod:`hubstore.pg_connections`)."""
    require_file(url)
    path = sqlite_path(url)
    if path is None:  # hubstore's connect settings; a longer call bound, as migrations
        engine = create_hub_engine(url, poolclass=NullPool,
                                   call_timeout_s=MAINTENANCE_CALL_TIMEOUT_S)
    else:
        uri = f"{path.absolute().as_uri()}?mode=ro"
        engine = create_engine("sqlite://", poolclass=NullPool,
                               creator=lambda: sqlite3.connect(uri, uri=True))
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            yield conn
            conn.rollback()
    finally:
        engine.dispose()


def check(url: URL) -> list[str]:
    """Every finding about the database at ``url``, one line each (empty: healthy)."""
    with read_only(url) as conn:
        sqlite = conn.dialect.name == "sqlite"
        findings: list[str] = []
        if sqlite:
            findings += sqlite_findings(conn)
        head = migrations.head()
        try:
            table, at = migrations.locate_revision(conn)
        except HubStoreError as exc:  # UnknownSchema: a revision in two version tables
            findings.append(f"alembic_version: {exc}")
            return findings
        if at is None:
            findings.append(_unversioned(conn, head))
            return findings
        if at != head:
            findings.append(f"{table or 'alembic_version'}: the revision is {at}, the head "
                            f"is {head} (run `hubstore db upgrade`)")
            return findings  # the models describe the head's schema only
        findings += check_constraint_findings(conn)
        findings += drift_findings(conn)
        findings += figure_findings(conn)
        return findings


def _unversioned(conn: Connection, head: str) -> str:
    """The finding for a database without a revision: empty, a triflux one, or unknown."""
    try:
        legacy = migrations.legacy_revision(conn)
    except HubStoreError as exc:  # UnknownSchema: some hub tables, or an unknown version
        return f"alembic_version: none, and {exc}"
    if legacy is None:
        return (f"alembic_version: none, and no hub tables: not migrated (run `hubstore db "
                f"upgrade` to create them at {head})")
    version = {rev: v for v, rev in migrations.LEGACY_REVISIONS.items()}[legacy]
    return (f"alembic_version: none: a triflux schema {version} database, not adopted yet "
            f"(run `hubstore db upgrade` to adopt it as {legacy} and upgrade to {head})")


def sqlite_findings(conn: Connection) -> list[str]:
    """SQLite's integrity_check (b-trees, indexes, NOT NULL) and foreign_key_check."""
    findings = [f"integrity: {row[0]}"
                for row in conn.exec_driver_sql("PRAGMA integrity_check") if row[0] != "ok"]
    for table, rowid, parent, _fk in conn.exec_driver_sql("PRAGMA foreign_key_check"):
        findings.append(f"foreign key: {table} row {rowid} has no parent row in {parent}")
    return findings


def check_constraint_findings(conn: Connection) -> list[str]:
    """Rows that break a CHECK constraint of the models. (A read-only SQLite connection's
    integrity_check skips CHECK constraints, so they are queried.)"""
    findings = []
    for table in metadata.sorted_tables:
        for constraint in table.constraints:
            if not isinstance(constraint, CheckConstraint):
                continue
            bad = conn.scalar(select(func.count()).select_from(table)
                              .where(text(f"NOT ({constraint.sqltext})")))
            if bad:
                findings.append(f"check constraint: {table.name} has {bad} row(s) breaking "
                                f"{constraint.name} ({constraint.sqltext})")
    return findings


def drift_findings(conn: Connection) -> list[str]:
    """Where the schema and the models disagree (Alembic's autogenerate comparison), less
    an adopted triflux file's own spelling of the same layout (see ``material``)."""
    context = MigrationContext.configure(conn, opts={
        "include_object": migrations.include_object, "compare_type": True})
    with warnings.catch_warnings():  # SQLite's expression indexes are not reflected
        warnings.filterwarnings("ignore", "Skipped unsupported reflection", SAWarning)
        diffs = compare_metadata(context, metadata)
    return [f"schema: {_describe(diff)}" for diff in material(diffs, conn.dialect)]


def affinity(declared: str) -> str:
    """SQLite's type affinity of a declared column type (its datatype rules, 3.1)."""
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def material(diffs: list[Any], dialect: Dialect) -> list[Any]:
    """The schema differences that matter, one per item (column modifications unpacked).

    Left out: the reference's own spelling of the same layout, which an adopted triflux
    file keeps: SQLite type names of the same affinity (INTEGER for BIGINT, REAL for
    FLOAT), its nullable non-INTEGER primary keys, and the name of
    UNIQUE(message_id, agent_id) (none on SQLite, PostgreSQL's default otherwise).
    """
    kept = []
    for diff in [d for group in diffs for d in (group if isinstance(group, list) else [group])]:
        kind = diff[0]
        if kind == "modify_type" and dialect.name == "sqlite" and affinity(
                str(diff[5])) == affinity(str(diff[6].compile(dialect=dialect))):
            continue
        if kind == "modify_nullable" and metadata.tables[diff[2]].c[diff[3]].primary_key:
            continue
        if kind in ("add_constraint", "remove_constraint") and isinstance(
                diff[1], UniqueConstraint) and diff[1].table.name == "message_inbox" and {
                c.name for c in diff[1].columns} == {"message_id", "agent_id"}:
            continue
        kept.append(diff)
    return kept


def _describe(diff: Any) -> str:
    if isinstance(diff, list):  # column modifications come as a list of tuples
        return "; ".join(_describe(d) for d in diff)
    kind, *rest = diff
    names = []
    for item in rest:
        name = getattr(item, "name", None)
        table = getattr(getattr(item, "table", None), "name", None)
        if name is not None:
            names.append(f"{table}.{name}" if table and table != name else str(name))
        elif isinstance(item, str):
            names.append(item)
    if kind in ("modify_type", "modify_nullable"):  # (kind, schema, table, column, kw, db, models)
        names.append(f"(database {rest[4]}, models {rest[5]})")
    what = {"add_index": "index missing from the database",
            "remove_index": "index the models do not have",
            "add_table": "table missing from the database",
            "remove_table": "table the models do not have",
            "add_column": "column missing from the database",
            "remove_column": "column the models do not have",
            "modify_type": "column type differs",
            "modify_nullable": "column nullability differs"}.get(kind, kind)
    return f"{what}: {' '.join(names)}"


def figure_findings(conn: Connection) -> list[str]:
    """The trigger-kept counters against counting the rows."""
    from hubstore.services import stats

    names = set(inspect(conn).get_table_names())
    if "hub_counters" not in names:
        return []
    query = (stats._FIGURES_WITH_DELTAS if "hub_counter_deltas" in names
             else select(stats.hub_counters.c.name, stats.hub_counters.c.value))
    kept = {str(n): int(v) for n, v in conn.execute(query)}
    if stats.LOG_FOLDED in kept:  # 0009: message inserts not folded yet are log rows
        kept = {str(n): int(v) for n, v in conn.execute(stats.FIGURES_WITH_LOG)}
    plain = figures.plain_counts_of(conn.execute(figures.PLAIN_COUNTS).mappings().one())
    # (a counter a later revision adds is missing below it, where its rows cannot exist)
    return [f"figures: hub_counters says {name} = {kept.get(name)}, the rows count {value}"
            for name, value in sorted(plain.items()) if kept.get(name, 0) != value
            ] + worker_count_findings(conn, names)


def worker_count_findings(conn: Connection, names: set[str]) -> list[str]:
    """Revision 0015's per-worker counts of queued and running jobs against counting the
    jobs (a worker without any may have no row, or a row of zeros)."""
    from hubstore.services import stats

    if "assign_worker_counts" not in names:
        return []
    rows = (stats.WORKER_ROWS_WITH_DELTAS if "assign_worker_count_deltas" in names
            else stats.WORKER_ROWS)
    kept = {str(w): (int(q), int(r)) for w, q, r in conn.execute(text(rows))}
    plain = {str(w): (int(q), int(r))
             for w, q, r in conn.execute(text(figures.WORKER_COUNTS))}
    return [f"figures: assign_worker_counts says worker {worker!r} has {kept.get(worker)} "
            f"(queued, running) jobs, the rows count {plain.get(worker, (0, 0))}"
            for worker in sorted(kept.keys() | plain.keys())
            if kept.get(worker, (0, 0)) != plain.get(worker, (0, 0))]
