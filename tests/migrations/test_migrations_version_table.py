"""Where hubstore keeps its revision: alembic_version (the default, and every existing
database), or hubstore_alembic_version beside an application's own Alembic history;
moving between them; the cases refused; ``schema=`` on PostgreSQL; ``alembic -x``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from hubstore.errors import SchemaNotCurrent, UnknownSchema, ValidationError
from tests.conftest import PostgresDatabases
from tests.reference_ddl import (
    build_legacy,
    column_names,
    file_state,
    schema_objects,
    snapshot,
    table_names,
)

CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT, HUB = migrations.DEFAULT_VERSION_TABLE, migrations.HUB_VERSION_TABLE


@pytest.fixture
def engine(empty_url: URL) -> Iterator[Engine]:
    eng = create_engine(empty_url)
    yield eng
    eng.dispose()


def versions(engine: Engine) -> dict[str, list[str]]:
    """Each version table of the database with its rows."""
    with engine.connect() as conn:
        tables = table_names(conn) & {DEFAULT, HUB, "hub_rev"}
        return {t: [r[0] for r in conn.exec_driver_sql(f"SELECT version_num FROM {t}")]
                for t in sorted(tables)}


def an_application(engine: Engine, revision: str = "ae1027a6acf") -> None:
    """Another application's Alembic, at ``revision``, with a table of its own."""
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                             "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))")
        conn.exec_driver_sql(f"INSERT INTO alembic_version VALUES ('{revision}')")
        conn.exec_driver_sql("CREATE TABLE app_things (id INTEGER PRIMARY KEY, name TEXT)")
        conn.exec_driver_sql("INSERT INTO app_things VALUES (1, 'kept')")


def state(url: URL, engine: Engine) -> Any:
    """Everything that could change: the SQLite file's bytes, or the schema and rows."""
    if url.get_backend_name() == "sqlite":
        assert url.database
        return file_state(Path(url.database))
    with engine.connect() as conn:
        rows = {t: sorted(tuple(r) for r in conn.exec_driver_sql(f'SELECT * FROM "{t}"'))
                for t in table_names(conn)}
        return schema_objects(conn), rows


def refused(url: URL, engine: Engine, match: str, **options: Any) -> None:
    """Upgrading (and auto_migrate) refuses with UnknownSchema and changes nothing."""
    before = state(url, engine)
    with pytest.raises(UnknownSchema, match=match):
        migrations.upgrade(url, **options)
    assert state(url, engine) == before
    if not options:
        with pytest.raises(UnknownSchema, match=match):
            HubStore.open(url, auto_migrate=True)
        assert state(url, engine) == before


# --- the default, and existing databases ------------------------------------------

def test_a_new_database_keeps_its_revision_in_alembic_version(empty_url: URL,
                                                              engine: Engine) -> None:
    migrations.upgrade(empty_url)
    assert versions(engine) == {DEFAULT: [migrations.head()]}
    assert migrations.current_version(empty_url) == (DEFAULT, migrations.head())


def test_an_existing_database_upgrades_in_place_by_default(db_url: URL) -> None:
    """A database a hubstore of before the option made: its revision stays put."""
    engine = create_engine(db_url)
    migrations.downgrade(db_url, "0009")
    assert versions(engine) == {DEFAULT: ["0009"]}
    with HubStore.open(db_url, auto_migrate=True) as store:
        store.register_agent("a1", "codex")
    assert versions(engine) == {DEFAULT: [migrations.head()]}
    engine.dispose()


@pytest.mark.parametrize("start", ["0009", "head"])
def test_an_existing_database_moves_to_its_own_version_table_and_back(
        db_url: URL, start: str) -> None:
    engine = create_engine(db_url)
    with HubStore.open(db_url) as store:
        store.register_agent("a1", "codex")
        store.audit_log(type="event", from_agent="a1", to_agent="b", topic="t")
    if start != "head":
        migrations.downgrade(db_url, start)
    with engine.connect() as conn:
        rows = snapshot(conn, columns=column_names(conn, ["agents", "messages"]),
                        tables=["agents", "messages"])

    migrations.upgrade(db_url, version_table=HUB)  # moved (at head too), then upgraded
    assert versions(engine) == {HUB: [migrations.head()]}  # alembic_version dropped
    assert migrations.current_version(db_url) == (HUB, migrations.head())
    with engine.connect() as conn:
        assert snapshot(conn, columns=column_names(conn, ["agents", "messages"]),
                        tables=["agents", "messages"]) == rows
    with HubStore.open(db_url) as store:  # found without being told
        assert store.get_agent("a1") is not None
        assert store.get_hub_stats()["total_messages"] == 1

    migrations.upgrade(db_url, version_table=DEFAULT)  # and back
    assert versions(engine) == {DEFAULT: [migrations.head()]}
    with HubStore.open(db_url) as store:
        assert store.get_agent("a1") is not None
    engine.dispose()


def test_a_downgrade_with_a_version_table_moves_the_revision_too(db_url: URL) -> None:
    engine = create_engine(db_url)
    migrations.downgrade(db_url, "0010", version_table=HUB)
    assert versions(engine) == {HUB: ["0010"]}
    migrations.upgrade(db_url)  # the revision is found where it now is
    assert versions(engine) == {HUB: [migrations.head()]}
    engine.dispose()


def test_its_own_version_table_from_scratch_and_round_trip(empty_url: URL,
                                                           engine: Engine) -> None:
    migrations.upgrade(empty_url, version_table=HUB)
    assert versions(engine) == {HUB: [migrations.head()]}
    with HubStore.open(empty_url) as store:
        store.register_agent("a1", "codex")
    migrations.downgrade(empty_url, "base")  # found without being told
    assert versions(engine) == {HUB: []}
    assert migrations.current(empty_url) is None
    migrations.upgrade(empty_url)  # an emptied hubstore_alembic_version is still hubstore's
    assert versions(engine) == {HUB: [migrations.head()]}


# --- beside another application's Alembic ----------------------------------------

def test_beside_an_applications_alembic_version(empty_url: URL, engine: Engine) -> None:
    an_application(engine)
    assert migrations.current(empty_url) is None  # the application's revision is not ours
    with pytest.raises(SchemaNotCurrent, match="has no hubstore revision"):
        HubStore.open(empty_url)
    with HubStore.open(empty_url, auto_migrate=True) as store:
        store.register_agent("a1", "codex")
    assert versions(engine) == {DEFAULT: ["ae1027a6acf"], HUB: [migrations.head()]}
    migrations.downgrade(empty_url, "base")
    assert versions(engine) == {DEFAULT: ["ae1027a6acf"], HUB: []}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT * FROM app_things").all() == [(1, "kept")]
        assert "agents" not in table_names(conn)


def test_an_applications_revision_that_looks_like_hubstores(empty_url: URL,
                                                             engine: Engine) -> None:
    """An application's own revision "0003" without the hub tables is not hubstore's."""
    an_application(engine, "0003")
    assert migrations.current(empty_url) is None
    migrations.upgrade(empty_url)
    assert versions(engine) == {DEFAULT: ["0003"], HUB: [migrations.head()]}


@pytest.mark.parametrize("version", [3, 4])
def test_a_triflux_database_beside_an_applications_alembic_is_adopted(
        empty_url: URL, engine: Engine, version: int) -> None:
    build_legacy(empty_url, version)
    an_application(engine)
    with engine.connect() as conn:
        legacy_columns, before = column_names(conn), snapshot(conn)
    migrations.upgrade(empty_url)
    assert versions(engine) == {DEFAULT: ["ae1027a6acf"], HUB: [migrations.head()]}
    with engine.connect() as conn:
        assert snapshot(conn, columns=legacy_columns) == before


def test_a_newer_hubstores_database_is_refused(empty_url: URL, engine: Engine) -> None:
    """alembic_version at a revision this hubstore does not know, beside tables only
    hubstore makes: not another application's, and not to be adopted as triflux's."""
    migrations.upgrade(empty_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099'")
    refused(empty_url, engine, "alembic_version holds 0099.*newer hubstore")
    with pytest.raises(SchemaNotCurrent, match=r"0099.*newer hubstore"):
        HubStore.open(empty_url)
    with pytest.raises(UnknownSchema, match="0099"):
        migrations.upgrade(empty_url, version_table=DEFAULT)
    refused(empty_url, engine, "hub_counters.*version table of another name",
            version_table=HUB)


def test_an_applications_version_table_is_not_taken(empty_url: URL, engine: Engine) -> None:
    an_application(engine)
    refused(empty_url, engine, "alembic_version holds ae1027a6acf.*another application",
            version_table=DEFAULT)


@pytest.mark.parametrize("app_revision", ["0001", "0003", "0013", "3f2a1b9c0d4e"])
def test_beside_hubstores_own_table_alembic_version_is_the_applications(
        empty_url: URL, engine: Engine, app_revision: str) -> None:
    """An application whose own revision ids look like hubstore's ("0001", as ``alembic
    revision --rev-id 0001`` writes them): once hubstore's revision is in a version table
    of its own, alembic_version beside the hub tables is the application's, whatever
    it holds (hubstore never leaves its revision in two tables)."""
    an_application(engine, app_revision)
    migrations.upgrade(empty_url)  # into hubstore_alembic_version: alembic_version is taken
    assert versions(engine) == {DEFAULT: [app_revision], HUB: [migrations.head()]}
    assert migrations.current_version(empty_url) == (HUB, migrations.head())
    with HubStore.open(empty_url) as store:
        store.register_agent("a1", "codex")
    migrations.upgrade(empty_url)  # again: nothing to do
    migrations.downgrade(empty_url, "0010")
    assert versions(engine) == {DEFAULT: [app_revision], HUB: ["0010"]}
    migrations.upgrade(empty_url)
    assert versions(engine) == {DEFAULT: [app_revision], HUB: [migrations.head()]}
    refused(empty_url, engine, f"alembic_version holds {app_revision}.*another application",
            version_table=DEFAULT)


def test_a_newer_hubstore_in_its_own_table_beside_an_applications_numbered_revision(
        empty_url: URL, engine: Engine) -> None:
    """The revision in hubstore's own table is hubstore's, even one this hubstore does not
    know: the application's "0003" in alembic_version is never taken for it."""
    an_application(engine, "0003")
    migrations.upgrade(empty_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {HUB} SET version_num = '0099'")
    assert migrations.current_version(empty_url) == (HUB, "0099")
    with pytest.raises(SchemaNotCurrent, match=r"0099.*newer hubstore"):
        HubStore.open(empty_url)
    refused(empty_url, engine, f"{HUB} holds 0099.*newer hubstore")


def test_a_revision_in_two_of_hubstores_own_tables_is_refused(empty_url: URL,
                                                             engine: Engine) -> None:
    migrations.upgrade(empty_url, version_table=HUB)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE hub_rev (version_num VARCHAR(32) NOT NULL)")
        conn.exec_driver_sql("INSERT INTO hub_rev VALUES ('0010')")
    with pytest.raises(UnknownSchema, match="more than one version table"):
        migrations.current(empty_url, version_table="hub_rev")
    with pytest.raises(UnknownSchema, match="more than one version table"):
        HubStore.open(empty_url, version_table="hub_rev")
    refused(empty_url, engine, "more than one version table", version_table="hub_rev")


def test_a_version_table_of_another_name(empty_url: URL, engine: Engine) -> None:
    migrations.upgrade(empty_url, version_table="hub_rev")
    assert versions(engine) == {"hub_rev": [migrations.head()]}
    assert migrations.current(empty_url, version_table="hub_rev") == migrations.head()
    assert migrations.current(empty_url) is None  # found only where it is named
    refused(empty_url, engine, "version table of another name")  # never adopted twice
    migrations.downgrade(empty_url, "0010", version_table="hub_rev")
    assert versions(engine) == {"hub_rev": ["0010"]}


@pytest.mark.parametrize("options", [{"version_table": "Alembic"},
                                     {"version_table": "a;drop table agents"},
                                     {"version_table": ""}, {"schema": "x y"}])
def test_bad_names_are_refused(empty_url: URL, options: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="lower-case SQL name"):
        migrations.upgrade(empty_url, **options)
    with pytest.raises(ValidationError, match="lower-case SQL name"):
        migrations.current(empty_url, **options)


def test_a_schema_on_sqlite_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    with pytest.raises(ValidationError, match="schema='hub' is for PostgreSQL"):
        migrations.upgrade(url, schema="hub")
    assert not (tmp_path / "hub.db").exists()


# --- a schema of its own (PostgreSQL) ---------------------------------------------

@pytest.fixture
def pg_url(postgres: PostgresDatabases) -> Iterator[URL]:
    url = postgres.create()
    yield url
    postgres.drop(url)


def test_a_schema_of_its_own(pg_url: URL) -> None:
    """Created when missing; every hub table and the version table there; the
    application's alembic_version in public left alone."""
    engine = create_engine(pg_url)
    an_application(engine)
    migrations.upgrade(pg_url, schema="hub")
    assert migrations.current(pg_url, schema="hub") == migrations.head()
    assert migrations.current(pg_url) is None  # public: the application's only
    with engine.connect() as conn:
        inspector = inspect(conn)
        assert set(inspector.get_table_names(schema="public")) == {"alembic_version",
                                                                   "app_things"}
        hub = set(inspector.get_table_names(schema="hub"))
        assert {"agents", "message_log", "hub_counters", DEFAULT} <= hub
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            ("ae1027a6acf",)]
        assert conn.exec_driver_sql("SELECT current_schema()").scalar() == "public"
    with HubStore.open(pg_url.update_query_dict({"options": "-csearch_path=hub"})) as store:
        store.register_agent("a1", "codex")
        store.add_reflexion("ModuleNotFoundError: numpy", "No module named numpy", "pip")
        assert [e.solution for e in store.find_reflexion("NotFoundError: num")] == ["pip"]
    migrations.upgrade(pg_url, schema="hub")  # at head: nothing to do
    migrations.downgrade(pg_url, "base", schema="hub")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names(schema="hub")) == {DEFAULT}
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            ("ae1027a6acf",)]
    engine.dispose()


def test_a_schema_on_a_callers_connection_restores_its_search_path(pg_url: URL) -> None:
    engine = create_engine(pg_url)
    with engine.connect() as conn, conn.begin():
        migrations.upgrade(conn, schema="hub", version_table=HUB)
        assert conn.exec_driver_sql("SHOW search_path").scalar() == '"$user", public'
        assert migrations.current(conn, schema="hub") == migrations.head()
        assert migrations.current(conn) is None
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM hub.hubstore_alembic_version"
                                    ).all() == [(migrations.head(),)]
    engine.dispose()


# --- alembic -x, and the SQL of --sql ---------------------------------------------

def _alembic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alembic", *args], cwd=CHECKOUT,
                          capture_output=True, text=True, check=False, timeout=300)


def test_alembic_x_options(empty_url: URL, engine: Engine) -> None:
    an_application(engine)
    url = empty_url.render_as_string(hide_password=False)
    run = _alembic("-x", f"url={url}", "-x", f"version_table={HUB}", "upgrade", "head")
    assert run.returncode == 0, run.stderr
    assert versions(engine) == {DEFAULT: ["ae1027a6acf"], HUB: [migrations.head()]}
    run = _alembic("-x", f"url={url}", "check")  # models and migrations agree
    assert run.returncode == 0, run.stderr
    run = _alembic("-x", f"url={url}", "-x", "version_table=Bad", "current")
    assert run.returncode != 0
    assert "lower-case SQL name" in run.stderr


def test_alembic_x_schema(pg_url: URL) -> None:
    url = pg_url.render_as_string(hide_password=False)
    run = _alembic("-x", f"url={url}", "-x", "schema=hub", "upgrade", "head")
    assert run.returncode == 0, run.stderr
    assert migrations.current(pg_url, schema="hub") == migrations.head()
    run = _alembic("-x", f"url={url}", "-x", "schema=hub", "downgrade", "0010")
    assert run.returncode == 0, run.stderr
    assert migrations.current(pg_url, schema="hub") == "0010"


def test_the_sql_script_names_the_version_table_and_schema(
        capsys: pytest.CaptureFixture[str]) -> None:
    config = migrations.alembic_config("postgresql+psycopg://hub@db.example/hub",
                                       version_table=HUB, schema="hub")
    command.upgrade(config, "0001", sql=True)
    script = capsys.readouterr().out
    assert 'CREATE SCHEMA IF NOT EXISTS "hub";' in script
    assert 'SET LOCAL search_path TO "hub";' in script
    assert f"CREATE TABLE {HUB} (" in script
    assert f"INSERT INTO {HUB} (version_num) VALUES ('0001')" in script
    assert "alembic_version" not in script.replace(HUB, "")


def test_a_store_opens_on_its_own_version_table_beside_an_application(
        empty_url: URL, engine: Engine) -> None:
    an_application(engine)
    with HubStore.open(empty_url, auto_migrate=True, version_table="hub_rev") as store:
        store.register_agent("a1", "codex")
    assert versions(engine) == {DEFAULT: ["ae1027a6acf"], "hub_rev": [migrations.head()]}
    with pytest.raises(SchemaNotCurrent):  # not told where: the app's table is not hubstore's
        HubStore.open(empty_url)
    with HubStore.open(empty_url, version_table="hub_rev") as store:
        found = store.get_agent("a1")
        assert found is not None and found.cli == "codex"


def test_db_check_finds_the_revision_in_hubstores_own_table(
        empty_url: URL, engine: Engine) -> None:
    from hubstore import health

    an_application(engine)
    with HubStore.open(empty_url, auto_migrate=True) as store:  # beside the app's Alembic
        store.register_agent("a1", "codex")
    assert versions(engine) == {DEFAULT: ["ae1027a6acf"], HUB: [migrations.head()]}
    assert health.check(empty_url) == []


def test_a_store_in_a_schema_of_its_own(backend: str, empty_url: URL, engine: Engine) -> None:
    if backend == "sqlite":
        with pytest.raises(ValidationError, match="schema"):
            HubStore.open(empty_url, schema="hub", auto_migrate=True)
        assert not Path(str(empty_url.database)).exists()  # nothing was created
        return
    with HubStore.open(empty_url, schema="hub", auto_migrate=True) as store:
        store.register_agent("a1", "codex")
        job = store.assign_async("lead", "a1", task="t")
    with engine.connect() as conn:
        assert "agents" not in inspect(conn).get_table_names()  # not in public
        assert "agents" in inspect(conn).get_table_names(schema="hub")
    with HubStore.open(empty_url, schema="hub") as store:
        claimed = store.claim_next_assign("a1")
        assert claimed is not None and claimed.job_id == job.job_id
