"""Engines and opening a store: SQLite settings, file mode, URL resolution, and the
URLs and options refused (ValidationError, with nothing half created)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from hubstore import HubStore, HubStoreError, SchemaNotCurrent, ValidationError
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


# --- URLs and options refused, nothing half created -------------------------------


@pytest.mark.parametrize("url", [
    "postgresql+psycopg2://postgres@127.0.0.1/test",
    "postgresql+asyncpg://postgres@127.0.0.1/test",
    "sqlite+aiosqlite:///{dir}/hub.db", "mysql://u@h/db", "sqlite+pysqlcipher:///{dir}/x.db",
])
def test_unsupported_drivers_are_refused_with_the_supported_forms(
        tmp_path: Path, url: str) -> None:
    with pytest.raises(ValidationError, match="postgresql://USER@HOST:PORT/DB") as info:
        HubStore.open(url.format(dir=tmp_path), auto_migrate=True)
    assert "sqlite:///PATH" in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("url", "match"), [
    ("", "empty"), ("   ", "empty"), ("sqlite://", "in-memory"),
    ("sqlite:///:memory:", "in-memory"), ("sqlite:///file:x?mode=memory&uri=true", "in-memory"),
    ("sqlite:///file::memory:?uri=true", "in-memory"),
    # one slash short: "hub.db" is a host (issue 40: the message spoke of memory)
    ("sqlite://hub.db", r"did you mean sqlite:///hub\.db "),
    ("sqlite://data/hub.db", r"did you mean sqlite:///data/hub\.db "),
    ("postgresql://postgres@127.0.0.1:99999/test", "99999"),
    ("postgresql://postgres@127.0.0.1:0/test", "between 1 and 65535"),
    ("postgresql://postgres@127.0.0.1:abc/test", "cannot read"), ("not a url", "cannot read"),
    ("sqlite:///x\x00.db", "U\\+0000"), ("sqlite:///x\ud800.db", "surrogate"),
])
def test_bad_urls_are_validation_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        url: str, match: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match=match):
        HubStore.open(url, auto_migrate=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options", [{"busy_timeout_ms": "x"}, {"busy_timeout_ms": 2**70},
                                     {"no_such_option": 1}, {"connect_args": 5}])
def test_bad_open_arguments_are_validation_errors(tmp_path: Path,
                                                  options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HubStore.open(f"sqlite:///{tmp_path}/hub.db", auto_migrate=True, **options)


def test_tilde_is_expanded_and_nothing_is_half_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(HubStoreError, match="no hubstore revision"):
        HubStore.open("sqlite:///~/hub.db")  # not migrated: refused, nothing created
    assert list(tmp_path.iterdir()) == []
    with HubStore.open("sqlite:///~/hub.db", auto_migrate=True) as hub:
        hub.register_agent("a", "codex")
        assert hub.url.database == str(tmp_path / "hub.db")
    assert (tmp_path / "hub.db").stat().st_size > 0
    assert not (tmp_path / "~").exists()
