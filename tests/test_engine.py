"""Engines and opening a store: SQLite settings, file mode, URL resolution."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import event, text

from hubstore import HubStore, SchemaNotCurrent, ValidationError
from hubstore.engine import ENV_URL, default_url, resolve_url


def test_sqlite_settings_and_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "hub.db"
    with HubStore.open(f"sqlite:///{path}", auto_migrate=True) as store, \
            store.unit_of_work(write=False) as uow:
        pragma = {name: uow.session.execute(text(f"PRAGMA {name}")).scalar()
                  for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout",
                               "wal_autocheckpoint", "cache_size", "page_size")}
    assert pragma == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1,
                      "busy_timeout": 5000, "wal_autocheckpoint": 10_000,
                      "cache_size": -16_000, "page_size": 1024}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_writing_units_of_work_begin_immediate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    with HubStore.open(url, auto_migrate=True) as store:
        statements: list[str] = []
        store.engine.dispose()  # new connections, traced from their first statement
        event.listen(store.engine, "connect",
                     lambda dbapi, record: dbapi.set_trace_callback(statements.append))
        with store.unit_of_work() as uow:
            uow.register_agent("a", "codex")
        store.get_agent("a")
        store.refresh_lease("a")  # one statement: autocommit, it takes the lock itself
    begins = [s for s in statements if s.startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE", "BEGIN DEFERRED"]
    assert statements[-1].startswith("UPDATE agents")


def test_a_held_write_lock_makes_a_writer_wait_not_fail(tmp_path: Path) -> None:
    import threading

    url = f"sqlite:///{tmp_path / 'hub.db'}"
    with HubStore.open(url, auto_migrate=True) as store:
        entered, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store.unit_of_work() as uow:
                uow.register_agent("holder", "codex")
                entered.set()
                release.wait(5)

        thread = threading.Thread(target=hold)
        thread.start()
        entered.wait(5)
        threading.Timer(0.3, release.set).start()
        store.register_agent("waiter", "codex")  # waits for the lock (busy_timeout)
        thread.join()
        assert {a.agent_id for a in store.list_all_agents()} == {"holder", "waiter"}


def test_url_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    assert str(resolve_url(None)) == default_url()
    monkeypatch.setenv(ENV_URL, "sqlite:///from-env.db")
    assert resolve_url(None).database == "from-env.db"
    assert resolve_url("sqlite:///given.db").database == "given.db"
    assert resolve_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    with pytest.raises(ValidationError, match="supports"):
        resolve_url("mysql://u@h/db")


def test_open_without_migrating_refuses_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(SchemaNotCurrent, match="hubstore db upgrade") as info:
        HubStore.open(f"sqlite:///{path}")
    assert info.value.code == "SCHEMA_NOT_CURRENT"
    assert not path.exists() and os.listdir(tmp_path) == []


def test_a_postgresql_url_without_psycopg_names_the_extra() -> None:
    script = (
        "import sys\n"
        "sys.modules['psycopg'] = None  # as if it were not installed\n"
        "from hubstore import HubStore\n"
        "from hubstore.errors import DatabaseUnavailable\n"
        "try:\n"
        "    HubStore.open('postgresql://postgres@127.0.0.1:1/x')\n"
        "except DatabaseUnavailable as exc:\n"
        "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert 'pip install "hubstore[postgres]"' in done.stdout


def test_a_psycopg_without_libpq_names_the_binary_and_c_builds() -> None:
    """The postgres extra installs psycopg alone: where no libpq can be loaded, psycopg's
    import fails as below, and the message says what to add."""
    script = (
        "import sys\n"
        "class NoLibpq:  # psycopg's own error when neither psycopg_binary, psycopg_c\n"
        "    def find_spec(self, name, path=None, target=None):  # nor libpq is there\n"
        "        if name == 'psycopg':\n"
        "            raise ImportError('no pq wrapper available.\\nAttempts made:\\n'\n"
        "                              \"- couldn't import psycopg 'c' implementation\")\n"
        "sys.meta_path.insert(0, NoLibpq())\n"
        "from hubstore import HubStore\n"
        "from hubstore.errors import DatabaseUnavailable\n"
        "try:\n"
        "    HubStore.open('postgresql://postgres:secret@127.0.0.1:1/x')\n"
        "except DatabaseUnavailable as exc:\n"
        "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "no pq wrapper available" in done.stdout
    assert 'pip install "psycopg[binary]"' in done.stdout and '"psycopg[c]"' in done.stdout
    assert "secret" not in done.stdout and "\n" not in done.stdout.strip()
