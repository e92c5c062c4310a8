"""Adopting legacy triflux databases (no alembic_version) on SQLite and PostgreSQL.

The legacy databases are built from the reference's own DDL (tests/reference_ddl.py),
in a database of the test's own that also holds another application's tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

from hubstore import HubStore, health, migrations
from hubstore.errors import UnknownSchema
from hubstore.models import (
    Agent,
    AssignJob,
    Base,
    DeadLetter,
    HumanRequest,
    Message,
    MessageInbox,
    PipelineState,
    ReflexionEntry,
    metadata,
)
from tests.conftest import PostgresDatabases
from tests.reference_ddl import (
    HUB_TABLES,
    JSON_COLUMNS,
    PRIMARY_KEYS,
    V4_ONLY,
    Rows,
    add_other_application,
    build_legacy,
    column_names,
    file_state,
    legacy_rows,
    other_application_rows,
    schema_objects,
    snapshot,
    table_names,
)

MODELS: dict[str, type[Base]] = {
    "agents": Agent, "messages": Message, "message_inbox": MessageInbox,
    "human_requests": HumanRequest, "dead_letters": DeadLetter, "assign_jobs": AssignJob,
    "pipeline_state": PipelineState, "reflexion_entries": ReflexionEntry,
}


@pytest.fixture
def engine(empty_url: URL) -> Iterator[Engine]:
    eng = create_engine(empty_url)
    yield eng
    eng.dispose()


def _expected(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """A legacy row as the models read it: JSON text parsed, v4 defaults filled in."""
    parsed = {c: json.loads(v) if c in JSON_COLUMNS and v is not None else v
              for c, v in row.items()}
    if table == "reflexion_entries":
        parsed = {"type": "reflexion", "adaptive_state_json": {}} | parsed
    return parsed


def _read_through_models(engine: Engine, table: str, pk: Any) -> dict[str, Any]:
    model = MODELS[table]
    with Session(engine) as session:
        obj = session.get(model, pk)
        assert obj is not None, (table, pk)
        if isinstance(obj, AssignJob):  # hubstore's own columns (0012): their defaults
            assert (obj.not_before_ms, obj.retry_backoff_ms) == (None, 0)
        return {col.name: getattr(obj, model.__mapper__.get_property_by_column(col).key)
                for col in model.__table__.columns if not col.info.get("hubstore_only")}


@pytest.mark.parametrize("version", [3, 4])
def test_adoption_keeps_every_row_and_other_applications_tables(
        empty_url: URL, engine: Engine, version: int) -> None:
    build_legacy(empty_url, version)
    others = add_other_application(empty_url)
    with engine.connect() as conn:
        legacy_columns = column_names(conn)
        before = snapshot(conn)
    rows = legacy_rows(version)
    del rows["_meta"]
    rows["message_inbox"] = [row | {"delivery_id": n}  # AUTOINCREMENT gave 1, 2, 3
                             for n, row in enumerate(rows["message_inbox"], start=1)]

    with HubStore.open(empty_url, auto_migrate=True) as store:
        assert migrations.current(empty_url) == migrations.head()
        with engine.connect() as conn:
            assert snapshot(conn, columns=legacy_columns) == before
            assert conn.execute(text("SELECT key, value FROM _meta")).all() == [
                ("schema_version", "4")]
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
        for table, table_rows in rows.items():
            for row in table_rows:
                got = _read_through_models(store.engine, table, row[PRIMARY_KEYS[table]])
                assert got == _expected(table, row)
        # the store keeps working: counters start from the adopted rows, sequences go on
        assert store.get_hub_stats()["total_messages"] == len(rows["messages"])
        store.audit_log(type="event", from_agent="a", to_agent="b", topic="t")
        assert store.get_hub_stats()["total_messages"] == len(rows["messages"]) + 1
        with store.unit_of_work() as uow:
            inbox = MessageInbox(message_id=rows["messages"][1]["id"], agent_id="late",
                                 attempts=0)
            uow.session.add(inbox)
            uow.session.flush()
            assert inbox.delivery_id == len(rows["message_inbox"]) + 1

    assert other_application_rows(empty_url) == others
    with HubStore.open(empty_url) as reopened:  # the stamp was committed: adoption sticks
        assert reopened.get_agent("codex-1") is not None


def test_no_hub_tables_migrates_from_scratch_beside_other_tables(
        empty_url: URL, engine: Engine) -> None:
    others = add_other_application(empty_url)
    migrations.upgrade(empty_url)
    with engine.connect() as conn:
        assert set(HUB_TABLES) <= table_names(conn)
        assert conn.execute(text("SELECT value FROM _meta")).scalar() == "4"
    assert other_application_rows(empty_url) == others

    migrations.downgrade(empty_url, "base")
    with engine.connect() as conn:
        assert table_names(conn) - {"alembic_version", "sqlite_sequence"} == {
            "other_app_users", "other_app_settings"}
    assert other_application_rows(empty_url) == others
    migrations.upgrade(empty_url)  # and back up from an empty alembic_version
    assert migrations.current(empty_url) == migrations.head()


#: Layouts hubstore must refuse: (version built, options of build_legacy).
UNKNOWN_LAYOUTS: dict[str, tuple[int, dict[str, Any]]] = {
    "some_hub_tables_missing": (3, {"skip": ("pipeline_state", "reflexion_entries")}),
    "only_meta": (3, {"skip": HUB_TABLES}),
    "no_meta_table": (3, {"skip": ("_meta",)}),
    "no_schema_version_row": (3, {"meta": {"schema_version": None}}),
    "unknown_version": (4, {"meta": {"schema_version": "5"}}),
    "version_3_with_v4_columns": (4, {"meta": {"schema_version": "3"}}),
    "version_4_without_v4_columns": (3, {"meta": {"schema_version": "4"}}),
}


#: What could change: a SQLite file's bytes and neighbours, or a PostgreSQL schema and rows.
State = tuple[bytes, list[str]] | tuple[list[tuple[Any, ...]], Rows]


def _state(url: URL, engine: Engine) -> State:
    if url.get_backend_name() == "sqlite":
        assert url.database
        return file_state(Path(url.database))
    with engine.connect() as conn:
        tables = table_names(conn)
        rows = {t: [tuple(r) for r in conn.exec_driver_sql(f'SELECT * FROM "{t}" ORDER BY 1')]
                for t in tables}
        return schema_objects(conn), rows


@pytest.mark.parametrize("layout", UNKNOWN_LAYOUTS)
def test_unknown_layouts_are_refused_and_left_byte_for_byte(
        empty_url: URL, engine: Engine, layout: str) -> None:
    version, options = UNKNOWN_LAYOUTS[layout]
    build_legacy(empty_url, version, **options)
    before = _state(empty_url, engine)
    if empty_url.get_backend_name() == "sqlite":  # a rollback-journal file, not WAL
        assert before[0][18:20] == b"\x01\x01"

    with pytest.raises(UnknownSchema, match="nothing was changed") as raised:
        HubStore.open(empty_url, auto_migrate=True)
    assert raised.value.code == "SCHEMA_UNKNOWN"
    assert _state(empty_url, engine) == before
    with pytest.raises(UnknownSchema):
        migrations.upgrade(empty_url)
    assert _state(empty_url, engine) == before
    assert migrations.current(empty_url) is None
    assert _state(empty_url, engine) == before


def test_postgresql_json_columns_kept_as_text_are_refused(postgres: PostgresDatabases) -> None:
    """hubstore reads and writes JSONB there: TEXT would come back as unparsed strings."""
    url = postgres.create()
    engine = create_engine(url)
    try:
        build_legacy(url, 4, json_type="TEXT")
        before = _state(url, engine)
        with pytest.raises(UnknownSchema, match=r"agents\.capabilities_json, .* not JSON"):
            migrations.upgrade(url)
        assert _state(url, engine) == before
    finally:
        engine.dispose()
        postgres.drop(url)


def test_another_applications_alembic_version_is_left_alone(
        empty_url: URL, engine: Engine) -> None:
    """A shared database whose alembic_version belongs to someone else: hubstore keeps
    its own revision in hubstore_alembic_version, and alembic_version keeps its row."""
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('ae1027a6acf')")
    migrations.upgrade(empty_url)
    assert migrations.current_version(empty_url) == (migrations.HUB_VERSION_TABLE,
                                                     migrations.head())
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            ("ae1027a6acf",)]


@pytest.mark.parametrize("version", [3, 4])
def test_adoption_runs_the_missing_revisions_only(empty_url: URL, engine: Engine,
                                                  version: int) -> None:
    """'3' is stamped 0001 and gets 0002's columns; '4' already has them."""
    build_legacy(empty_url, version, rows=False)
    migrations.upgrade(empty_url, "0002")
    assert migrations.current(empty_url) == "0002"
    with engine.connect() as conn:
        assert set(column_names(conn, ["reflexion_entries"])["reflexion_entries"]) >= V4_ONLY


@pytest.mark.parametrize("version", [3, 4])
def test_adopted_database_matches_the_models(empty_url: URL, engine: Engine,
                                             version: int) -> None:
    build_legacy(empty_url, version)
    migrations.upgrade(empty_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "include_object": migrations.include_object, "compare_type": True,
            "compare_server_default": True})
        assert health.material(list(compare_metadata(context, metadata)), conn.dialect) == []


def test_dangling_rows_of_a_legacy_file_do_not_block_adoption(tmp_path: Path) -> None:
    """The reference enforces its foreign key, but a file written with it off may hold an
    inbox row whose message is gone: adoption keeps that row as it is."""
    url = make_url(f"sqlite:///{tmp_path / 'triflux.db'}")
    build_legacy(url, 3)
    engine = create_engine(url)
    with engine.begin() as conn:  # pysqlite leaves foreign keys off
        conn.exec_driver_sql("DELETE FROM messages WHERE id = (SELECT message_id "
                             "FROM message_inbox WHERE delivery_id = 3)")
        legacy_columns, before = column_names(conn), snapshot(conn)
    migrations.upgrade(url)
    assert migrations.current(url) == migrations.head()
    with engine.connect() as conn:
        assert snapshot(conn, columns=legacy_columns) == before
        assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == [
            ("message_inbox", 3, "messages", 0)]
    engine.dispose()


def test_an_adopted_file_keeps_its_page_size(tmp_path: Path) -> None:
    """hubstore makes its own files with 1 KiB pages; a reference file it adopts keeps
    the 4 KiB pages it was made with (a page size changes only by rewriting the file),
    with every row."""
    url = make_url(f"sqlite:///{tmp_path / 'triflux.db'}")
    build_legacy(url, 4)
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
        legacy_columns, before = column_names(conn), snapshot(conn)
    engine.dispose()
    with HubStore.open(url, auto_migrate=True) as store:
        store.audit_log(type="event", from_agent="a", to_agent="b", topic="t")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        after = snapshot(conn, columns=legacy_columns)
    engine.dispose()
    assert len(after["messages"]) == len(before["messages"]) + 1
    assert set(before["messages"]) <= set(after["messages"])
    assert {k: v for k, v in after.items() if k != "messages"} == {
        k: v for k, v in before.items() if k != "messages"}
