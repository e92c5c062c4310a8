"""HUBSTORE_TEST_PG may name a database that does not exist yet: the test set-up creates
it from the server's maintenance database (tests/conftest.py), as a newcomer's first
``python -m pytest`` on a fresh server needs. A server that cannot be reached still skips
the PostgreSQL tests, or fails them with CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from tests import conftest
from tests.conftest import WORKER, PostgresDatabases, ensure_database, pg_admin_url

CHECKOUT = Path(__file__).resolve().parents[2]
#: A PostgreSQL test of the project's own suite: it needs the admin database, a template
#: migrated on it and a copy of that template.
ONE_POSTGRESQL_TEST = (
    "tests/store/test_factories.py::test_factories_insert_rows_visible_to_the_store")


def _missing_database() -> URL:
    return pg_admin_url().set(database=f"hubstore_admin_{WORKER}_{uuid.uuid4().hex[:12]}")


def _exists(postgres: PostgresDatabases, name: str | None) -> bool:
    with postgres.admin.connect() as conn:
        return bool(conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                {"n": name}))


def _suite(tmp_path: Path, admin: str, *, ci: bool) -> subprocess.CompletedProcess[str]:
    """The project's suite, run as a user runs it (one PostgreSQL test of it, in this
    process's stead: no xdist), with HUBSTORE_TEST_PG=admin."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    env.update(HUBSTORE_TEST_PG=admin, CI="true" if ci else "")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q", "-rs",
         "--basetemp", str(tmp_path / "suite"), f"{ONE_POSTGRESQL_TEST}[postgresql]"],
        cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_ensure_database_creates_a_missing_database_once(postgres: PostgresDatabases) -> None:
    url = _missing_database()
    assert not _exists(postgres, url.database)
    try:
        assert ensure_database(url) is True
        assert _exists(postgres, url.database)
        assert ensure_database(url) is False  # there already: left as it is
    finally:
        postgres.drop_now(url)


def test_the_suite_creates_a_missing_admin_database(postgres: PostgresDatabases,
                                                    tmp_path: Path) -> None:
    url = _missing_database()
    try:
        run = _suite(tmp_path, url.render_as_string(hide_password=False), ci=True)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "1 passed" in run.stdout, run.stdout
        assert _exists(postgres, url.database)
    finally:
        postgres.drop_now(url)


@pytest.mark.parametrize("ci", [True, False], ids=["ci", "not-ci"])
def test_an_unreachable_server_fails_in_ci_and_skips_elsewhere(
        monkeypatch: pytest.MonkeyPatch, ci: bool) -> None:
    unreachable = "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2"
    monkeypatch.setattr(conftest, "PG_ADMIN", unreachable)
    monkeypatch.setenv("CI", "true" if ci else "false")
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome) as stopped:
        conftest.require_postgres()
    assert str(stopped.value.msg).startswith(
        f"PostgreSQL at {unreachable} is unreachable (OperationalError: ")
