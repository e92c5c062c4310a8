"""Version tables: where hubstore's revision is kept, how it is read, and moving it.

hubstore's revision lives in ``alembic_version`` (Alembic's default, and every hubstore
database made before the option existed), or in a version table of its own
(``hubstore_alembic_version``), so that an application's Alembic history can keep
``alembic_version`` in the same database. Reading finds it in either; see
:func:`locate_revision` for the rules, and docs/migrations.md.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from hubstore.errors import UnknownSchema
from hubstore.migrations.config import is_known

#: Alembic's version table: hubstore's default, and where every hubstore database made
#: before ``version_table=`` existed keeps its revision.
DEFAULT_VERSION_TABLE = "alembic_version"
#: hubstore's own version table, beside an application whose Alembic keeps alembic_version.
HUB_VERSION_TABLE = "hubstore_alembic_version"
log = logging.getLogger(__name__)


class Located(NamedTuple):
    """Where hubstore's revision is kept: the version table (None: no table holds one),
    and the revision (None: none yet)."""

    table: str | None
    revision: str | None


def read_revision(conn: Connection, version_table: str | None = None) -> str | None:
    """The revision of the database on ``conn`` (on its search path), or None.

    Read with plain SELECTs, not Alembic's MigrationContext, which logs at INFO: opening
    a store at head logs nothing above DEBUG.
    """
    return locate_revision(conn, version_table).revision


def _candidates(version_table: str | None) -> tuple[str, ...]:
    """The version tables to look in: the given one, then hubstore's own, then Alembic's."""
    names = (version_table, HUB_VERSION_TABLE, DEFAULT_VERSION_TABLE)
    return tuple(dict.fromkeys(n for n in names if n is not None))


class VersionTables(NamedTuple):
    """What a look at a database found: each candidate version table that exists, with
    its rows, and whether the hub's tables are there (``agents`` stands for them)."""

    rows: Mapping[str, Sequence[str]]
    hub_tables: bool

    def holders(self, known: Callable[[str], bool]) -> list[str]:
        """The tables that hold a revision of this hubstore: every row a known revision.
        ``alembic_version`` is shared with other applications, so there a known-looking
        revision counts only beside the hub tables, and only while no version table of
        hubstore's own holds a row: hubstore never keeps its revision in two tables, so
        beside one, ``alembic_version`` is the application's (its "0003" is not ours)."""
        own = any(rows for t, rows in self.rows.items() if t != DEFAULT_VERSION_TABLE)
        return [t for t, rows in self.rows.items()
                if rows and all(known(r) for r in rows)
                and (t != DEFAULT_VERSION_TABLE or (self.hub_tables and not own))]

    def foreign(self, table: str, known: Callable[[str], bool]) -> Sequence[str]:
        """The rows of ``table`` when they are not a revision of this hubstore."""
        rows = self.rows.get(table, ())
        return () if not rows or table in self.holders(known) else rows


def look(conn: Connection, version_table: str | None = None) -> VersionTables:
    """The candidate version tables of the database on ``conn`` (see :func:`_candidates`),
    in one catalog query and a SELECT for each one that exists. Reads only."""
    names = _candidates(version_table)
    if conn.dialect.name == "sqlite":
        marks = ", ".join("?" * (len(names) + 1))
        found = {row[0] for row in conn.exec_driver_sql(
            f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
            (*names, "agents"))}
    else:
        found = set(conn.execute(text(
            "SELECT n FROM unnest(CAST(:names AS text[])) AS n "
            "WHERE to_regclass(quote_ident(n)) IS NOT NULL"),
            {"names": [*names, "agents"]}).scalars())
    quote = conn.dialect.identifier_preparer.quote
    rows = {t: [str(r) for r in conn.execute(text(f"SELECT version_num FROM {quote(t)}"))
                .scalars()]
            for t in names if t in found}
    return VersionTables(rows, "agents" in found)


def _sqlite_look(path: Path, version_table: str | None) -> VersionTables:
    """:func:`look` on a SQLite file, without creating it or running any pragma.

    ``mode=rw``, not ``mode=ro``: a read-only connection to a WAL file leaves -wal and
    -shm files behind, which a read-write one removes when it closes.
    """
    names = _candidates(version_table)
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True)
    try:
        marks = ", ".join("?" * (len(names) + 1))
        found = {row[0] for row in db.execute(
            f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
            (*names, "agents"))}
        rows = {t: [str(r[0]) for r in db.execute(f'SELECT version_num FROM "{t}"')]
                for t in names if t in found}
        return VersionTables(rows, "agents" in found)
    finally:
        db.close()


def _sqlite_located(path: Path, version_table: str | None) -> Located:
    return _located(_sqlite_look(path, version_table), version_table)


def locate_revision(conn: Connection, version_table: str | None = None) -> Located:
    """Where the database on ``conn`` keeps hubstore's revision. Reads only.

    - The table whose rows are all revisions of this hubstore (``alembic_version`` only
      beside the hub tables, and only while no version table of hubstore's own holds a
      row: beside one, it is an application's). Two such tables: UnknownSchema.
    - Else hubstore's own table (``version_table``, then ``hubstore_alembic_version``)
      when it exists: empty (None), or a revision this hubstore does not know (a newer
      hubstore's, which :func:`require_current` names).
    - Else ``alembic_version`` with a revision unknown here beside the hub tables: most
      likely a newer hubstore's, returned for the same reason.
    - Else (None, None): no revision of hubstore's; an ``alembic_version`` without the hub
      tables belongs to another application.
    """
    return _located(look(conn, version_table), version_table)


def _located(found: VersionTables, version_table: str | None) -> Located:
    holders = found.holders(is_known)
    if len(holders) > 1:
        raise UnknownSchema(_twice(holders, found))
    if holders:
        return Located(holders[0], found.rows[holders[0]][0])
    for table in _candidates(version_table):
        if table != DEFAULT_VERSION_TABLE and table in found.rows:
            rows = found.rows[table]
            return Located(table, rows[0] if rows else None)
    rows = found.rows.get(DEFAULT_VERSION_TABLE, ())
    if rows and found.hub_tables:
        return Located(DEFAULT_VERSION_TABLE, rows[0])
    return Located(None, None)


def _twice(holders: Sequence[str], found: VersionTables) -> str:
    held = "; ".join(f"{t} holds {', '.join(found.rows[t])}" for t in holders)
    return (f"hubstore's revision is kept in more than one version table ({held}); "
            "hubstore will not guess which is right: delete the stale table's row, or "
            "drop it (nothing was changed)")


def _settle(conn: Connection, script: ScriptDirectory, wanted: str | None, *,
            moving: bool) -> str:
    """The version table this run keeps hubstore's revision in, under the lock.

    ``wanted`` None: where a revision of this hubstore is; else hubstore_alembic_version
    when it exists (empty, or a newer hubstore's revision, which _adopt refuses) or when
    alembic_version holds another application's revision; else alembic_version.
    ``wanted`` given: that table; a revision kept in the other table is moved there when
    ``moving`` (and the emptied table, hubstore's alone, dropped). A wanted table that
    holds someone else's revision is refused.
    """
    found = look(conn, wanted)
    known = functools.partial(is_known, script=script)
    holders = found.holders(known)
    if len(holders) > 1:
        raise UnknownSchema(_twice(holders, found))
    held = holders[0] if holders else None
    if wanted is None:
        if held is not None:
            return held
        if HUB_VERSION_TABLE in found.rows or found.rows.get(DEFAULT_VERSION_TABLE):
            return HUB_VERSION_TABLE
        return DEFAULT_VERSION_TABLE
    foreign = found.foreign(wanted, known)
    if foreign:
        raise UnknownSchema(
            f"the version table {wanted} holds {', '.join(foreign)}, which is not a "
            "revision of this hubstore: another application's Alembic keeps its revision "
            "there (give hubstore a version_table of its own) or a newer hubstore migrated "
            "the database; nothing was changed")
    if held is None or held == wanted:
        return wanted
    if not moving:
        return held
    revisions = found.rows[held]
    context = MigrationContext.configure(conn, opts={"version_table": wanted})
    for revision in revisions:
        context.stamp(script, revision)
    conn.exec_driver_sql(f"DROP TABLE {conn.dialect.identifier_preparer.quote(held)}")
    log.info("hubstore's revision %s moved from %s to %s", ", ".join(revisions), held, wanted)
    return wanted
