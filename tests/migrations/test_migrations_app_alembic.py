"""docs/migrations.md's recipe, run as written: an application's own Alembic history and
hubstore's side by side in one database, on SQLite and PostgreSQL (and with hubstore in
a schema of its own), both upgraded, both downgraded, neither touching the other's
tables or version rows, and a HubStore working on the result."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from click.testing import CliRunner
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from hubstore.cli import main
from tests.conftest import PostgresDatabases
from tests.reference_ddl import add_other_application, other_application_rows

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migrations.md"
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
    "projects.py": '''
"""projects, owned by a hub agent"""
import sqlalchemy as sa
from alembic import op

revision = "{first}"
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
    "notes.py": '''
"""notes"""
import sqlalchemy as sa
from alembic import op

revision = "{second}"
down_revision = "{first}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("app_notes", sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("body", sa.Text, nullable=False))


def downgrade() -> None:
    op.drop_table("app_notes")
''',
}
#: The application's revision ids, as ``alembic revision`` writes them: numbered with
#: ``--rev-id`` (the same ids as hubstore's own revisions), or hashed (the default).
APP_IDS = {"numbered": ("0001", "0002"), "hashed": ("3f2a1b9c0d4e", "9be1c07d2a55")}


def recipe_env() -> str:
    """The application's env.py exactly as docs/migrations.md shows it."""
    text_ = DOCS.read_text()
    (env,) = [b for b in re.findall(r"^```python\n(.*?)^```", text_, re.S | re.M)
              if "def run_migrations_online" in b]
    return str(env)


@pytest.fixture
def app_ids() -> tuple[str, str]:
    """The application's two revision ids (numbered unless a test asks otherwise)."""
    return APP_IDS["numbered"]


@pytest.fixture
def app_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                app_ids: tuple[str, str]) -> Path:
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
    first, second = app_ids
    for name, body in APP_REVISIONS.items():
        (folder / "versions" / name).write_text(
            body.replace("{first}", first).replace("{second}", second))
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
    for path in (app_package / "versions" / "projects.py",
                 app_package.parent / "myapp" / "models.py"):
        path.write_text(path.read_text().replace('"agents.agent_id"', '"hub.agents.agent_id"')
                        .replace('primary_key=True))\n', 'primary_key=True), schema="hub")\n'))
    return app_package


def _round_trip(folder: Path, url: URL, store_url: URL, ids: tuple[str, str],
                hub_schema: str | None = None) -> None:
    head, (first, second) = migrations.head(), ids
    options: dict[str, Any] = {"schema": hub_schema} if hub_schema else {}

    command.upgrade(app_config(folder, url), "head")
    assert _state(url, hub_schema) == {"app_tables": ["app_notes", "app_projects"],
                                       "app_version": [(second,)], "hub_version": [(head,)],
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
                                       "app_version": [(first,)], "hub_version": [(head,)],
                                       "hub_tables": True}
    with HubStore.open(store_url) as store:
        assert store.get_agent("lead") is not None

    migrations.downgrade(url, "0010", **options)  # hubstore's own call finds its table
    assert _state(url, hub_schema)["app_version"] == [(first,)]
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
    assert _state(url, hub_schema)["app_version"] == [(second,)]
    assert other_application_rows(url) == others


@pytest.mark.parametrize("app_ids", APP_IDS.values(), ids=APP_IDS)
def test_recipe_on_sqlite(app_package: Path, tmp_path: Path, app_ids: tuple[str, str]) -> None:
    url = URL.create("sqlite", database=str(tmp_path / "app.db"))
    _round_trip(app_package, url, url, app_ids)


@pytest.fixture
def pg_url(postgres: PostgresDatabases) -> Iterator[URL]:
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.mark.parametrize("app_ids", APP_IDS.values(), ids=APP_IDS)
def test_recipe_on_postgresql(app_package: Path, pg_url: URL, app_ids: tuple[str, str]) -> None:
    _round_trip(app_package, pg_url, pg_url, app_ids)


def test_recipe_with_hubstore_in_a_schema_of_its_own(hub_schema_recipe: Path, pg_url: URL,
                                                     app_ids: tuple[str, str]) -> None:
    store_url = pg_url.update_query_dict({"options": "-csearch_path=hub"})
    _round_trip(hub_schema_recipe, pg_url, store_url, app_ids, hub_schema="hub")
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

revision = "0003"
down_revision = "0002"
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
        app_package: Path, db_url: URL, app_ids: tuple[str, str]) -> None:
    """A hubstore database (revision in alembic_version) gets an application: the
    recipe's first run moves hubstore's revision to hubstore_alembic_version, then the
    application's history starts in alembic_version."""
    with HubStore.open(db_url) as store:
        store.register_agent("lead", "codex")
    command.upgrade(app_config(app_package, db_url), "head")
    assert _state(db_url) == {"app_tables": ["app_notes", "app_projects"],
                              "app_version": [(app_ids[1],)],
                              "hub_version": [(migrations.head(),)], "hub_tables": True}
    with HubStore.open(db_url) as store:
        assert store.get_agent("lead") is not None


def test_the_recipe_in_a_folder_alembic_init_made(empty_url: URL, tmp_path: Path,
                                                   app_package: Path) -> None:
    """As a newcomer does it: ``alembic init``, the recipe as env.py, revisions numbered
    with ``--rev-id``; ``alembic upgrade head`` says what it ran (alembic.ini's logging),
    and runs again, and hubstore's own commands read the database afterwards."""
    folder = tmp_path / "fresh"
    command.init(Config(str(tmp_path / "alembic.ini")), str(folder))
    (folder / "env.py").write_text(recipe_env())
    ini = tmp_path / "alembic.ini"
    raw = empty_url.render_as_string(hide_password=False)
    ini.write_text(re.sub(r"(?m)^sqlalchemy\.url = .*$",
                          f"sqlalchemy.url = {raw.replace('%', '%%')}", ini.read_text()))
    config = Config(str(ini))
    command.revision(config, "first", rev_id="0001")
    command.revision(config, "second", rev_id="0002")
    env = {**os.environ, "PYTHONPATH": str(app_package.parent)}
    env.pop("HUBSTORE_URL", None)

    def upgrade() -> str:
        run = subprocess.run([Path(sys.executable).parent / "alembic", "upgrade", "head"],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300, check=False)
        assert run.returncode == 0, run.stderr
        return run.stderr

    said = upgrade()
    hub_step = migrations.script_directory().get_revision(migrations.head())
    assert f"Running upgrade {hub_step.down_revision} -> {hub_step.revision}," in said
    assert "Running upgrade 0001 -> 0002, second" in said
    assert "Running upgrade" not in upgrade()  # again: nothing to do on either side
    assert migrations.current_version(empty_url) == (HUB, migrations.head())
    with HubStore.open(empty_url) as store:
        store.register_agent("lead", "codex")
    result = CliRunner().invoke(main, ["db", "current", "--url", raw])
    assert (result.exit_code, result.output) == (0, f"{migrations.head()} (head)\n")
