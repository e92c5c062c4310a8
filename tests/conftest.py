"""Shared fixtures: every storage test runs on SQLite and on PostgreSQL.

PostgreSQL: HUBSTORE_TEST_PG (default postgresql+psycopg://postgres@127.0.0.1:5432/test)
is the admin connection. The migrations build one template database per session; each
test gets a database of its own, copied from the template, and dropped afterwards.
SQLite: the template is a migrated file, copied per test. When CI=true an unreachable
PostgreSQL fails the PostgreSQL tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, migrations
from hubstore.testing import factories
from tests.helpers import Heard

PG_ADMIN = os.environ.get("HUBSTORE_TEST_PG",
                          "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures"
BACKENDS = ["sqlite", "postgresql"]


def pg_admin_url() -> URL:
    return make_url(PG_ADMIN)


def _pg_reachable() -> str | None:
    try:
        engine = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


class PostgresDatabases:
    """Creates and drops throwaway databases on the admin server."""

    def __init__(self) -> None:
        self.admin = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")

    def create(self, prefix: str = "hubstore_t", template: str | None = None) -> URL:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        clause = f" TEMPLATE {template}" if template else ""
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"{clause}'))
        return pg_admin_url().set(database=name)

    def drop(self, url: URL) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases]:
    reason = _pg_reachable()
    if reason is not None:
        message = f"PostgreSQL at {PG_ADMIN} is unreachable ({reason})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    databases = PostgresDatabases()
    yield databases
    databases.admin.dispose()


@pytest.fixture(scope="session")
def pg_template(postgres: PostgresDatabases) -> Iterator[str]:
    url = postgres.create("hubstore_template")
    migrations.upgrade(url)
    yield str(url.database)
    postgres.drop(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "hub.db"
    migrations.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A URL to a database of this test's own with nothing in it (not migrated)."""
    if backend == "sqlite":
        yield make_url(f"sqlite:///{tmp_path / 'empty.db'}")
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres")
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A URL to a migrated database of this test's own."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "hub.db"
        shutil.copyfile(template, path)
        yield make_url(f"sqlite:///{path}")
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres")
    url = postgres.create(template=request.getfixturevalue("pg_template"))
    yield url
    postgres.drop(url)


@pytest.fixture
def store(db_url: URL) -> Iterator[HubStore]:
    with HubStore.open(db_url) as hub:
        factories.bind(hub)
        try:
            yield hub
        finally:
            factories.unbind()


def fixture_pairs() -> list[tuple[Path, Path]]:
    """The reference-written databases in ../shared/fixtures with their JSON."""
    if not FIXTURES.is_dir():
        return []
    return [(db, db.with_suffix(".json")) for db in sorted(FIXTURES.glob("*.db"))]


@pytest.fixture
def heard(store: HubStore) -> Iterator[Heard]:
    """Every (event, job) the store's status listeners are told about."""
    events: Heard = []
    unsubscribe = store.on_assign_status_change(lambda event, job: events.append((event, job)))
    yield events
    unsubscribe()
