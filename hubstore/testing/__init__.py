"""A pytest plugin for testing code that uses hubstore.

Load it with `pytest -p hubstore.testing`, or in a `conftest.py`:

```python
pytest_plugins = ["hubstore.testing"]
```

It provides one function-scoped fixture, `hub_store`: a `HubStore` on a database of the
test's own, migrated to head, closed (and on PostgreSQL dropped) afterwards.

- By default the database is a temporary SQLite file.
- When the environment variable `HUBSTORE_TEST_URL` names a PostgreSQL server
  (`postgresql+psycopg://user@host:5432/postgres`), each test gets a temporary database
  on that server, created from a migrated template (made once per session) and dropped
  after the test. The user needs the CREATEDB privilege.

When factory-boy is installed (`pip install "hubstore[testing]"`), the factories of
`hubstore.testing.factories` are bound to the store the fixture yields:

```python
from hubstore import HubStore
from hubstore.testing.factories import AgentFactory

def test_lists_agents(hub_store: HubStore) -> None:
    AgentFactory.create(agent_id="a1")
    assert [a.agent_id for a in hub_store.list_all_agents()] == ["a1"]
```
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

try:
    import pytest
except ModuleNotFoundError as missing:  # without the `testing` extra
    if missing.name != "pytest":
        raise  # pytest itself is broken: its own error says how
    raise ModuleNotFoundError(
        "hubstore.testing is a pytest plugin (with factory-boy factories) and needs "
        'pytest; install them with pip install "hubstore[testing]"', name="pytest",
    ) from missing
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from hubstore import migrations
from hubstore.store import HubStore

#: The environment variable naming a PostgreSQL server to test on.
URL_VARIABLE = "HUBSTORE_TEST_URL"

__all__ = ["URL_VARIABLE", "HubDatabases", "hub_store", "server_url"]


def server_url() -> URL | None:
    """The PostgreSQL server `HUBSTORE_TEST_URL` names, or None when it is unset or empty."""
    value = os.environ.get(URL_VARIABLE, "").strip()
    if not value:
        return None
    try:
        url = make_url(value)
    except ArgumentError as exc:
        raise pytest.UsageError(f"{URL_VARIABLE}={value!r} is not a database URL: {exc}") from exc
    if url.get_backend_name() != "postgresql":
        raise pytest.UsageError(
            f"{URL_VARIABLE} must name a PostgreSQL server (postgresql+psycopg://...), "
            f"got {url.get_backend_name()!r}; leave it unset for a temporary SQLite file")
    return url


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a `HUBSTORE_TEST_URL` that is not a PostgreSQL URL before any test runs."""
    server_url()


class HubDatabases:
    """Migrated throwaway databases: SQLite files in a folder, or databases on a server."""

    def __init__(self, folder: Path, server: URL | None) -> None:
        self.folder = folder
        self.server = server
        self._template: str | Path | None = None

    def _admin(self) -> URL:
        assert self.server is not None
        return self.server

    def _execute(self, statement: str) -> None:
        engine = create_engine(self._admin(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(statement))
        finally:
            engine.dispose()

    def _new_name(self, kind: str) -> str:
        return f"hubstore_pytest_{kind}_{uuid.uuid4().hex[:16]}"  # only [a-z0-9_]: safe to quote

    def template(self) -> str | Path:
        """The migrated template, made on first use."""
        if self._template is None:
            if self.server is None:
                path = self.folder / "template.db"
                migrations.upgrade(f"sqlite:///{path}")
                self._template = path
            else:
                name = self._new_name("template")
                self._execute(f'CREATE DATABASE "{name}"')
                migrations.upgrade(self._admin().set(database=name))
                self._template = name
        return self._template

    def create(self) -> URL:
        """A new migrated database (a copy of the template)."""
        template = self.template()
        if isinstance(template, Path):
            path = self.folder / f"{uuid.uuid4().hex}.db"
            shutil.copyfile(template, path)
            path.chmod(0o600)
            return make_url(f"sqlite:///{path}")
        name = self._new_name("test")
        self._execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self._admin().set(database=name)

    def drop(self, url: URL) -> None:
        """Remove a database that :meth:`create` made."""
        if url.get_backend_name() == "sqlite":
            if url.database:
                for suffix in ("", "-wal", "-shm"):
                    Path(url.database + suffix).unlink(missing_ok=True)
            return
        self._execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')

    def close(self) -> None:
        """Drop the template (PostgreSQL)."""
        if isinstance(self._template, str):
            self._execute(f'DROP DATABASE IF EXISTS "{self._template}" WITH (FORCE)')
        self._template = None


@pytest.fixture(scope="session")
def hub_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubDatabases]:
    """Session-wide maker of migrated test databases (see `hub_store`)."""
    databases = HubDatabases(tmp_path_factory.mktemp("hubstore"), server_url())
    try:
        yield databases
    finally:
        databases.close()


def _factories_installed() -> bool:
    return importlib.util.find_spec("factory") is not None


@pytest.fixture
def hub_store(hub_databases: HubDatabases) -> Iterator[HubStore]:
    """A `HubStore` on a migrated database of this test's own (see the module's notes)."""
    url = hub_databases.create()
    try:
        with HubStore.open(url) as store:
            if not _factories_installed():
                yield store
                return
            from hubstore.testing import factories

            factories.bind(store)
            try:
                yield store
            finally:
                factories.unbind()
    finally:
        hub_databases.drop(url)
