"""docs/migrations.md's recipe, run as written: an application's own Alembic history and
hubstore's side by side in one database, on SQLite and PostgreSQL (and with hubstore in
a schema of its own), both upgraded, both downgraded, neither touching the other's
tables or version rows, and a HubStore working on the result."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from tests.conftest import PostgresDatabases
from tests.reference_ddl import add_other_application, other_application_rows

DOCS = Path(__file__).resolve().parents[1] / "docs" / "migrations.md"
HUB = migrations.HUB_VERSION_TABLE

APP_MODELS = '''
import sqlalchemy as sa

metadata = sa.MetaData()
sa.Table("app_projects", metadata,
         sa.Column("id", sa.Integer, primary_key=True),
         sa.Column("name", sa.Text, nullable=False),
         sa.Column("owner_agent", sa.Text, sa.ForeignKey("agents.agent_id")))
sa.Table("app_notes", metadata,
         sa.Column("id", sa.Integer, primary_key=True),
         sa.Column("body", sa.Text, nullable=False))
# the hub table the foreign key refers to, as the application sees it (not its own)
sa.Table("agents", metadata, sa.Column("agent_id", sa.Text, primary_key=True))
'''

APP_REVISIONS = {
    "a1_projects.py": '''
"""projects, owned by a hub agent"""
import sqlalchemy as sa
from alembic import op

revision = "a1"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("app_projects",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("name", sa.Text, nullable=False),
                    sa.Column("owner_agent", sa.Text, sa.ForeignKey("agents.agent_id")))


def downgrade() -> None:
    op.drop_table("app_projects")
''',
    "a2_notes.py": '''
"""notes"""
import sqlalchemy as sa
from alembic import op

revision = "a2"
down_revision = "a1"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("app_notes", sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("body", sa.Text, nullable=False))


def downgrade() -> None:
    op.drop_table("app_notes")
''',
}


def recipe_env() -> str:
    """The application's env.py exactly as docs/migrations.md shows it."""
    text_ = DOCS.read_text()
    (env,) = [b for b in re.findall(r"^```python\n(.*?)^```", text_, re.S | re.M)
              if "def run_migrations_online" in b]
    return str(env)


@pytest.fixture
def app_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The application: a ``myapp`` package with its models, and its Alembic folder."""
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(APP_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "myapp" or m.startswith("myapp.")]:
        monkeypatch.delitem(sys.modules, name)
    folder = tmp_path / "app_alembic"
    (folder / "versions").mkdir(parents=True)
    (folder / "env.py").write_text(recipe_env())
    for name, body in APP_REVISIONS.items():
        (folder / "versions" / name).write_text(body)
    return folder


def app_config(folder: Path, url: URL, *x: str) -> Config:
    """The application's Alembic configuration, as its alembic.ini would give it."""
    config = Config(cmd_opts=argparse.Namespace(x=list(x)))
    config.set_main_option("script_location", str(folder))
    config.set_main_option("sqlalchemy.url",
                           url.render_as_string(hide_password=False).replace("%", "%%"))
    return config


def _rows(conn: Connection, table: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY 1")]


def _state(url: URL, hub_schema: str | None = None) -> dict[str, Any]:
    """The application's tables and version row, hubstore's version row and tables."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            inspector = inspect(conn)
            app_tables = set(inspector.get_table_names())
            hub_tables = set(inspector.get_table_names(schema=hub_schema))
            return {
                "app_tables": sorted(app_tables & {"app_projects", "app_notes"}),
                "app_version": _rows(conn, "alembic_version")
                if "alembic_version" in app_tables else None,
                "hub_version": _rows(conn, f"{hub_schema + '.' if hub_schema else ''}{HUB}")
                if HUB in hub_tables else None,
                "hub_tables": "agents" in hub_tables and "message_log" in hub_tables,
            }
    finally:
        engine.dispose()


@pytest.fixture
def hub_schema_recipe(app_package: Path) -> Path:
    """The recipe with the option its comment names: hubstore in schema ``hub``."""
    env = app_package / "env.py"
    env.write_text(env.read_text().replace(
        'HUBSTORE = {"version_table": "hubstore_alembic_version"}',
        'HUBSTORE = {"version_table": "hubstore_alembic_version", "schema": "hub"}'))
    # the application's foreign key refers to the hub's table in its schema
    for path in (app_package / "versions" / "a1_projects.py",
                 app_package.parent / "myapp" / "models.py"):
        path.write_text(path.read_text().replace('"agents.agent_id"', '"hub.agents.agent_id"')
                        .replace('primary_key=True))\n', 'primary_key=True), schema="hub")\n'))
    return app_package


def _round_trip(folder: Path, url: URL, store_url: URL, hub_schema: str | None = None) -> None:
    head = migrations.head()
    options: dict[str, Any] = {"schema": hub_schema} if hub_schema else {}

    command.upgrade(app_config(folder, url), "head")
    assert _state(url, hub_schema) == {"app_tables": ["app_notes", "app_projects"],
                                       "app_version": [("a2",)], "hub_version": [(head,)],
                                       "hub_tables": True}
    assert migrations.current_version(url, **options) == (HUB, head)
    command.check(app_config(folder, url))  # the app's models match; hub tables left out
    others = add_other_application(url)  # a third application's (after the app's check)

    with HubStore.open(store_url) as store:  # finds hubstore_alembic_version by itself
        store.register_agent("lead", "codex")
        store.audit_log(type="event", from_agent="lead", to_agent="w1", topic="t")
        assert store.get_hub_stats()["total_messages"] == 1
    engine = create_engine(url)
    with engine.begin() as conn:  # the application's row refers to the hub's
        owner = "hub.agents" if hub_schema else "agents"
        conn.execute(text("INSERT INTO app_projects (id, name, owner_agent) "
                          f"VALUES (1, 'p', (SELECT agent_id FROM {owner}))"))
    engine.dispose()

    command.upgrade(app_config(folder, url), "head")  # again: nothing to do on either side
    command.downgrade(app_config(folder, url), "-1")  # the application's last revision only
    assert _state(url, hub_schema) == {"app_tables": ["app_projects"],
                                       "app_version": [("a1",)], "hub_version": [(head,)],
                                       "hub_tables": True}
    with HubStore.open(store_url) as store:
        assert store.get_agent("lead") is not None

    migrations.downgrade(url, "0010", **options)  # hubstore's own call finds its table
    assert _state(url, hub_schema)["app_version"] == [("a1",)]
    assert migrations.current(url, **options) == "0010"
    command.upgrade(app_config(folder, url), "head")  # both back to head
    assert _state(url, hub_schema)["hub_version"] == [(head,)]

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM app_projects"))  # (its foreign key would refuse)
    engine.dispose()
    command.downgrade(app_config(folder, url), "base")  # the application only
    assert _state(url, hub_schema) == {"app_tables": [], "app_version": [],
                                       "hub_version": [(head,)], "hub_tables": True}
    # the application has nothing left to undo (the recipe's connection.commit() ends
    # what its look at alembic_version began); hubstore goes to base, committed
    command.downgrade(app_config(folder, url, "hubstore=base"), "base")
    assert _state(url, hub_schema) == {"app_tables": [], "app_version": [],
                                       "hub_version": [], "hub_tables": False}
    assert migrations.current(url, **options) is None
    assert other_application_rows(url) == others

    command.upgrade(app_config(folder, url), "head")  # and up again from nothing
    assert _state(url, hub_schema)["hub_version"] == [(head,)]
    assert _state(url, hub_schema)["app_version"] == [("a2",)]
    assert other_application_rows(url) == others


def test_recipe_on_sqlite(app_package: Path, tmp_path: Path) -> None:
    url = URL.create("sqlite", database=str(tmp_path / "app.db"))
    _round_trip(app_package, url, url)


@pytest.fixture
def pg_url(postgres: PostgresDatabases) -> Iterator[URL]:
    url = postgres.create()
    yield url
    postgres.drop(url)


def test_recipe_on_postgresql(app_package: Path, pg_url: URL) -> None:
    _round_trip(app_package, pg_url, pg_url)


def test_recipe_with_hubstore_in_a_schema_of_its_own(hub_schema_recipe: Path,
                                                     pg_url: URL) -> None:
    store_url = pg_url.update_query_dict({"options": "-csearch_path=hub"})
    _round_trip(hub_schema_recipe, pg_url, store_url, hub_schema="hub")
    engine = create_engine(pg_url)
    with engine.connect() as conn:  # nothing of hubstore's outside its schema
        public = set(inspect(conn).get_table_names(schema="public"))
    engine.dispose()
    assert public == {"alembic_version", "app_notes", "app_projects", "other_app_users",
                      "other_app_settings"}


def test_one_transaction_for_both_histories_on_postgresql(app_package: Path,
                                                          pg_url: URL) -> None:
    """Inside the caller's transaction hubstore joins it: when the application's
    revision fails, hubstore's tables are rolled back with it."""
    (app_package / "versions" / "a3_broken.py").write_text('''
"""fails"""
from alembic import op

revision = "a3"
down_revision = "a2"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("SELECT no_such_function()")


def downgrade() -> None:
    pass
''')
    env = app_package / "env.py"
    env.write_text(env.read_text().replace(
        "    with connectable.connect() as connection:\n",
        "    with connectable.connect() as connection, connection.begin():\n"))
    with pytest.raises(Exception, match="no_such_function"):
        command.upgrade(app_config(app_package, pg_url), "head")
    assert _state(pg_url) == {"app_tables": [], "app_version": None, "hub_version": None,
                              "hub_tables": False}


def test_an_existing_hubstore_database_joins_an_application(
        app_package: Path, db_url: URL) -> None:
    """A hubstore database (revision in alembic_version) gets an application: the
    recipe's first run moves hubstore's revision to hubstore_alembic_version, then the
    application's history starts in alembic_version."""
    with HubStore.open(db_url) as store:
        store.register_agent("lead", "codex")
    command.upgrade(app_config(app_package, db_url), "head")
    assert _state(db_url) == {"app_tables": ["app_notes", "app_projects"],
                              "app_version": [("a2",)],
                              "hub_version": [(migrations.head(),)], "hub_tables": True}
    with HubStore.open(db_url) as store:
        assert store.get_agent("lead") is not None
