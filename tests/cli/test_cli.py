"""The command lines: ``hubstore db ...`` and ``alembic`` from a checkout."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, make_url

from hubstore import migrations
from hubstore.cli import main
from hubstore.engine import ENV_URL
from tests.reference_ddl import build_legacy, file_state

CHECKOUT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HEAD = migrations.head()


def hubstore(*args: str, url: URL | None = None) -> Result:
    extra = ["--url", url.render_as_string(hide_password=False)] if url is not None else []
    return CliRunner().invoke(main, ["db", *args, *extra])


@pytest.fixture
def no_env_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No $HUBSTORE_URL, and an embedded default inside tmp_path."""
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "hubstore" / "hub.db"


def test_upgrade_current_downgrade_history(empty_url: URL) -> None:
    shown = empty_url.render_as_string(hide_password=True)
    result = hubstore("current", url=empty_url)
    if empty_url.get_backend_name() == "sqlite":  # a missing file is reported as missing
        assert result.exit_code == 1 and "there is no SQLite database" in result.output
    else:
        assert (result.exit_code, result.output) == (0, f"base (head is {HEAD})\n")

    result = hubstore("upgrade", "0001", url=empty_url)
    assert (result.exit_code, result.output) == (0, f"{shown}: upgraded from base to 0001\n")
    assert hubstore("current", url=empty_url).output == f"0001 (head is {HEAD})\n"

    result = hubstore("upgrade", url=empty_url)
    assert (result.exit_code, result.output) == (0, f"{shown}: upgraded from 0001 to {HEAD}\n")
    assert hubstore("current", url=empty_url).output == f"{HEAD} (head)\n"

    lines = hubstore("history", url=empty_url).output.splitlines()
    revisions = [r.revision for r in migrations.script_directory().walk_revisions()]
    assert [line.split()[0] for line in lines] == revisions[::-1]
    assert lines[-1].endswith(" (head) (current)")

    result = hubstore("downgrade", "0002", url=empty_url)
    assert (result.exit_code, result.output) == (0, f"{shown}: downgraded from {HEAD} to 0002\n")
    assert "0002  " in hubstore("history", url=empty_url).output.split(" (current)")[0]
    result = hubstore("downgrade", "base", "--yes", url=empty_url)
    assert (result.exit_code, result.output) == (0, f"{shown}: downgraded from 0002 to base\n")
    assert migrations.current(empty_url) is None


def test_upgrade_adopts_a_legacy_database(empty_url: URL) -> None:
    build_legacy(empty_url, 4)
    result = hubstore("upgrade", url=empty_url)
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"adopted triflux schema 4 as 0002, upgraded to {HEAD}\n")


def test_unknown_layout_fails_with_a_message_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "partial.db"
    build_legacy(make_url(f"sqlite:///{path}"), 3, skip=("pipeline_state",))
    before = file_state(path)
    result = hubstore("upgrade", url=make_url(f"sqlite:///{path}"))
    assert result.exit_code == 1
    assert "upgrade of sqlite:///" in result.output
    assert "not pipeline_state" in result.output and "nothing was changed" in result.output
    assert "Traceback" not in result.output
    assert file_state(path) == before


def test_upgrade_beside_an_applications_numbered_revision(empty_url: URL) -> None:
    """An application's alembic_version holding "0003" (its own revision, numbered as
    hubstore's are): the upgrade puts hubstore's revision in a table of its own, says
    so, and exits 0; the application's row stays."""
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('0003')")
    shown = empty_url.render_as_string(hide_password=True)
    result = hubstore("upgrade", url=empty_url)
    assert (result.exit_code, result.output) == (0, f"{shown}: upgraded from base to {HEAD}\n")
    assert hubstore("current", url=empty_url).output == f"{HEAD} (head)\n"
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            ("0003",)]
    engine.dispose()


@pytest.mark.parametrize(("args", "code", "says"), [
    (["upgrade", "9999"], 1, "Can't locate revision identified by '9999'"),
    (["downgrade"], 2, "Missing argument 'REVISION'"),
    (["current", "--url", "mysql://x/y"], 2, "hubstore supports sqlite:///PATH"),
    (["current", "--url", "not a url"], 2, "Invalid value for '--url'"),
])
def test_failures_exit_non_zero_with_a_clear_message(
        tmp_path: Path, args: list[str], code: int, says: str) -> None:
    url = ["--url", f"sqlite:///{tmp_path / 'hub.db'}"] if "--url" not in args else []
    result = CliRunner().invoke(main, ["db", *args, *url])
    assert result.exit_code == code
    assert says in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_unreachable_database_is_one_line() -> None:
    url = make_url("postgresql+psycopg://nobody@127.0.0.1:1/nothing")
    result = hubstore("upgrade", url=url)
    assert result.exit_code == 1
    assert result.output.startswith("Error: upgrade of postgresql+psycopg://")
    assert "sqlalche.me" not in result.output


def test_downgrade_does_not_create_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    result = hubstore("downgrade", "base", url=make_url(f"sqlite:///{path}"))
    assert result.exit_code == 1
    assert f"there is no SQLite database at {path}" in result.output
    assert hubstore("current", url=make_url(f"sqlite:///{path}")).exit_code == 1
    assert not path.exists()


def test_url_defaults_to_env_then_embedded_default(
        no_env_url: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hubstore("upgrade").exit_code == 0
    assert migrations.current(f"sqlite:///{no_env_url}") == HEAD

    env_db = tmp_path / "env.db"
    monkeypatch.setenv(ENV_URL, f"sqlite:///{env_db}")
    assert hubstore("upgrade", "0001").exit_code == 0
    assert migrations.current(f"sqlite:///{env_db}") == "0001"
    flag_db = tmp_path / "flag.db"
    assert hubstore("upgrade", "0002", url=make_url(f"sqlite:///{flag_db}")).exit_code == 0
    assert migrations.current(f"sqlite:///{flag_db}") == "0002"
    assert migrations.current(f"sqlite:///{env_db}") == "0001"


def test_console_script_exit_codes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    ok = subprocess.run([BIN / "hubstore", "db", "upgrade", "--url", url],
                        capture_output=True, text=True, check=False)
    assert (ok.returncode, ok.stderr) == (0, "")
    failed = subprocess.run([BIN / "hubstore", "db", "downgrade", "nope", "--url", url],
                            capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    assert failed.stderr.startswith("Error: downgrade of ")


# --- alembic from a checkout ---------------------------------------------------------

def alembic(*args: str, env: dict[str, str] | None = None,
            ini: Path = CHECKOUT / "alembic.ini") -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != ENV_URL} | (env or {})
    return subprocess.run([BIN / "alembic", "-c", str(ini), *args],
                          cwd=CHECKOUT, env=environment, capture_output=True, text=True,
                          check=False)


def test_alembic_takes_the_url_from_x_then_env_then_ini(tmp_path: Path) -> None:
    x_db, env_db, data = tmp_path / "x.db", tmp_path / "env.db", tmp_path / "data"
    env = {ENV_URL: f"sqlite:///{env_db}", "XDG_DATA_HOME": str(data)}

    run = alembic("-x", f"url=sqlite:///{x_db}", "upgrade", "head", env=env)
    assert run.returncode == 0, run.stderr
    assert migrations.current(f"sqlite:///{x_db}") == HEAD and not env_db.exists()

    run = alembic("upgrade", "0001", env=env)
    assert run.returncode == 0, run.stderr
    assert migrations.current(f"sqlite:///{env_db}") == "0001"

    run = alembic("upgrade", "0002", env={"XDG_DATA_HOME": str(data)})  # alembic.ini: empty
    assert run.returncode == 0, run.stderr
    assert migrations.current(f"sqlite:///{data / 'hubstore' / 'hub.db'}") == "0002"

    run = alembic("-x", f"url=sqlite:///{x_db}", "downgrade", "base")
    assert run.returncode == 0, run.stderr
    assert migrations.current(f"sqlite:///{x_db}") is None

    ini_db, ini = tmp_path / "ini.db", tmp_path / "alembic.ini"
    ini.write_text((CHECKOUT / "alembic.ini").read_text()
                   .replace("%(here)s/alembic", str(CHECKOUT / "alembic"))
                   .replace("sqlalchemy.url =", f"sqlalchemy.url = sqlite:///{ini_db}"))
    run = alembic("upgrade", "head", ini=ini)
    assert run.returncode == 0, run.stderr
    assert migrations.current(f"sqlite:///{ini_db}") == HEAD
    run = alembic("upgrade", "head", ini=ini, env=env)  # $HUBSTORE_URL comes first
    assert run.returncode == 0, run.stderr
    assert migrations.current(f"sqlite:///{env_db}") == HEAD


def test_alembic_upgrade_adopts_a_legacy_database(empty_url: URL) -> None:
    build_legacy(empty_url, 3)
    url = empty_url.render_as_string(hide_password=False)
    run = alembic("-x", f"url={url}", "upgrade", "head")
    assert run.returncode == 0, run.stderr
    assert migrations.current(empty_url) == HEAD


def test_alembic_upgrade_refuses_an_unknown_layout(tmp_path: Path) -> None:
    partial = tmp_path / "partial.db"
    build_legacy(make_url(f"sqlite:///{partial}"), 4, skip=("reflexion_entries",))
    before = file_state(partial)
    run = alembic("-x", f"url=sqlite:///{partial}", "upgrade", "head")
    assert run.returncode != 0
    assert "UnknownSchema" in run.stderr
    assert file_state(partial) == before


def test_alembic_offline_sql_builds_the_same_schema(tmp_path: Path) -> None:
    """``alembic upgrade head --sql`` needs no database; its script makes what an online
    upgrade makes (optional features are emitted, not probed)."""
    run = alembic("-x", f"url=sqlite:///{tmp_path / 'never.db'}", "upgrade", "head", "--sql")
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "never.db").exists()
    offline, online = tmp_path / "offline.db", tmp_path / "online.db"
    with sqlite3.connect(offline) as conn:
        conn.executescript(run.stdout)
    migrations.upgrade(f"sqlite:///{online}")

    def schema(path: Path) -> list[tuple[str, str, str]]:
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name")
            return [(t, n, " ".join((sql or "").split())) for t, n, sql in rows]

    assert schema(offline) == schema(online)
    assert migrations.current(f"sqlite:///{offline}") == HEAD
