"""pytest-alembic's four standard tests, on both dialects, against hubstore's scripts.

pytest-alembic hands env.py its connection through ``config.attributes["connection"]``;
env.py must migrate that database and no other (not the default hub.db, not
$HUBSTORE_URL), which the last test checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_alembic import Config, MigrationContext
from pytest_alembic.tests import (
    test_model_definitions_match_ddl,
    test_single_head_revision,
    test_up_down_consistency,
    test_upgrade,
)
from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from hubstore import migrations
from hubstore.engine import create_hub_engine

pytestmark = pytest.mark.filterwarnings(
    "ignore:Skipped unsupported reflection of expression-based index")

__all__ = [
    "test_model_definitions_match_ddl",
    "test_single_head_revision",
    "test_up_down_consistency",
    "test_upgrade",
]


@pytest.fixture
def alembic_config() -> Config:
    """hubstore's scripts, without alembic.ini (whose logging setup is the CLI's)."""
    return Config(config_options={"script_location": migrations.script_location()})


@pytest.fixture
def alembic_engine(empty_url: URL) -> Iterator[Engine]:
    """An empty database of the test's own; SQLite's foreign keys off, as for migrations."""
    engine = create_hub_engine(empty_url, wal=False, foreign_keys=False, poolclass=NullPool)
    yield engine
    engine.dispose()


def test_a_handed_connection_is_the_one_migrated(
        alembic_runner: MigrationContext, alembic_engine: Engine, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    monkeypatch.setenv("HUBSTORE_URL", f"sqlite:///{elsewhere}")
    alembic_runner.migrate_up_to("heads")
    assert "assign_jobs" in inspect(alembic_engine).get_table_names()
    alembic_runner.migrate_down_to("base")
    assert "assign_jobs" not in inspect(alembic_engine).get_table_names()
    assert not elsewhere.exists()
