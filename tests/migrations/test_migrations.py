"""Migrations: one linear history, no drift from the models, lossless round trips, and
the reference's on-disk layout at 0001 (so the reference store can open the file)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata, produce_migrations
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, migrations
from hubstore.health import affinity, figure_findings
from hubstore.models import AssignJob, metadata, table_of
from hubstore.services.stats import counts, plain_counts
from hubstore.types import MessageStatus
from tests import factories
from tests.helpers import present
from tests.reference_ddl import (
    HUB_TABLES,
    REFERENCE_DDL,
    V4_ONLY,
    build_sqlite_legacy,
    column_names,
    schema_objects,
    snapshot,
    table_names,
)


@pytest.fixture
def engine(db_url: URL) -> Iterator[Engine]:
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


def _fill_every_table(url: URL) -> None:
    """A few rows in every hub table, odd JSON and unicode included."""
    with HubStore.open(url) as store:
        factories.bind(store)
        try:
            factories.AgentFactory.create(agent_id="agent-ü", capabilities=123, topics=["한글"],
                                   meta={"k": [True, None, 2.5]})
            factories.AgentFactory.create(pid=7, meta="str")
            messages = [factories.MessageFactory.create(payload=p, priority=i + 1)
                        for i, p in enumerate([123, "str", [], True, {"ключ": "значение"}])]
            factories.MessageInboxFactory.create(message_id=messages[0].id, agent_id="a")
            factories.MessageInboxFactory.create(message_id=messages[0].id, agent_id="b")
            factories.MessageInboxFactory.create(message_id=messages[1].id, acked_at_ms=5)
            factories.HumanRequestFactory.create(response={"token": "✓"}, schema=[])
            factories.HumanRequestFactory.create(state="timed_out")
            factories.DeadLetterFactory.create(message_id=messages[2].id, last_error="boom")
            factories.AssignJobFactory.create(result=[1, "two"], error=False, status="succeeded")
            factories.AssignJobFactory.create(payload={"nested": {"deep": []}})
            factories.PipelineStateFactory.create(artifacts={"plan": "p.md"},
                                                  phase_history=["plan"])
            factories.PipelineStateFactory.create(artifacts=None, fix_attempt=None)
            factories.ReflexionEntryFactory.create(context={"file": "a.js"}, confidence=0.123456789)
            factories.ReflexionEntryFactory.create(error_pattern="econnrefused <file>")
            factories.ReflexionEntryFactory.create(type="adaptive", adaptive_state={"rule": 1})
        finally:
            factories.unbind()


#: The columns revision 0012 adds to assign_jobs.
#: assign_jobs' columns of hubstore's own (revisions 0012 and 0014), not in the reference's.
HUBSTORE_JOB_COLUMNS = tuple(c.name for c in table_of(AssignJob).c
                             if c.info.get("hubstore_only"))


def _v3_columns(conn: Connection) -> dict[str, list[str]]:
    """Each table's columns at revision 0001 (version 4 adds two to reflexion_entries,
    revisions 0012 and 0014 hubstore's own to assign_jobs)."""
    columns = column_names(conn)
    columns["reflexion_entries"] = [c for c in columns["reflexion_entries"] if c not in V4_ONLY]
    columns["assign_jobs"] = [c for c in columns["assign_jobs"] if c not in HUBSTORE_JOB_COLUMNS]
    return columns


# --- one linear history -------------------------------------------------------------

def test_history_is_one_line_with_a_single_head() -> None:
    script = migrations.script_directory()
    assert script.get_heads() == [migrations.head()]
    revisions = list(reversed(list(script.walk_revisions())))
    assert [r.revision for r in revisions] == [f"{n:04d}" for n in range(1, len(revisions) + 1)]
    assert [r.down_revision for r in revisions] == [None, *(r.revision for r in revisions[:-1])]


# --- no drift ----------------------------------------------------------------------

def _compare(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={
        "include_object": migrations.include_object, "compare_type": True,
        "compare_server_default": True})
    return list(compare_metadata(context, metadata))


def test_models_match_the_migrated_schema(engine: Engine) -> None:
    with engine.connect() as conn:
        assert _compare(conn) == []


def test_drift_check_sees_a_difference(engine: Engine) -> None:
    """The comparison above can fail: a dropped index and a changed type show up."""
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX idx_messages_trace")
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ALTER TABLE messages ALTER COLUMN payload_json TYPE text")
    with engine.connect() as conn:
        diff = _compare(conn)
    kinds = {d[0] if isinstance(d, tuple) else d[0][0] for d in diff}
    assert "add_index" in kinds  # the models have it, the database does not
    if engine.dialect.name == "postgresql":
        assert "modify_type" in kinds


def test_autogenerate_would_write_an_empty_revision(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "include_object": migrations.include_object, "compare_type": True})
        upgrade_ops = produce_migrations(context, metadata).upgrade_ops
        assert upgrade_ops is not None
        assert upgrade_ops.is_empty()


def test_upgrading_at_head_changes_nothing(db_url: URL, engine: Engine) -> None:
    _fill_every_table(db_url)
    with engine.connect() as conn:
        schema, rows = schema_objects(conn), snapshot(conn)
    migrations.upgrade(db_url)
    with engine.connect() as conn:
        assert schema_objects(conn) == schema
        assert snapshot(conn) == rows
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1


# --- round trips -------------------------------------------------------------------

def test_round_trip_through_0001_keeps_every_row(db_url: URL, engine: Engine) -> None:
    _fill_every_table(db_url)
    with engine.connect() as conn:
        schema, rows, v3_columns = schema_objects(conn), snapshot(conn), _v3_columns(conn)
        v3_rows = snapshot(conn, columns=v3_columns)
        columns = column_names(conn)["reflexion_entries"]

    migrations.downgrade(db_url, "0001")
    assert migrations.current(db_url) == "0001"
    with engine.connect() as conn:
        assert snapshot(conn) == v3_rows
        assert conn.execute(text("SELECT value FROM _meta")).scalar() == "3"

    migrations.upgrade(db_url)
    assert migrations.current(db_url) == migrations.head()
    # Version 3 has no reflexion type or adaptive state: an adaptive entry comes back
    # with the defaults. Every other value of every row is unchanged.
    kind, state = columns.index("type"), columns.index("adaptive_state_json")
    default_state = "{}" if engine.dialect.name == "sqlite" else {}
    rows["reflexion_entries"] = [
        tuple("reflexion" if i == kind else default_state if i == state else v
              for i, v in enumerate(row))
        for row in rows["reflexion_entries"]]
    with engine.connect() as conn:
        assert snapshot(conn) == rows
        assert schema_objects(conn) == schema
        if conn.dialect.name == "sqlite":
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []

    with HubStore.open(db_url) as store:  # the figures and the pattern search are rebuilt
        assert store.get_hub_stats()["total_messages"] == len(rows["messages"])
        assert store.get_audit_stats()["dlq"] == len(rows["dead_letters"])
        assert [e.error_pattern for e in store.find_reflexion("refused <fi")] == [
            "econnrefused <file>"]


def test_downgrade_to_base_leaves_no_hub_table(db_url: URL, engine: Engine) -> None:
    _fill_every_table(db_url)
    migrations.downgrade(db_url, "base")
    assert migrations.current(db_url) is None
    with engine.connect() as conn:
        assert table_names(conn) <= {"alembic_version", "sqlite_sequence"}
        leftovers = {o[1] for o in schema_objects(conn)} - {
            "alembic_version", "alembic_version_pkc", "sqlite_sequence",
            "sqlite_autoindex_alembic_version_1"}
        assert leftovers == set()
    migrations.upgrade(db_url)
    assert migrations.current(db_url) == migrations.head()


def test_table_rebuild_under_the_migration_lock_keeps_child_rows(tmp_path: Path) -> None:
    """A batch rebuild of messages (DROP TABLE inside) would cascade-delete the inbox
    rows with foreign keys on; the migration connection has them off."""
    url = make_url(f"sqlite:///{tmp_path / 'hub.db'}")
    migrations.upgrade(url)
    _fill_every_table(url)

    def rebuild_messages(conn: Connection) -> int:
        with Operations(MigrationContext.configure(conn)).batch_alter_table(
                "messages", recreate="always"):
            pass
        return int(conn.execute(text("SELECT count(*) FROM message_inbox")).scalar_one())

    with migrations.locked_connection(url) as conn:
        assert rebuild_messages(conn) == 3
    with HubStore.open(url) as store, store.engine.begin() as conn:  # the hazard is real
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert rebuild_messages(conn) == 0


def test_a_migration_that_leaves_dangling_rows_is_rolled_back(tmp_path: Path) -> None:
    url = make_url(f"sqlite:///{tmp_path / 'hub.db'}")
    migrations.upgrade(url, "0001")
    engine = create_engine(url)
    with engine.connect() as conn:
        schema = schema_objects(conn)
    left: list[str] = []

    def leave_a_dangling_row(conn: Connection, cursor: Any, statement: str,
                             *_: Any) -> None:
        """The first migration, as its revision is stamped, also leaves an inbox row of a
        message that does not exist (SQLite's foreign keys are off while it runs)."""
        if not left and statement.startswith("UPDATE alembic_version"):
            cursor.connection.execute(
                "INSERT INTO message_inbox (message_id, agent_id) VALUES ('gone', 'a')")
            left.append(statement)

    event.listen(Engine, "after_cursor_execute", leave_a_dangling_row)
    try:
        with pytest.raises(RuntimeError, match="without their parent row") as caught:
            migrations.upgrade(url)
    finally:
        event.remove(Engine, "after_cursor_execute", leave_a_dangling_row)
    assert left and "message_inbox" in str(caught.value)
    assert migrations.current(url) == "0001"
    with engine.connect() as conn:
        assert schema_objects(conn) == schema
    engine.dispose()


def test_sqlite_without_drop_column_rebuilds_and_keeps_the_descending_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = make_url(f"sqlite:///{tmp_path / 'hub.db'}")
    migrations.upgrade(url)
    _fill_every_table(url)
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 0))
    migrations.downgrade(url, "0001")
    expected = tmp_path / "fresh.db"
    migrations.upgrade(f"sqlite:///{expected}", "0001")
    with sqlite3.connect(tmp_path / "hub.db") as conn, sqlite3.connect(expected) as fresh:
        assert sqlite_layout(conn) == sqlite_layout(fresh)
        assert conn.execute("SELECT count(*) FROM reflexion_entries").fetchone() == (3,)


def _log(conn: Connection) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(text(
        "SELECT seq, message_id FROM message_log ORDER BY seq"))]


def _log_sequence(conn: Connection) -> list[tuple[Any, ...]]:
    """message_log's sqlite_sequence row (AUTOINCREMENT's high-water mark), if any."""
    return [tuple(r) for r in conn.execute(text(
        "SELECT seq FROM sqlite_sequence WHERE name = 'message_log'"))]


def _log_table_sql(conn: Connection) -> str:
    return str(conn.execute(text(
        "SELECT sql FROM sqlite_master WHERE name = 'message_log'")).scalar_one())


def test_round_trip_through_0007_keeps_every_log_row_and_seq(db_url: URL,
                                                             engine: Engine) -> None:
    """0008 and 0009 change message_log on SQLite (no AUTOINCREMENT, a column that counts
    the inserts; undone on the way down): every row, every seq, the figures and the rest
    of the schema come back."""
    sqlite = engine.dialect.name == "sqlite"
    migrations.downgrade(db_url, "0007")
    with engine.connect() as conn:
        schema_0007 = schema_objects(conn)
    if sqlite:  # a fresh database at 0007 has the same schema (a batch rebuild renames
        # its copy, and SQLite quotes the new name)
        fresh = make_url(f"sqlite:///{Path(str(db_url.database)).with_name('fresh.db')}")
        migrations.upgrade(fresh, "0007")
        fresh_engine = create_engine(fresh)
        with fresh_engine.connect() as conn:
            assert [(*o[:3], o[3] and o[3].replace('"message_log"', "message_log"))
                    for o in schema_0007] == schema_objects(conn)
        fresh_engine.dispose()
    migrations.upgrade(db_url)
    _fill_every_table(db_url)
    with engine.connect() as conn:
        columns = column_names(conn)  # (the columns 0007 has: 0012 and 0014 add to jobs)
        columns["assign_jobs"] = [c for c in columns["assign_jobs"]
                                  if c not in HUBSTORE_JOB_COLUMNS]
        schema, rows, log = schema_objects(conn), snapshot(conn, columns=columns), _log(conn)
        if sqlite:
            assert "AUTOINCREMENT" not in _log_table_sql(conn).upper()
            assert _log_sequence(conn) == []
            # 0009: the five inserts are counted by their log rows, not folded yet
            assert conn.execute(text("SELECT value FROM hub_counters "
                                     "WHERE name = 'messages'")).scalar_one() == 0
    assert len(log) == len(rows["messages"]) == 5

    migrations.downgrade(db_url, "0007")
    with engine.connect() as conn:
        assert _log(conn) == log and snapshot(conn) == rows
        assert schema_objects(conn) == schema_0007
        assert figure_findings(conn) == []  # the downgrade folded what was pending
        if sqlite:
            assert "AUTOINCREMENT" in _log_table_sql(conn).upper()
            assert _log_sequence(conn) == [(log[-1][0],)]

    migrations.upgrade(db_url)
    with engine.connect() as conn:
        assert _log(conn) == log and snapshot(conn, columns=columns) == rows
        assert schema_objects(conn) == schema
    with HubStore.open(db_url) as store:  # the figures count every insert again
        sent: list[tuple[int, MessageStatus]] = [
            (8, "queued"), (3, "queued"), (9, "acked"), (1, "dead_letter")]
        for priority, status in sent:
            store.audit_log("event", "x", "a1", "t", priority=priority, status=status)
        with store.transaction(write=False) as uow:
            figures = counts(uow)
            assert {k: figures[k] for k in plain_counts(uow)} == plain_counts(uow)
        assert figures["messages"] == len(rows["messages"]) + 4
    with engine.connect() as conn:
        assert [seq for seq, _ in _log(conn)][len(log):] == [log[-1][0] + n
                                                              for n in (1, 2, 3, 4)]


def test_upgrade_to_0008_keeps_the_high_water_mark_of_a_trimmed_log(tmp_path: Path) -> None:
    """Under 0007 prune could trim every log row: only sqlite_sequence remembered the last
    seq. Without AUTOINCREMENT the next seq would be max(seq) + 1 = 1, behind every
    cursor; the upgrade writes a row at sqlite_sequence's value instead."""
    path = tmp_path / "hub.db"
    url = make_url(f"sqlite:///{path}")
    migrations.upgrade(url, "0007")
    raw = sqlite3.connect(path, isolation_level=None)
    for n in range(3):
        raw.execute(
            "INSERT INTO messages (id, type, from_agent, to_agent, topic, priority, "
            "ttl_ms, created_at_ms, expires_at_ms, correlation_id, trace_id, "
            "payload_json, status) VALUES (?, 'event', 'x', 'a1', 't', 5, 1, 1, 2, "
            "'c', 't', '{}', 'queued')", (f"m{n}",))
    raw.execute("DELETE FROM messages")
    raw.execute("DELETE FROM message_log")  # what 0007's trim did
    assert raw.execute("SELECT seq FROM sqlite_sequence WHERE name = 'message_log'"
                       ).fetchall() == [(3,)]
    raw.close()
    migrations.upgrade(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        assert _log(conn) == [(3, "")]
        assert _log_sequence(conn) == []
    engine.dispose()
    with HubStore.open(url) as store:
        later = store.audit_log("event", "x", "a1", "t")
        assert [m.id for m in store.message_feed("a1", cursor="feed1:3").next(timeout_s=0)
                ] == [later.id]


# --- the reference's layout on disk (SQLite) -----------------------------------------

def _checks(sql: str) -> list[str]:
    found = []
    for match in re.finditer(r"CHECK\s*\(", sql, re.IGNORECASE):
        depth, start = 1, match.end()
        end = start
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            end += 1
        found.append(re.sub(r"\s+", "", sql[start:end - 1]))
    return sorted(found)


def sqlite_layout(conn: sqlite3.Connection, ordered: bool = True) -> dict[str, Any]:
    """What the reference store depends on, per table: columns (affinity, NOT NULL,
    primary key, default), named indexes (columns and direction), unique and primary
    keys, CHECKs, foreign keys, AUTOINCREMENT. A non-INTEGER primary key counts as NOT
    NULL: the reference leaves it nullable (an SQLite quirk), hubstore declares it."""
    layout: dict[str, Any] = {}
    for table in (*HUB_TABLES, "_meta"):
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        columns = [(name, affinity(kind), bool(notnull or pk), pk,
                    None if default is None else default.strip("()"))
                   for _, name, kind, notnull, default, pk in
                   conn.execute(f"PRAGMA table_info({table})")]
        indexes, keys = {}, set()
        for _, name, unique, origin, _partial in conn.execute(f"PRAGMA index_list({table})"):
            cols = tuple((r[2], r[3]) for r in conn.execute(f"PRAGMA index_xinfo({name})")
                         if r[5])
            if origin == "c":
                indexes[name] = (unique, cols)
            else:
                keys.add((origin, unique, cols))
        layout[table] = {
            "columns": columns if ordered else sorted(columns),
            "indexes": indexes, "keys": keys, "checks": _checks(sql),
            "foreign_keys": sorted((r[2], r[3], r[4], r[6]) for r in
                                   conn.execute(f"PRAGMA foreign_key_list({table})")),
            "autoincrement": "AUTOINCREMENT" in sql.upper(),
        }
    return layout


def _reference(tmp_path: Path, version: int) -> sqlite3.Connection:
    path = tmp_path / f"reference-v{version}.db"
    build_sqlite_legacy(path, version, rows=False)
    return sqlite3.connect(path)


@pytest.mark.parametrize(("revision", "version"), [("0001", 3), ("0002", 4)])
def test_fresh_database_has_the_reference_layout(tmp_path: Path, revision: str,
                                                 version: int) -> None:
    path = tmp_path / "hub.db"
    migrations.upgrade(f"sqlite:///{path}", revision)
    # 0002 adds its columns with ALTER TABLE, at the end: only their order differs.
    ordered = version == 3
    with sqlite3.connect(path) as ours, _reference(tmp_path, version) as reference:
        assert sqlite_layout(ours, ordered) == sqlite_layout(reference, ordered)
        assert ours.execute("SELECT key, value FROM _meta").fetchall() == [
            ("schema_version", str(version))]
        assert ours.execute("SELECT name FROM sqlite_master WHERE name = 'sqlite_sequence'"
                            ).fetchone() == ("sqlite_sequence",)


def test_downgraded_database_has_the_reference_layout(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    migrations.upgrade(f"sqlite:///{path}")
    _fill_every_table(make_url(f"sqlite:///{path}"))
    migrations.downgrade(f"sqlite:///{path}", "0001")
    with sqlite3.connect(path) as ours, _reference(tmp_path, 3) as reference:
        assert sqlite_layout(ours) == sqlite_layout(reference)


def test_reference_store_keeps_working_on_a_hubstore_database(tmp_path: Path) -> None:
    """The reference re-runs its CREATE ... IF NOT EXISTS script when the versions differ,
    then writes with its own SQL; hubstore's triggers and readers keep up."""
    path = tmp_path / "hub.db"
    url = f"sqlite:///{path}"
    migrations.upgrade(url)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    schema = conn.execute("SELECT * FROM sqlite_master ORDER BY name").fetchall()
    conn.executescript(REFERENCE_DDL[4])
    assert conn.execute("SELECT * FROM sqlite_master ORDER BY name").fetchall() == schema

    now = 1_795_964_230_000
    conn.executescript(f"""
        BEGIN;
        INSERT INTO agents (agent_id, cli, pid, capabilities_json, topics_json, last_seen_ms,
                            lease_expires_ms, status, metadata_json)
        VALUES ('codex-1', 'codex', 1, '[]', '["t"]', {now}, {now + 30000}, 'online', '{{}}')
        ON CONFLICT(agent_id) DO UPDATE SET status = excluded.status;
        INSERT INTO messages (id, type, from_agent, to_agent, topic, priority, ttl_ms,
                              created_at_ms, expires_at_ms, correlation_id, trace_id,
                              payload_json, status)
        VALUES ('m1', 'request', 'lead', 'codex-1', 't', 8, 1, {now}, {now + 1}, 'c', 'tr',
                '123', 'queued'),
               ('m2', 'event', 'lead', 'codex-1', 't', 5, 1, {now}, {now + 1}, 'c', 'tr',
                '{{}}', 'queued');
        INSERT INTO message_inbox (message_id, agent_id, delivered_at_ms) VALUES ('m1', 'a', 1);
        UPDATE messages SET status = 'dead_letter' WHERE id = 'm2';
        INSERT OR REPLACE INTO dead_letters (message_id, reason, failed_at_ms, last_error)
        VALUES ('m2', 'ttl_expired', {now}, NULL);
        INSERT OR REPLACE INTO dead_letters (message_id, reason, failed_at_ms, last_error)
        VALUES ('m2', 'ttl_expired', {now + 1}, 'again');
        INSERT INTO assign_jobs (job_id, supervisor_agent, worker_agent, status, trace_id,
                                 correlation_id, created_at_ms, updated_at_ms)
        VALUES ('j1', 'lead', 'codex-1', 'queued', 't', 'c', {now}, {now});
        UPDATE assign_jobs SET status = 'running' WHERE job_id = 'j1';
        INSERT INTO reflexion_entries (id, error_pattern, error_message, solution,
                                       last_hit_ms, created_at_ms, updated_at_ms)
        VALUES ('r1', 'enoent <file>', 'ENOENT /a/b', 'create it', {now}, {now}, {now});
        INSERT INTO pipeline_state (team_name) VALUES ('team');
        INSERT OR REPLACE INTO _meta (key, value) VALUES ('schema_version', '4');
        COMMIT;
    """)
    conn.close()

    with HubStore.open(url) as store:
        assert present(store.get_message("m1")).payload == 123
        assert store.get_hub_stats() | store.get_audit_stats() == {
            "online_agents": 1, "total_messages": 2, "active_assign_jobs": 1,
            "urgent": 1, "normal": 0, "dlq": 1, "assign_queued": 0, "assign_running": 1,
            "assign_failed": 0, "assign_timed_out": 0}
        assert [e.id for e in store.find_reflexion("noent <fi")] == ["r1"]
        assert present(store.get_reflexion("r1")).type == "reflexion"
        assert present(store.get_pipeline_state("team")).phase == "plan"


def test_a_downgrade_below_0012_keeps_a_pending_schedule(db_url: URL, engine: Engine) -> None:
    from hubstore import HubStore
    from hubstore.ids import now_ms

    with HubStore.open(db_url) as store:
        job = store.create_assign("lead", "w1", not_before_ms=now_ms() + 3_600_000)
        done = store.create_assign("lead", "w1", retry_backoff_ms=500, status="succeeded")
    with engine.connect() as conn:
        before = snapshot(conn)
    with pytest.raises(Exception, match="0012"):
        migrations.downgrade(db_url, "0011")
    assert migrations.current(db_url) == migrations.head()
    with engine.connect() as conn:
        assert snapshot(conn) == before  # nothing changed
    with engine.begin() as conn:
        conn.execute(text("UPDATE assign_jobs SET not_before_ms = NULL WHERE job_id = :j"),
                     {"j": job.job_id})
    migrations.downgrade(db_url, "0011")  # a finished job's back-off does not hold it
    with engine.connect() as conn:
        assert "not_before_ms" not in column_names(conn)["assign_jobs"]
        ids = {row[0] for row in conn.execute(text("SELECT job_id FROM assign_jobs"))}
    assert ids == {job.job_id, done.job_id}
    migrations.upgrade(db_url)
