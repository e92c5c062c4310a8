"""Adopting the two real databases that the reference store wrote (../shared/fixtures).

Each test works on a copy in tmp_path; the shared folder is never opened for writing.
Skipped when the fixtures are absent.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from hubstore import HubStore, migrations
from hubstore.models import Base
from tests.conftest import FIXTURES, fixture_pairs
from tests.helpers import present
from tests.reference_ddl import REFERENCE_DDL, column_names, snapshot

PAIRS = fixture_pairs()
pytestmark = pytest.mark.skipif(not PAIRS, reason=f"no reference fixtures in {FIXTURES}")


def _copy(db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / db.name
    shutil.copyfile(db, copy)
    return copy


def _dicts(rows: list[Any], key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


def _to_dicts(objects: Sequence[Base], key: str) -> dict[str, dict[str, Any]]:
    return _dicts([o.to_dict() for o in objects], key)


@pytest.mark.parametrize(("db", "expected_json"), PAIRS, ids=[db.stem for db, _ in PAIRS])
def test_reference_database_reads_back_after_adoption(
        db: Path, expected_json: Path, tmp_path: Path) -> None:
    expected = json.loads(expected_json.read_text(encoding="utf-8"))
    copy = _copy(db, tmp_path)
    url = f"sqlite:///{copy}"
    engine = create_engine(url)
    with engine.connect() as conn:
        legacy_columns = column_names(conn)
        before = snapshot(conn)
    engine.dispose()

    started = time.perf_counter()
    store = HubStore.open(url, auto_migrate=True)
    adoption_s = time.perf_counter() - started
    with store:
        assert migrations.current(url) == migrations.head()
        for agent in expected["agents"]:
            assert present(store.get_agent(agent["agent_id"])).to_dict() == agent
        assert _to_dicts(store.list_all_agents(), "agent_id") == _dicts(
            expected["agents"], "agent_id")
        for message in expected["messages"]:
            assert present(store.get_message(message["id"])).to_dict() == message
        for request in expected["human_requests"]:
            assert present(store.get_human_request(request["request_id"])).to_dict() == request
        assert _to_dicts(store.get_dead_letters(limit=1000), "message_id") == _dicts(
            expected["dead_letters"], "message_id")
        for job in expected["assigns"]:
            assert present(store.get_assign(job["job_id"])).to_dict() == job
        for entry in expected["reflexion"]:
            # a version-3 file has no type/adaptive_state: they read as the defaults
            assert present(store.get_reflexion(entry["id"])).to_dict() == {
                "type": "reflexion", "adaptive_state": {}} | entry
        with store.engine.connect() as conn:
            counts = {table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()
                      for table in expected["counts"]}
            assert counts == expected["counts"]
            assert snapshot(conn, columns=legacy_columns) == before  # every row, raw
            meta = conn.execute(text("SELECT key, value FROM _meta")).all()
        assert meta == [("schema_version", "4")]
        assert store.get_hub_stats()["total_messages"] == expected["counts"]["messages"]
    print(f"\nadopted {db.name} in {adoption_s * 1000:.0f} ms")

    with HubStore.open(url) as reopened:  # the stamp stuck
        assert len(reopened.list_all_agents()) == expected["counts"]["agents"]


@pytest.mark.parametrize("db", [db for db, _ in PAIRS], ids=[db.stem for db, _ in PAIRS])
def test_reference_ddl_is_what_the_reference_wrote(db: Path, tmp_path: Path) -> None:
    """tests/reference_ddl.py holds exactly the schema found in the real files."""
    copy = _copy(db, tmp_path)
    real = sqlite3.connect(copy)
    version = int(real.execute("SELECT value FROM _meta").fetchone()[0])
    schema = real.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    real.close()

    built = sqlite3.connect(":memory:")
    built.executescript(REFERENCE_DDL[version])
    assert built.execute(
        "SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall() == schema
