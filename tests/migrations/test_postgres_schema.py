"""hubstore in a schema of its own on PostgreSQL, with pg_trgm installed elsewhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from tests.conftest import PostgresDatabases


@pytest.fixture
def hub_schema_url(postgres: PostgresDatabases) -> Iterator[URL]:
    """A fresh database whose pg_trgm lives in ``public``, and a URL that puts hubstore
    in schema ``hub`` through libpq's ``options``."""
    url = postgres.create()
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("CREATE EXTENSION pg_trgm SCHEMA public"))
        conn.execute(text("CREATE SCHEMA hub"))
    engine.dispose()
    yield url.update_query_dict({"options": "-csearch_path=hub"})
    postgres.drop(url)


def test_migrates_and_runs_in_its_own_schema_with_pg_trgm_in_public(
        hub_schema_url: URL) -> None:
    migrations.upgrade(hub_schema_url)
    assert migrations.current(hub_schema_url) == migrations.head()

    engine = create_engine(hub_schema_url.difference_update_query(["options"]))
    with engine.connect() as conn:
        tables: dict[str, str] = dict(conn.execute(text(
            "SELECT table_name, table_schema FROM information_schema.tables "
            "WHERE table_name IN ('agents', 'messages', 'alembic_version', "
            "'reflexion_entries')")).all())
        index = conn.execute(text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_reflexion_pattern_trgm'"
        )).scalar_one()
    engine.dispose()
    assert tables == {"agents": "hub", "messages": "hub", "alembic_version": "hub",
                      "reflexion_entries": "hub"}
    assert "gin_trgm_ops" in index

    with HubStore.open(hub_schema_url) as store:
        store.register_agent("a1", "codex")
        store.add_reflexion("ModuleNotFoundError: numpy", "No module named numpy",
                            "pip install numpy")
        # a part of the pattern: the contains search the trigram index serves
        found = store.find_reflexion("NotFoundError: num")
        assert [entry.solution for entry in found] == ["pip install numpy"]
        assert store.get_agent("a1") is not None

    migrations.downgrade(hub_schema_url, "base")
    assert migrations.current(hub_schema_url) is None
