"""What hubstore and its Alembic scripts log: nothing above DEBUG on the usual open, and
Alembic's own lines when the `alembic` command runs (env.py applies alembic.ini's logging)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore

ROOT = Path(__file__).resolve().parents[2]


def test_the_library_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("hubstore").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_opening_a_database_at_head_logs_nothing_above_debug(
        db_url: URL, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with HubStore.open(db_url) as store, store.unit_of_work() as uow:
        uow.register_agent("a1", "codex")
    loud = [(r.name, r.levelname, r.getMessage()) for r in caplog.records
            if r.levelno > logging.DEBUG]
    assert loud == []


def test_auto_migrate_at_head_logs_nothing_above_debug(
        db_url: URL, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    HubStore.open(db_url, auto_migrate=True).close()
    assert [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG] == []


def test_the_alembic_command_prints_its_steps(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    env = {**os.environ, "HUBSTORE_URL": f"sqlite:///{db}"}
    done = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Running upgrade  -> 0001" in done.stderr
    assert db.exists()
