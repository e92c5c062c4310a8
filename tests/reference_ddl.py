# ruff: noqa: E501  (the reference's DDL is kept verbatim, long lines included)
"""The reference's on-disk format as SQL, and legacy databases built from it.

``REFERENCE_DDL`` is the schema script of triflux's hub store (hub/store.mjs) as it
runs it: schema version 3 (7.2.x); version 4 (10.x) differs only in reflexion_entries.
SQLite keeps these statements (minus ``IF NOT EXISTS``) in sqlite_master; they are what
``sqlite3 triflux-7.2.1.db .schema`` prints. ``postgresql_ddl`` is the same layout as an
older PostgreSQL deployment made without Alembic would plausibly have it: the SQLite
script with its types translated (BIGINT times, JSONB documents, DOUBLE PRECISION,
BIGSERIAL for AUTOINCREMENT) and PostgreSQL's default constraint names.

``build_sqlite_legacy`` and ``build_postgresql_legacy`` make such a database and fill
every table with a few rows, odd JSON (123, "str", [], true, null) and unicode included.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.engine import URL

_REFERENCE_SCRIPT = """
CREATE TABLE IF NOT EXISTS _meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS agents (
  agent_id TEXT PRIMARY KEY,
  cli TEXT NOT NULL CHECK (cli IN ('codex','gemini','claude','other')),
  pid INTEGER,
  capabilities_json TEXT NOT NULL DEFAULT '[]',
  topics_json TEXT NOT NULL DEFAULT '[]',
  last_seen_ms INTEGER NOT NULL,
  lease_expires_ms INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('online','stale','offline')),
  metadata_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
  id TEXT PRIMARY KEY,
  type TEXT NOT NULL CHECK (type IN ('request','response','event','handoff','human_request','human_response','system')),
  from_agent TEXT NOT NULL,
  to_agent TEXT NOT NULL,
  topic TEXT NOT NULL,
  priority INTEGER NOT NULL CHECK (priority BETWEEN 1 AND 9),
  ttl_ms INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL,
  correlation_id TEXT NOT NULL,
  trace_id TEXT NOT NULL,
  payload_json TEXT NOT NULL DEFAULT '{}',
  status TEXT NOT NULL CHECK (status IN ('queued','delivered','acked','expired','dead_letter'))
);
CREATE TABLE IF NOT EXISTS message_inbox (
  delivery_id INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  delivered_at_ms INTEGER,
  acked_at_ms INTEGER,
  attempts INTEGER NOT NULL DEFAULT 0,
  UNIQUE(message_id, agent_id),
  FOREIGN KEY(message_id) REFERENCES messages(id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS human_requests (
  request_id TEXT PRIMARY KEY,
  requester_agent TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('captcha','approval','credential','choice','text')),
  prompt TEXT NOT NULL,
  schema_json TEXT NOT NULL DEFAULT '{}',
  state TEXT NOT NULL CHECK (state IN ('pending','accepted','declined','cancelled','timed_out')),
  deadline_ms INTEGER NOT NULL,
  default_action TEXT NOT NULL CHECK (default_action IN ('decline','cancel','timeout_continue')),
  correlation_id TEXT NOT NULL,
  trace_id TEXT NOT NULL,
  response_json TEXT
);
CREATE TABLE IF NOT EXISTS dead_letters (
  message_id TEXT PRIMARY KEY,
  reason TEXT NOT NULL,
  failed_at_ms INTEGER NOT NULL,
  last_error TEXT
);
CREATE INDEX IF NOT EXISTS idx_messages_status ON messages(status);
CREATE INDEX IF NOT EXISTS idx_messages_to_agent ON messages(to_agent, status);
CREATE INDEX IF NOT EXISTS idx_messages_correlation ON messages(correlation_id);
CREATE INDEX IF NOT EXISTS idx_messages_trace ON messages(trace_id);
CREATE INDEX IF NOT EXISTS idx_messages_expires ON messages(expires_at_ms);
CREATE INDEX IF NOT EXISTS idx_messages_priority ON messages(priority DESC, created_at_ms ASC);
CREATE INDEX IF NOT EXISTS idx_inbox_agent ON message_inbox(agent_id, delivered_at_ms);
CREATE INDEX IF NOT EXISTS idx_inbox_message ON message_inbox(message_id);
CREATE INDEX IF NOT EXISTS idx_human_requests_state ON human_requests(state);
CREATE INDEX IF NOT EXISTS idx_agents_status ON agents(status);
CREATE INDEX IF NOT EXISTS idx_agents_lease ON agents(lease_expires_ms);
CREATE TABLE IF NOT EXISTS assign_jobs (
  job_id TEXT PRIMARY KEY,
  supervisor_agent TEXT NOT NULL,
  worker_agent TEXT NOT NULL,
  topic TEXT NOT NULL DEFAULT 'assign.job',
  task TEXT NOT NULL DEFAULT '',
  payload_json TEXT NOT NULL DEFAULT '{}',
  status TEXT NOT NULL CHECK (status IN ('queued','running','succeeded','failed','timed_out')),
  attempt INTEGER NOT NULL DEFAULT 1,
  retry_count INTEGER NOT NULL DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 0,
  priority INTEGER NOT NULL DEFAULT 5 CHECK (priority BETWEEN 1 AND 9),
  ttl_ms INTEGER NOT NULL DEFAULT 600000,
  timeout_ms INTEGER NOT NULL DEFAULT 600000,
  deadline_ms INTEGER,
  trace_id TEXT NOT NULL,
  correlation_id TEXT NOT NULL,
  last_message_id TEXT,
  result_json TEXT,
  error_json TEXT,
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  started_at_ms INTEGER,
  completed_at_ms INTEGER,
  last_retry_at_ms INTEGER
);
CREATE INDEX IF NOT EXISTS idx_assign_jobs_status ON assign_jobs(status, updated_at_ms DESC);
CREATE INDEX IF NOT EXISTS idx_assign_jobs_supervisor ON assign_jobs(supervisor_agent, updated_at_ms DESC);
CREATE INDEX IF NOT EXISTS idx_assign_jobs_worker ON assign_jobs(worker_agent, updated_at_ms DESC);
CREATE INDEX IF NOT EXISTS idx_assign_jobs_deadline ON assign_jobs(deadline_ms, status);
CREATE TABLE IF NOT EXISTS pipeline_state (
  team_name TEXT PRIMARY KEY,
  phase TEXT NOT NULL DEFAULT 'plan',
  fix_attempt INTEGER DEFAULT 0,
  fix_max INTEGER DEFAULT 3,
  ralph_iteration INTEGER DEFAULT 0,
  ralph_max INTEGER DEFAULT 10,
  artifacts TEXT DEFAULT '{}',
  phase_history TEXT DEFAULT '[]',
  created_at INTEGER,
  updated_at INTEGER
);
{reflexion_entries}
CREATE INDEX IF NOT EXISTS idx_reflexion_pattern ON reflexion_entries(error_pattern);
CREATE INDEX IF NOT EXISTS idx_reflexion_confidence ON reflexion_entries(confidence DESC);
"""

_REFLEXION_V3 = """CREATE TABLE IF NOT EXISTS reflexion_entries (
  id TEXT PRIMARY KEY,
  error_pattern TEXT NOT NULL,          -- 에러 시그니처 (정규화)
  error_message TEXT NOT NULL,          -- 원본 에러 메시지
  context_json TEXT NOT NULL DEFAULT '{}', -- { file, function, cli, agent }
  solution TEXT NOT NULL,               -- 해결책 설명
  solution_code TEXT,                   -- 해결 코드 스니펫 (있으면)
  confidence REAL NOT NULL DEFAULT 0.5, -- 솔루션 신뢰도 (0-1)
  hit_count INTEGER NOT NULL DEFAULT 1, -- 매칭 횟수
  success_count INTEGER NOT NULL DEFAULT 0, -- 성공 횟수
  last_hit_ms INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
);"""

_REFLEXION_V4 = (
    _REFLEXION_V3
    .replace("  error_pattern TEXT",
             "  type TEXT NOT NULL DEFAULT 'reflexion', -- reflexion | adaptive\n"
             "  error_pattern TEXT")
    .replace("  confidence REAL",
             "  adaptive_state_json TEXT NOT NULL DEFAULT '{}', -- adaptive rule metadata\n"
             "  confidence REAL")
)

#: The reference's SQLite schema script, per `_meta.schema_version`.
REFERENCE_DDL = {
    3: _REFERENCE_SCRIPT.replace("{reflexion_entries}", _REFLEXION_V3),
    4: _REFERENCE_SCRIPT.replace("{reflexion_entries}", _REFLEXION_V4),
}

#: The columns that schema version 4 adds to reflexion_entries.
V4_ONLY = frozenset({"type", "adaptive_state_json"})
#: Primary key of every table of the reference (rows are compared in this order).
PRIMARY_KEYS = {
    "agents": "agent_id", "messages": "id", "message_inbox": "delivery_id",
    "human_requests": "request_id", "dead_letters": "message_id", "assign_jobs": "job_id",
    "pipeline_state": "team_name", "reflexion_entries": "id",
}
HUB_TABLES = tuple(PRIMARY_KEYS)
#: JSON columns, as the reference names them.
JSON_COLUMNS = frozenset({
    "capabilities_json", "topics_json", "metadata_json", "payload_json", "schema_json",
    "response_json", "result_json", "error_json", "artifacts", "phase_history",
    "context_json", "adaptive_state_json",
})

_PG_RULES = (
    (r"INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"),
    (r"\b(\w+_ms|created_at|updated_at) INTEGER", r"\1 BIGINT"),
    (rf"\b({'|'.join(sorted(JSON_COLUMNS))}) TEXT", r"\1 JSONB"),
    (r"\bREAL\b", "DOUBLE PRECISION"),
)


def statements(script: str) -> list[str]:
    """The statements of a schema script."""
    return [s.strip() + ";" for s in script.split(";") if s.strip()]


def _target(statement: str) -> str:
    found = re.search(r"(?:CREATE TABLE IF NOT EXISTS|ON) (\w+)", statement)
    assert found, statement
    return found.group(1)


def reference_ddl(version: int, skip: Iterable[str] = ()) -> list[str]:
    """The reference's SQLite statements, without those of the tables in ``skip``."""
    skipped = set(skip)
    return [s for s in statements(REFERENCE_DDL[version]) if _target(s) not in skipped]


def postgresql_ddl(version: int, skip: Iterable[str] = (),
                   json_type: str = "JSONB") -> list[str]:
    """The same layout translated to PostgreSQL types (JSON columns as ``json_type``)."""
    translated = []
    for statement in reference_ddl(version, skip):
        for pattern, replacement in _PG_RULES:
            statement = re.sub(pattern, replacement.replace("JSONB", json_type), statement)
        translated.append(statement)
    return translated


T0 = 1_795_964_230_000  # times in ms do not fit 32 bits

ODD_JSON = ["123", '"str"', "[]", "true", "null",
            '{"text":"한글 payload ✓","ключ":[1,2.5,true,null],"nested":{"a":{}}}']


def legacy_rows(version: int) -> dict[str, list[dict[str, Any]]]:
    """Rows for every table, as the reference stores them (JSON columns hold text)."""
    messages = [
        {"id": f"01a227cf-5c8f-7{i:03d}-94e0-63e3a0d90c13", "type": kind,
         "from_agent": "claude-lead", "to_agent": to, "topic": topic, "priority": 1 + i,
         "ttl_ms": 300_000, "created_at_ms": T0 + i, "expires_at_ms": T0 + i + 300_000,
         "correlation_id": f"corr-{i}", "trace_id": "trace-1", "payload_json": payload,
         "status": status}
        for i, (kind, to, topic, payload, status) in enumerate([
            ("request", "topic:task.result", "task.result", ODD_JSON[5], "delivered"),
            ("response", "codex-1", "direct", ODD_JSON[0], "queued"),
            ("event", "gemini-1", "assign.result", ODD_JSON[1], "acked"),
            ("handoff", "codex-1", "assign.job", ODD_JSON[2], "expired"),
            ("system", "codex-1", "sys", ODD_JSON[3], "queued"),
            ("human_request", "agent-ü", "hitl", ODD_JSON[4], "dead_letter"),
        ])
    ]
    reflexion: list[dict[str, Any]] = [
        {"id": "01a227cf-5c97-7000-b26f-73538ab3473a",
         "error_pattern": 'typeerror: cannot read property "foo" of undefined',
         "error_message": 'TypeError: Cannot read property "foo" of undefined',
         "context_json": '{"file":"app.js","agent":"codex-1","cli":"codex"}',
         "solution": "guard null", "solution_code": None, "confidence": 0.123456789012345,
         "hit_count": 7, "success_count": 3, "last_hit_ms": T0 + 70, "created_at_ms": T0 + 7,
         "updated_at_ms": T0 + 71},
        {"id": "01a227cf-5c97-7001-a65d-31941d5b4c47", "error_pattern": "econnrefused <file>",
         "error_message": "ECONNREFUSED /tmp/x/y.sock — 연결 거부", "context_json": "{}",
         "solution": "start the hub", "solution_code": "tfx hub start", "confidence": 0.5,
         "hit_count": 1, "success_count": 0, "last_hit_ms": T0 + 80, "created_at_ms": T0 + 8,
         "updated_at_ms": T0 + 80},
    ]
    if version == 4:
        reflexion[0] |= {"type": "adaptive",
                         "adaptive_state_json": '{"rule":"retry","weights":[0.1,0.9]}'}
        reflexion[1] |= {"type": "reflexion", "adaptive_state_json": "{}"}
    return {
        "_meta": [{"key": "schema_version", "value": str(version)}],
        "agents": [
            {"agent_id": "codex-1", "cli": "codex", "pid": 4242,
             "capabilities_json": '["code","review"]', "topics_json": '["task.result"]',
             "last_seen_ms": T0, "lease_expires_ms": T0 + 30_000, "status": "online",
             "metadata_json": '{"host":"dev-box","ключ":"значение"}'},
            {"agent_id": "gemini-1", "cli": "gemini", "pid": None, "capabilities_json": "[]",
             "topics_json": "[]", "last_seen_ms": T0 + 1, "lease_expires_ms": T0 + 1,
             "status": "stale", "metadata_json": "{}"},
            {"agent_id": "agent-ü", "cli": "other", "pid": 1, "capabilities_json": "123",
             "topics_json": '["한글.topic"]', "last_seen_ms": T0 + 2,
             "lease_expires_ms": T0 + 2, "status": "offline", "metadata_json": "null"},
        ],
        "messages": messages,
        "message_inbox": [
            {"message_id": messages[0]["id"], "agent_id": "codex-1",
             "delivered_at_ms": T0 + 5, "acked_at_ms": None, "attempts": 1},
            {"message_id": messages[0]["id"], "agent_id": "gemini-1",
             "delivered_at_ms": None, "acked_at_ms": None, "attempts": 0},
            {"message_id": messages[2]["id"], "agent_id": "gemini-1",
             "delivered_at_ms": T0 + 6, "acked_at_ms": T0 + 9, "attempts": 3},
        ],
        "human_requests": [
            {"request_id": "01a227cf-5c92-7000-971f-97367d95c4a5", "requester_agent": "codex-1",
             "kind": "approval", "prompt": "Deploy? 배포할까요?",
             "schema_json": '{"type":"boolean"}', "state": "pending",
             "deadline_ms": T0 + 600_000, "default_action": "decline",
             "correlation_id": "c-1", "trace_id": "t-1", "response_json": None},
            {"request_id": "01a227cf-5c93-7000-85c9-66e952880dc6", "requester_agent": "codex-1",
             "kind": "credential", "prompt": "Token?", "schema_json": "{}",
             "state": "accepted", "deadline_ms": T0 + 600_001, "default_action": "cancel",
             "correlation_id": "c-2", "trace_id": "t-2",
             "response_json": '{"token":"s3cr3t","ok":true}'},
        ],
        "dead_letters": [
            {"message_id": messages[5]["id"], "reason": "ttl_expired",
             "failed_at_ms": T0 + 9, "last_error": "boom ✗"},
            {"message_id": "gone-message", "reason": "manual", "failed_at_ms": T0 + 10,
             "last_error": None},
        ],
        "assign_jobs": [
            {"job_id": "01a227cf-5c95-7000-8f6d-16914b1fb816", "supervisor_agent": "claude-lead",
             "worker_agent": "gemini-1", "topic": "assign.job", "task": "write docs",
             "payload_json": '{"files":["README.md"]}', "status": "queued", "attempt": 2,
             "retry_count": 1, "max_retries": 1, "priority": 5, "ttl_ms": 600_000,
             "timeout_ms": 600_000, "deadline_ms": T0 + 600_000, "trace_id": "t-3",
             "correlation_id": "c-3", "last_message_id": messages[3]["id"],
             "result_json": None, "error_json": '{"message":"retrying"}',
             "created_at_ms": T0 + 20, "updated_at_ms": T0 + 21, "started_at_ms": None,
             "completed_at_ms": None, "last_retry_at_ms": T0 + 21},
            {"job_id": "01a227cf-5c96-7003-8a91-3b8cb1078125", "supervisor_agent": "claude-lead",
             "worker_agent": "codex-1", "topic": "assign.job", "task": "",
             "payload_json": "[]", "status": "succeeded", "attempt": 1, "retry_count": 0,
             "max_retries": 0, "priority": 9, "ttl_ms": 1000, "timeout_ms": 1000,
             "deadline_ms": None, "trace_id": "t-4", "correlation_id": "c-4",
             "last_message_id": None, "result_json": '[1,"two",{"3":null}]',
             "error_json": "null", "created_at_ms": T0 + 30, "updated_at_ms": T0 + 31,
             "started_at_ms": T0 + 30, "completed_at_ms": T0 + 31, "last_retry_at_ms": None},
        ],
        "pipeline_state": [
            {"team_name": "team-한", "phase": "exec", "fix_attempt": 1, "fix_max": 3,
             "ralph_iteration": 2, "ralph_max": 10, "artifacts": '{"plan":"p.md"}',
             "phase_history": '["plan","exec"]', "created_at": T0 + 40,
             "updated_at": T0 + 41},
            {"team_name": "team-bare", "phase": "plan", "fix_attempt": None, "fix_max": None,
             "ralph_iteration": None, "ralph_max": None, "artifacts": None,
             "phase_history": None, "created_at": None, "updated_at": None},
        ],
        "reflexion_entries": reflexion,
    }


def _insert_all(conn: Connection, version: int, cast_json: bool, skip: Iterable[str]) -> None:
    skipped = set(skip)
    for table, rows in legacy_rows(version).items():
        if table in skipped:
            continue
        for row in rows:
            values = ", ".join(
                f"CAST(:{c} AS JSONB)" if cast_json and c in JSON_COLUMNS else f":{c}"
                for c in row)
            conn.execute(text(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({values})"), row)


def build_sqlite_legacy(path: Path, version: int = 3, *, rows: bool = True,
                        skip: Iterable[str] = (), wal: bool = False,
                        meta: Mapping[str, str | None] | None = None) -> None:
    """A SQLite file as the reference writes it (rollback journal unless ``wal``).

    ``meta`` replaces the `_meta` rows (a value of None deletes the key).
    """
    conn = sqlite3.connect(path)
    try:
        if wal:
            conn.execute("PRAGMA journal_mode = WAL")
        for statement in reference_ddl(version, skip):
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as sa_conn:
            if rows:
                _insert_all(sa_conn, version, cast_json=False, skip=skip)
            _apply_meta(sa_conn, version, meta, skip)
    finally:
        engine.dispose()


def build_postgresql_legacy(url: URL, version: int = 3, *, rows: bool = True,
                            skip: Iterable[str] = (),
                            meta: Mapping[str, str | None] | None = None,
                            json_type: str = "JSONB") -> None:
    """The same legacy layout and rows in a PostgreSQL database."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in postgresql_ddl(version, skip, json_type):
                conn.exec_driver_sql(statement)
            if rows:
                _insert_all(conn, version, cast_json=json_type != "TEXT", skip=skip)
            _apply_meta(conn, version, meta, skip)
    finally:
        engine.dispose()


def _apply_meta(conn: Connection, version: int, meta: Mapping[str, str | None] | None,
                skip: Iterable[str]) -> None:
    if "_meta" in set(skip):
        return
    if not conn.execute(text("SELECT count(*) FROM _meta")).scalar():
        conn.execute(text("INSERT INTO _meta (key, value) VALUES ('schema_version', :v)"),
                     {"v": str(version)})
    for key, value in (meta or {}).items():
        conn.execute(text("DELETE FROM _meta WHERE key = :k"), {"k": key})
        if value is not None:
            conn.execute(text("INSERT INTO _meta (key, value) VALUES (:k, :v)"),
                         {"k": key, "v": value})


Rows = dict[str, list[tuple[Any, ...]]]


def snapshot(conn: Connection, tables: Iterable[str] = HUB_TABLES,
             columns: Mapping[str, Iterable[str]] | None = None) -> Rows:
    """Every row of ``tables``, raw (no type processing), in primary-key order.

    ``columns`` restricts a table to those columns (the ones it had before a migration).
    """
    inspector = inspect(conn)
    result = {}
    for table in tables:
        names = list((columns or {}).get(table)
                     or [c["name"] for c in inspector.get_columns(table)])
        listed = ", ".join(f'"{n}"' for n in names)
        rows = conn.execute(text(
            f'SELECT {listed} FROM "{table}" ORDER BY "{PRIMARY_KEYS[table]}"'))
        result[table] = [tuple(r) for r in rows]
    return result


def column_names(conn: Connection, tables: Iterable[str] = HUB_TABLES) -> dict[str, list[str]]:
    """The columns each table has now."""
    inspector = inspect(conn)
    return {t: [c["name"] for c in inspector.get_columns(t)] for t in tables}


def build_legacy(url: URL, version: int = 3, **options: Any) -> None:
    """``build_sqlite_legacy`` or ``build_postgresql_legacy``, by the URL's dialect."""
    if url.get_backend_name() == "sqlite":
        assert url.database
        build_sqlite_legacy(Path(url.database), version, **options)
    else:
        build_postgresql_legacy(url, version, **options)


def schema_objects(conn: Connection) -> list[tuple[Any, ...]]:
    """Every table, column, index, constraint and trigger of the database, comparable."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        return [tuple(r) for r in rows]
    rows = conn.exec_driver_sql("""
        SELECT 'column', table_name, column_name, data_type, is_nullable, column_default
          FROM information_schema.columns WHERE table_schema = current_schema()
        UNION ALL
        SELECT 'index', tablename, indexname, indexdef, NULL, NULL
          FROM pg_indexes WHERE schemaname = current_schema()
        UNION ALL
        SELECT 'constraint', conrelid::regclass::text, conname,
               pg_get_constraintdef(oid), NULL, NULL
          FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
        UNION ALL
        SELECT 'trigger', event_object_table, trigger_name, action_statement, NULL, NULL
          FROM information_schema.triggers WHERE trigger_schema = current_schema()
        UNION ALL
        SELECT 'sequence', sequence_name, NULL, NULL, NULL, NULL
          FROM information_schema.sequences WHERE sequence_schema = current_schema()
        ORDER BY 1, 2, 3""")
    return [tuple(r) for r in rows]


def table_names(conn: Connection) -> set[str]:
    """The tables of the database (its default schema)."""
    return set(inspect(conn).get_table_names())


def add_other_application(url: URL) -> Rows:
    """Tables of another application sharing the database; returns their rows."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE other_app_users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
            conn.exec_driver_sql("CREATE INDEX other_app_users_name ON other_app_users (name)")
            conn.exec_driver_sql("CREATE TABLE other_app_settings (k TEXT PRIMARY KEY, v TEXT)")
            conn.execute(text("INSERT INTO other_app_users (id, name) VALUES (:i, :n)"),
                         [{"i": 1, "n": "ada"}, {"i": 2, "n": "グレース"}])
            conn.execute(text("INSERT INTO other_app_settings (k, v) VALUES ('theme', 'dark')"))
        return other_application_rows(url)
    finally:
        engine.dispose()


def other_application_rows(url: URL) -> Rows:
    """The other application's rows, for comparison."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {t: [tuple(r) for r in conn.exec_driver_sql(f"SELECT * FROM {t} ORDER BY 1")]
                    for t in ("other_app_users", "other_app_settings")}
    finally:
        engine.dispose()


def file_state(path: Path) -> tuple[bytes, list[str]]:
    """A SQLite file's bytes and the names of the files beside it (journal, -wal, -shm)."""
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())
