"""The commands: upgrade, downgrade and current, and the reads HubStore.open makes with them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import alembic.command
from sqlalchemy import Connection
from sqlalchemy.engine import URL

from hubstore.db_errors import translate
from hubstore.engine import resolve_url, sqlite_path
from hubstore.errors import HubStoreError, SchemaNotCurrent
from hubstore.migrations.config import (
    _config,
    _require_postgresql,
    alembic_config,
    checked_options,
    head,
    is_known,
)
from hubstore.migrations.runtime import (
    REPORT,
    MigrationReport,
    _inspecting_engine,
    _run_on_connection,
    _search_path,
)
from hubstore.migrations.versions import Located, _sqlite_located, locate_revision

_P = ParamSpec("_P")
_T = TypeVar("_T")


def hub_errors(function: Callable[_P, _T]) -> Callable[_P, _T]:
    """``function`` raising a database's failures as HubStoreError, as HubStore.open
    does (DatabaseUnavailable for a server that cannot be reached or a database that
    does not exist), with the driver's error as ``__cause__``. Other errors (Alembic's
    CommandError for an unknown revision, a missing SQLite file's FileNotFoundError)
    are left as they are."""

    @functools.wraps(function)
    def translated(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return function(*args, **kwargs)
        except HubStoreError:
            raise
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            raise error from exc

    return translated


@hub_errors
def upgrade(url: URL | str | Connection | None = None, revision: str = "head", *,
            version_table: str | None = None, schema: str | None = None) -> None:
    """Migrate up to ``revision``, adopting a legacy triflux database first.

    ``url`` may be a Connection (an application's env.py runs hubstore's migrations on
    its own connection): its transaction is joined when one is open, else hubstore's
    migrations run in one of their own, committed on return.

    ``version_table``: the table that keeps hubstore's revision. None finds it: where a
    revision of this hubstore already is, else ``hubstore_alembic_version`` when that
    table exists or when ``alembic_version`` holds another application's revision, else
    ``alembic_version``. Given, hubstore's revision is kept there, and moved there from
    the other table in the same transaction when it was kept elsewhere.
    ``schema`` (PostgreSQL): hubstore's tables, and its version table, live in that
    schema (created when missing); the migrations run with it as their search_path.

    A new SQLite file's missing folders are made only inside an existing, writable
    folder, never at the top of the file system (DatabaseUnavailable). A server that
    cannot be reached, or a database that does not exist, raises DatabaseUnavailable.

    Runs at once (processes, ``hubstore db upgrade``, ``HubStore.open(auto_migrate=True)``)
    take turns: each takes the migration lock before it reads the revision, so one
    migrates and the others, waiting, then find its revision (see docs/migrations.md).
    """
    upgrade_and_report(url, revision, version_table=version_table, schema=schema)


@hub_errors
def upgrade_and_report(url: URL | str | Connection | None = None, revision: str = "head", *,
                       version_table: str | None = None,
                       schema: str | None = None) -> MigrationReport:
    """:func:`upgrade`, returning what it found under the migration lock and where it left
    the database: of two runs at once, one reports ``before=None`` (base), the other the
    first one's revision (``before == after``). At head already, nothing is locked or
    run, and the report says so."""
    version_table, schema = checked_options(version_table, schema)
    if revision == "head":
        found = current_version(url, version_table=version_table, schema=schema)
        if found.revision == head() and version_table in (None, found.table):
            # the usual start: nothing to lock, load or run
            return MigrationReport(found.revision, None, found.revision)
    if isinstance(url, Connection):
        return _run_on_connection(alembic.command.upgrade, url, revision, version_table,
                                  schema, adopt=True)
    return run_upgrade(resolve_url(url), revision, version_table=version_table, schema=schema)


@hub_errors
def run_upgrade(resolved: URL, revision: str = "head", *, version_table: str | None = None,
                schema: str | None = None) -> MigrationReport:
    """:func:`upgrade_and_report` of a URL :func:`hubstore.urls.resolve_url` checked, with
    checked options, run without looking first (HubStore.open has just looked)."""
    config = _config(resolved, version_table, schema)
    config.attributes["hubstore_adopt"] = True
    alembic.command.upgrade(config, revision)
    report: MigrationReport = config.attributes[REPORT]
    return report


@hub_errors
def downgrade(url: URL | str | Connection | None, revision: str, *,
              version_table: str | None = None, schema: str | None = None) -> None:
    """Migrate down to ``revision`` ("base" removes every hub table). A missing SQLite
    file raises FileNotFoundError (it is not created). ``url`` (a Connection too),
    ``version_table`` and ``schema``: as for :func:`upgrade`."""
    version_table, schema = checked_options(version_table, schema)
    if isinstance(url, Connection):
        _run_on_connection(alembic.command.downgrade, url, revision, version_table, schema,
                           adopt=False)
        return
    alembic.command.downgrade(alembic_config(url, version_table=version_table, schema=schema),
                              revision)


@hub_errors
def current(url: URL | str | Connection | None = None, *, version_table: str | None = None,
            schema: str | None = None) -> str | None:
    """The database's hubstore revision, or None when it has none. Reads only, creates
    nothing. The revision is looked for where :func:`locate_revision` says, and also in
    ``version_table`` when given; ``schema``: as for :func:`upgrade`."""
    return current_version(url, version_table=version_table, schema=schema).revision


@hub_errors
def current_version(url: URL | str | Connection | None = None, *,
                    version_table: str | None = None, schema: str | None = None) -> Located:
    """:func:`current` with the version table that holds the revision."""
    version_table, schema = checked_options(version_table, schema)
    if isinstance(url, Connection):
        return _locate_on(url, version_table, schema)
    resolved = resolve_url(url)
    _require_postgresql(resolved, schema)
    return _locate_at(resolved, version_table, schema)


def _locate_on(conn: Connection, version_table: str | None, schema: str | None) -> Located:
    """Where a caller's connection keeps hubstore's revision. A transaction the look had
    to begin is ended again, so that the caller's next ``begin()`` (Alembic's too) is a
    transaction of its own, not a join."""
    _require_postgresql(conn.engine.url, schema)
    began = not conn.in_transaction()
    try:
        with _search_path(conn, schema, create=False):
            return locate_revision(conn, version_table)
    finally:
        if began:
            conn.rollback()


@hub_errors
def revision_at(resolved: URL, *, version_table: str | None = None,
                schema: str | None = None) -> str | None:
    """:func:`current` for a URL that :func:`hubstore.urls.resolve_url` already checked."""
    return _locate_at(resolved, version_table, schema).revision


def _locate_at(resolved: URL, version_table: str | None, schema: str | None) -> Located:
    path = sqlite_path(resolved)
    if path is not None:
        return _sqlite_located(path, version_table) if path.exists() else Located(None, None)
    engine = _inspecting_engine(resolved)
    try:
        with engine.connect() as conn, _search_path(conn, schema, create=False):
            return locate_revision(conn, version_table)
    finally:
        engine.dispose()


@hub_errors
def require_current(url: URL | str | None = None, *, at: str | bool | None = False,
                    version_table: str | None = None, schema: str | None = None) -> None:
    """Raise SchemaNotCurrent unless the database is at head. Creates and changes nothing.

    ``at``: the revision already read (else it is read here).
    """
    resolved = resolve_url(url)
    if at is False:
        at = current(resolved, version_table=version_table, schema=schema)
    assert not isinstance(at, bool)
    if at != head():
        raise not_current(resolved, at)


def not_current(resolved: URL, at: str | None) -> SchemaNotCurrent:
    """The error for the database at ``resolved`` at revision ``at``, not at head."""
    want = head()
    shown = resolved.render_as_string(hide_password=True)
    if at is not None and not is_known(at):
        return SchemaNotCurrent(
            f"the database {shown} is at revision {at}, which this hubstore (head {want}) "
            "does not know: a newer hubstore migrated it. Use that version of hubstore.")
    state = ("has no hubstore revision (a new database, or a triflux one not adopted yet)"
             if at is None else f"is at revision {at}")
    return SchemaNotCurrent(
        f"the database {shown} {state}, not {want} (head). Migrate it with "
        f"`hubstore db upgrade --url '{shown}'`, or open it with "
        "HubStore.open(url, auto_migrate=True).")
