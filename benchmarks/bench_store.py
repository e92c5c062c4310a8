"""Throughput benchmark of the hubstore facade, beside the reference hub store.

Every operation is one call on ``HubStore`` (so one unit of work of its own) or, for the
reflexion workloads, one call of ``hubstore.reflexion.learn_from_error`` /
``lookup_solution``. Each workload runs OPS operations, timed with ``time.perf_counter``;
the figure is OPS / elapsed seconds.

Honest repeats: the background rows (``--preload``) are written once, before any timing,
into a template database (and, with ``--reference``, into a reference template with the
very same rows). Every repeat then runs on a fresh copy of the template (SQLite: a copy
of the file; PostgreSQL: ``CREATE DATABASE ... TEMPLATE``) and does the same operations
(i = 0 .. OPS-1), so repeats differ only by chance. The table gives min, median and max.

With ``--reference HUB_DIR`` the same workloads run through the reference store
(``HUB_DIR/store.mjs`` and ``reflexion.mjs``, under node, driven by
``benchmarks/reference_driver.mjs``) on a copy of its own template, in the same run,
repeat by repeat; ``../shared/reference/setup.sh DIR`` makes such a folder, and a
triflux install has one under ``node_modules/triflux/hub``.

Usage::

    # all workloads, fresh SQLite files in a temp dir, 1000 ops, 3 repeats
    python benchmarks/bench_store.py

    # side by side with the reference, 100,000 background messages
    python benchmarks/bench_store.py --preload 100000 --reference /tmp/ref/hub

    # also heartbeat, audit_log and poll_for_agent on Python's sqlite3 alone (an anchor)
    python benchmarks/bench_store.py --preload 100000 --reference /tmp/ref/hub --raw-driver

    # quick smoke test, machine-readable output
    python benchmarks/bench_store.py -n 300 --repeat 1 --json-only

    # PostgreSQL (the database must be empty, or pass --reset to wipe schema public)
    python benchmarks/bench_store.py --url postgresql+psycopg://postgres@127.0.0.1/bench --reset

    # how the speed holds up as the tables grow (fresh database per scale)
    python benchmarks/bench_store.py --scaling --scales 10000,100000,1000000

    # the whole hub: agents served in real time at 0, 100k and 1M history rows
    python benchmarks/bench_store.py --hub --scales 0,100000,1000000 --reference /tmp/ref/hub

    # the same, beside Python's sqlite3 running the hub's hottest calls alone
    python benchmarks/bench_store.py --hub --raw-driver --reference /tmp/ref/hub

    # one long whole-hub run: does the process's RSS stay flat?
    python benchmarks/bench_store.py --hub --scales 0 --ops 1000000 --repeat 1

    # P processes competing for J queued jobs of one worker, with statements per job
    python benchmarks/bench_store.py --claim --processes 4 --jobs 2000

    # the same claims also made on psycopg alone (its own statements, nothing around them)
    python benchmarks/bench_store.py --claim --raw-driver --url postgresql+psycopg://postgres@127.0.0.1/bench

    # async throughput beside sync (when hubstore.aio is installed)
    python benchmarks/bench_store.py --async

Output: one JSON line on stdout, then (unless ``--json-only``) a readable table.
Progress notes go to stderr (not with ``--json-only``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, insert, inspect, make_url, text
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.dialects import dialect_for
from hubstore.ids import now_ms, uuidv7
from hubstore.models import Agent, AssignJob, Message, ReflexionEntry, table_of
from hubstore.reflexion import learn_from_error, lookup_solution

# --------------------------------------------------------------------------- constants

AGENT_COUNT = 200
OLD_AGENT_COUNT = 500
PRELOAD_UNIT_ROWS = 5_000
# Per 10 background messages there are 2 more rows (a reflexion entry and an assign job).
PRELOAD_UNIT_MESSAGES = PRELOAD_UNIT_ROWS * 10 // 12
DEFAULT_SCALES = (10_000, 100_000, 1_000_000)
HUB_SCALES = (0, 100_000, 1_000_000)
SCALING_WORKLOADS = ("poll_for_agent", "sweep_and_stats", "reflexion_learn")
CLAIM_WORKER = "w"
CLAIM_TIMEOUT_S = 600
COUNTED_JOBS = 200
NODE_TIMEOUT_S = 3_600
DRIVER = Path(__file__).resolve().with_name("reference_driver.mjs")
# The reference's issue: "Python's own sqlite3 does an UPDATE in one transaction at over
# 40,000/s here". Measured again on every run, it shows how fast this machine is.
YARDSTICK_REFERENCE = 40_000

# Published reference figures (triflux hub/store.mjs, better-sqlite3, on another machine),
# ops/s, median of 3, 1000 ops, with 0 and with 100,000 background rows. Shown only when
# the reference is not run side by side (--reference), and labelled as such.
REFERENCE_PRELOADS = (0, 100_000)
REFERENCE: dict[str, tuple[float, float]] = {
    "register_agent": (7_200, 26_400),
    "heartbeat": (28_200, 32_800),
    "audit_log": (8_900, 10_900),
    "poll_for_agent": (1_180, 54),
    "assign_lifecycle": (2_120, 2_380),
    "reflexion_learn": (5_200, 2_500),
    "reflexion_lookup_ctx": (12_000, 27_600),
    "sweep_and_stats": (3_900, 32),
}

Store = Any  # a HubStore or one of its units of work (duck-typed facade)
Op = Callable[[Store, int], None]
Log = Callable[[str], None]


# --------------------------------------------------------------------------- workloads


def _agent(i: int) -> str:
    return f"agent-{i % AGENT_COUNT}"


def _topics(i: int) -> list[str]:
    return ["t.a", f"t.{i % 7}"]


def op_register_agent(store: Store, i: int) -> None:
    store.register_agent(_agent(i), "codex", topics=_topics(i))


def op_heartbeat(store: Store, i: int) -> None:
    store.refresh_lease(_agent(i))


def op_audit_log(store: Store, i: int) -> None:
    if i % 3 == 0:
        to_agent, topic = "topic:t.a", "t.a"
    else:
        to_agent, topic = _agent(i + 1), f"t.{i % 7}"
    store.audit_log(
        type="event",
        from_agent=_agent(i),
        to_agent=to_agent,
        topic=topic,
        payload={"i": i, "text": "benchmark message"},
    )


def op_poll_for_agent(store: Store, i: int) -> None:
    store.poll_for_agent(_agent(i))


def op_assign_lifecycle(store: Store, i: int) -> None:
    job = store.create_assign(supervisor_agent="lead", worker_agent=_agent(i), task=f"t{i}")
    store.update_assign_status(job.job_id, "running")
    store.update_assign_status(job.job_id, "succeeded", result={"ok": True})


def _reflexion_context(i: int) -> dict[str, str]:
    return {"cli": "codex", "agent": f"agent-{i % 5}"}


def op_reflexion_learn(store: Store, i: int) -> None:
    learn_from_error(
        store,
        f"TypeError: cannot read x{i % 300} of undefined at /src/a.js:{i}:3",
        "guard it",
        context=_reflexion_context(i),
        success=(i % 2 == 0),
    )


def op_reflexion_lookup_ctx(store: Store, i: int) -> None:
    lookup_solution(
        store,
        f"TypeError: cannot read x{i % 300} of undefined at /lib/b.js:{i + 7}:9",
        context=_reflexion_context(i),
    )


def op_sweep_and_stats(store: Store, i: int) -> None:
    store.get_hub_stats()
    store.get_audit_stats()


# In running order: each workload only relies on the ones before it.
WORKLOADS: dict[str, Op] = {
    "register_agent": op_register_agent,
    "heartbeat": op_heartbeat,
    "audit_log": op_audit_log,
    "poll_for_agent": op_poll_for_agent,
    "assign_lifecycle": op_assign_lifecycle,
    "reflexion_learn": op_reflexion_learn,
    "reflexion_lookup_ctx": op_reflexion_lookup_ctx,
    "sweep_and_stats": op_sweep_and_stats,
}

# Workloads that need others to have run first (they are run, and timed, but not reported).
DEPENDS: dict[str, tuple[str, ...]] = {
    "heartbeat": ("register_agent",),
    "poll_for_agent": ("register_agent", "audit_log"),
    "reflexion_lookup_ctx": ("reflexion_learn",),
    "sweep_and_stats": ("register_agent", "audit_log"),
}


def plan_workloads(selected: Iterable[str]) -> list[str]:
    """The selected workloads and what they depend on, in running order."""
    needed: set[str] = set()
    stack = list(selected)
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(DEPENDS.get(name, ()))
    return [name for name in WORKLOADS if name in needed]


# --- the same workloads through hubstore.aio.AsyncHubStore (when it is installed)

AsyncOp = Callable[[Any, int], Awaitable[None]]


async def aop_register_agent(store: Any, i: int) -> None:
    await store.register_agent(_agent(i), "codex", topics=_topics(i))


async def aop_heartbeat(store: Any, i: int) -> None:
    await store.refresh_lease(_agent(i))


async def aop_audit_log(store: Any, i: int) -> None:
    if i % 3 == 0:
        to_agent, topic = "topic:t.a", "t.a"
    else:
        to_agent, topic = _agent(i + 1), f"t.{i % 7}"
    await store.audit_log(type="event", from_agent=_agent(i), to_agent=to_agent, topic=topic,
                          payload={"i": i, "text": "benchmark message"})


async def aop_poll_for_agent(store: Any, i: int) -> None:
    await store.poll_for_agent(_agent(i))


async def aop_assign_lifecycle(store: Any, i: int) -> None:
    job = await store.create_assign(supervisor_agent="lead", worker_agent=_agent(i),
                                    task=f"t{i}")
    await store.update_assign_status(job.job_id, "running")
    await store.update_assign_status(job.job_id, "succeeded", result={"ok": True})


async def aop_sweep_and_stats(store: Any, i: int) -> None:
    await store.get_hub_stats()
    await store.get_audit_stats()


# The reflexion workloads call module functions that take a sync store: left out.
ASYNC_WORKLOADS: dict[str, AsyncOp] = {
    "register_agent": aop_register_agent,
    "heartbeat": aop_heartbeat,
    "audit_log": aop_audit_log,
    "poll_for_agent": aop_poll_for_agent,
    "assign_lifecycle": aop_assign_lifecycle,
    "sweep_and_stats": aop_sweep_and_stats,
}


# --------------------------------------------------------------------------- background rows
#
# Written straight into the tables, in the shapes the stores' own calls write (the
# reference's createStore/auditLog/addReflexion/createAssign, hubstore's audit_log,
# add_reflexion, create_assign): hubstore's side through SQLAlchemy Core executemany (its
# triggers and indexes keep every derived structure, as for any writer), the reference's
# side through sqlite3 executemany. Both get the same rows, chunk by chunk.

Row = dict[str, Any]
BACKGROUND_TABLES = {
    "agents": table_of(Agent),
    "messages": table_of(Message),
    "reflexion_entries": table_of(ReflexionEntry),
    "assign_jobs": table_of(AssignJob),
}
JSON_COLUMNS = {
    "agents": ("capabilities_json", "topics_json", "metadata_json"),
    "messages": ("payload_json",),
    "reflexion_entries": ("context_json",),
    "assign_jobs": ("payload_json", "result_json", "error_json"),
}


def _old_agent_rows(now: int) -> list[Row]:
    return [
        {"agent_id": f"old-{k}", "cli": "gemini", "pid": None, "capabilities_json": [],
         "topics_json": ["t.old"], "last_seen_ms": now, "lease_expires_ms": now + 30_000,
         "status": "offline", "metadata_json": {}}
        for k in range(OLD_AGENT_COUNT)
    ]


def _background_message(j: int, now: int) -> Row:
    to_agent = "topic:t.old" if j % 3 == 0 else f"old-{(j + 1) % OLD_AGENT_COUNT}"
    return {
        "id": uuidv7(), "type": "event", "from_agent": f"old-{j % OLD_AGENT_COUNT}",
        "to_agent": to_agent, "topic": "t.old", "priority": 5, "ttl_ms": 300_000,
        "created_at_ms": now, "expires_at_ms": now + 300_000, "correlation_id": uuidv7(),
        "trace_id": uuidv7(), "payload_json": {"j": j, "text": "background message"},
        "status": "queued",
    }


def _background_reflexion(j: int, now: int) -> Row:
    line = j % 900 + 1
    return {
        "id": uuidv7(), "error_pattern": f"referenceerror: y{j} is not defined at <file>:<line>",
        "error_message": f"ReferenceError: y{j} is not defined at /srv/app/m{j % 50}.js:{line}:5",
        "context_json": {"cli": "gemini"}, "solution": "declare it", "solution_code": None,
        "confidence": 0.5, "hit_count": 1, "success_count": 0, "last_hit_ms": now,
        "created_at_ms": now, "updated_at_ms": now,
    }


def _background_assign(j: int, now: int) -> Row:
    return {
        "job_id": uuidv7(), "supervisor_agent": "old-lead",
        "worker_agent": f"old-{j % OLD_AGENT_COUNT}", "topic": "assign.job", "task": f"old{j}",
        "payload_json": {}, "status": "succeeded", "attempt": 1, "retry_count": 0,
        "max_retries": 0, "priority": 5, "ttl_ms": 600_000, "timeout_ms": 600_000,
        "deadline_ms": now + 600_000, "trace_id": uuidv7(), "correlation_id": uuidv7(),
        "last_message_id": None, "result_json": {"ok": True}, "error_json": None,
        "created_at_ms": now, "updated_at_ms": now, "started_at_ms": None,
        "completed_at_ms": now, "last_retry_at_ms": None,
    }


def background_chunks(count: int) -> Iterator[list[tuple[str, list[Row]]]]:
    """The background rows, a unit of about PRELOAD_UNIT_ROWS rows at a time."""
    if count <= 0:
        return
    yield [("agents", _old_agent_rows(now_ms()))]
    for first in range(0, count, PRELOAD_UNIT_MESSAGES):
        now = now_ms()
        messages, entries, jobs = [], [], []
        for j in range(first, min(count, first + PRELOAD_UNIT_MESSAGES)):
            messages.append(_background_message(j, now))
            if j % 10 == 0:
                entries.append(_background_reflexion(j, now))
                jobs.append(_background_assign(j, now))
        yield [("messages", messages), ("reflexion_entries", entries), ("assign_jobs", jobs)]


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


class ReferenceWriter:
    """Writes background rows into a reference database file with sqlite3."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)

    def write(self, table: str, rows: list[Row]) -> None:
        if not rows:
            return
        names = list(rows[0])
        sql = (f"INSERT INTO {table} ({', '.join(names)}) "  # names are ours, not input
               f"VALUES ({', '.join('?' for _ in names)})")
        encoded = JSON_COLUMNS[table]
        self.db.executemany(sql, [
            tuple(_json_text(row[n]) if n in encoded else row[n] for n in names) for row in rows
        ])

    def close(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()


def preload(store: HubStore, count: int, log: Log, reference: Path | None = None) -> float:
    """Write `count` background messages (and their companions) into the store, and the
    same rows into the reference file when one is given; return the seconds taken."""
    if count <= 0:
        return 0.0
    started = time.perf_counter()
    writer = ReferenceWriter(reference) if reference is not None else None
    done = 0
    try:
        for chunk in background_chunks(count):
            with store.unit_of_work() as uow:
                for table, rows in chunk:
                    if rows:
                        uow.connection.execute(insert(BACKGROUND_TABLES[table]), rows)
            if writer is not None:
                writer.db.execute("BEGIN IMMEDIATE")
                for table, rows in chunk:
                    writer.write(table, rows)
                writer.db.execute("COMMIT")
            done += sum(len(rows) for table, rows in chunk if table == "messages")
            if done and done % (PRELOAD_UNIT_MESSAGES * 24) < PRELOAD_UNIT_MESSAGES:
                elapsed = time.perf_counter() - started
                log(f"  preload {done:,}/{count:,} messages ({elapsed:.1f} s)")
    finally:
        if writer is not None:
            writer.close()
    _settle(store)
    return time.perf_counter() - started


def _settle(store: HubStore) -> None:
    """End the load phase before timing, so the timed runs do not pay for the load:
    SQLite folds its WAL into the database file; both refresh planner statistics."""
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None  # a live connection
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # outside any transaction
            raw.execute("PRAGMA optimize")
        return
    # PostgreSQL: a figures call folds the load's counter deltas into hub_counters (and
    # vacuums them); VACUUM ANALYZE then gives the planner the loaded tables' statistics,
    # as autovacuum would within a minute or so. (In a writing unit of work: the fold
    # writes.)
    with store.unit_of_work() as uow:
        uow.get_hub_stats()
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


# --------------------------------------------------------------------------- databases


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_path(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def _sqlite_tables(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        con.close()
    return [row[0] for row in rows]


def _remove_sqlite_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _pg_tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        return inspect(engine).get_table_names(schema="public")
    finally:
        engine.dispose()


def _pg_reset(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    finally:
        engine.dispose()


def _describe_tables(tables: Sequence[str], shown: int = 5) -> str:
    names = sorted(tables)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class NonEmptyDatabase(RuntimeError):
    """The target database holds tables and --reset was not given."""


@dataclass
class Target:
    """Where the benchmark writes: a temp SQLite file, or a URL the user gave."""

    url: str | None
    reset: bool
    keep: bool = False
    _tmpdir: Path | None = field(default=None, init=False)
    _owned: bool = field(default=False, init=False)  # once emptied, the data in it is ours
    _count: int = field(default=0, init=False)
    _last_temp: Path | None = field(default=None, init=False, repr=False)
    #: The URL fresh() gave last (the template of the current measurement).
    last_url: str = field(default="", init=False)

    def fresh(self) -> str:
        """The URL of an empty database (a new file, or the user's database emptied)."""
        self._count += 1
        if self.url is None:
            self.last_url = self._fresh_temp_sqlite()
            return self.last_url
        if _is_sqlite(self.url):
            self._empty_sqlite(self.url)
        else:
            self._empty_pg(self.url)
        self._owned = True
        self.last_url = self.url
        return self.url

    def _fresh_temp_sqlite(self) -> str:
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="hubstore-bench-"))
        if self._last_temp is not None and not self.keep:
            _remove_sqlite_files(self._last_temp)
        self._last_temp = self._tmpdir / f"hub-{self._count}.db"
        return f"sqlite:///{self._last_temp}"

    def _empty_sqlite(self, url: str) -> None:
        path = _sqlite_path(url)
        if path is None or not path.exists():
            return
        tables = _sqlite_tables(path)
        if tables and not (self.reset or self._owned):
            raise NonEmptyDatabase(
                f"{path} already holds tables ({_describe_tables(tables)}); "
                "pass --reset to delete the file and start from an empty database"
            )
        _remove_sqlite_files(path)

    def _empty_pg(self, url: str) -> None:
        tables = _pg_tables(url)
        if not tables:
            return
        if not (self.reset or self._owned):
            name = make_url(url).database or "(default database)"
            raise NonEmptyDatabase(
                f"PostgreSQL database {name} is not empty (tables: "
                f"{_describe_tables(tables)}); the benchmark must start from an empty "
                "database. Pass --reset to run DROP SCHEMA public CASCADE; CREATE SCHEMA public "
                "(this deletes every table in schema public), or point --url at an empty database"
            )
        _pg_reset(url)

    def workdir(self) -> Path:
        """This run's temp dir (made on first use, removed by cleanup)."""
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="hubstore-bench-"))
        return self._tmpdir

    def scratch(self, name: str) -> Path:
        """A fresh file path in this run's temp dir (the reference's files live there)."""
        path = self.workdir() / name
        _remove_sqlite_files(path)
        return path

    def cleanup(self) -> None:
        if self._tmpdir is not None and not self.keep:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


def display_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)



# --- fresh copies of a template, one per repeat


def _copy_sqlite_file(source: Path, dest: Path) -> None:
    _remove_sqlite_files(dest)
    shutil.copyfile(source, dest)
    wal = Path(f"{source}-wal")
    if wal.exists() and wal.stat().st_size:
        shutil.copyfile(wal, Path(f"{dest}-wal"))


def _pg_admin(url: URL) -> Any:
    return create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")


def copy_database(template_url: str, k: int) -> str:
    """A fresh copy of the template database for repeat `k`: its URL."""
    url = make_url(template_url)
    if url.get_backend_name() == "sqlite":
        path = _sqlite_path(template_url)
        assert path is not None, "templates are files"
        dest = path.with_name(f"{path.name}.r{k}")
        _copy_sqlite_file(path, dest)
        return url.set(database=str(dest)).render_as_string(hide_password=False)
    name = f"{url.database}_r{k}"
    admin = _pg_admin(url)
    try:
        quote = admin.dialect.identifier_preparer.quote
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote(name)}")
            conn.exec_driver_sql(f"CREATE DATABASE {quote(name)} TEMPLATE {quote(url.database)}")
    finally:
        admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_copy(copy_url: str, keep: bool = False) -> None:
    """Remove a copy made by copy_database."""
    url = make_url(copy_url)
    if url.get_backend_name() == "sqlite":
        path = _sqlite_path(copy_url)
        if path is not None and not keep:
            _remove_sqlite_files(path)
            Path(f"{path}.lock").unlink(missing_ok=True)
        return
    if keep:
        return
    admin = _pg_admin(url)
    try:
        with admin.connect() as conn:
            name = admin.dialect.identifier_preparer.quote(url.database)
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        admin.dispose()


# --------------------------------------------------------------------------- timing


def time_workload(store: Store, op: Op, ops: int) -> float:
    """Run `ops` operations with i = 0 .. ops - 1; return ops/s."""
    started = time.perf_counter()
    for i in range(ops):
        op(store, i)
    elapsed = time.perf_counter() - started
    return ops / elapsed if elapsed > 0 else float("inf")


#: The workloads the raw-driver lane runs on Python's sqlite3 alone (RawDriverHub).
RAW_WORKLOADS = ("heartbeat", "audit_log", "poll_for_agent")


def run_plan(url: str, plan: Sequence[str], ops: int, raw_driver: bool = False
             ) -> dict[str, float]:
    """Every workload of the plan, in order, on the store at `url`: ops/s of each. With
    ``raw_driver``, RAW_WORKLOADS run on RawDriverHub (the others, which they rely on,
    through hubstore) and only theirs are returned."""
    with HubStore.open(url) as store:
        calls: Store = RawDriverHub(store) if raw_driver else store
        rates = {name: time_workload(calls, WORKLOADS[name], ops) for name in plan}
    return {name: rate for name, rate in rates.items()
            if not raw_driver or name in RAW_WORKLOADS}


def machine_yardstick(ops: int = 5_000, repeats: int = 3) -> float:
    """Python's sqlite3 alone: one-row UPDATEs, each in its own transaction; median ops/s.

    WAL and synchronous NORMAL, as hubstore sets them. No hubstore code runs, so the
    figure measures the machine (CPU, file system) and nothing else.
    """
    rates = []
    with tempfile.TemporaryDirectory(prefix="hubstore-yardstick-") as tmp:
        db = sqlite3.connect(Path(tmp) / "yardstick.db", isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("CREATE TABLE agents (agent_id TEXT PRIMARY KEY, last_seen_ms INTEGER)")
            agents = [(_agent(i),) for i in range(AGENT_COUNT)]
            db.executemany("INSERT INTO agents VALUES (?, 0)", agents)
            for _ in range(repeats):
                started = time.perf_counter()
                for i in range(ops):
                    db.execute("BEGIN IMMEDIATE")
                    db.execute(
                        "UPDATE agents SET last_seen_ms = ? WHERE agent_id = ?", (i, _agent(i))
                    )
                    db.execute("COMMIT")
                rates.append(ops / (time.perf_counter() - started))
        finally:
            db.close()
    return round(statistics.median(rates), 1)


def yardstick_line(rate: float) -> str:
    ratio = rate / YARDSTICK_REFERENCE
    return (
        f"machine yardstick: Python sqlite3, one-row UPDATE per transaction: {rate:,.0f}/s "
        f"({ratio:.2f}x the reference machine's 'over {YARDSTICK_REFERENCE:,}')"
    )


# --------------------------------------------------------------------------- the reference


class ReferenceFailed(RuntimeError):
    """The node driver of the reference store failed or could not start."""


@dataclass(frozen=True)
class Reference:
    """A reference hub folder (store.mjs, reflexion.mjs) run by reference_driver.mjs."""

    hub_dir: Path
    node: str = "node"

    @classmethod
    def check(cls, hub_dir: str) -> Reference:
        """The folder, if node and both modules are there; else ReferenceFailed saying why."""
        path = Path(hub_dir).expanduser().resolve()
        missing = [name for name in ("store.mjs", "reflexion.mjs") if not (path / name).is_file()]
        if missing:
            raise ReferenceFailed(f"{path} has no {' or '.join(missing)} (expected a triflux "
                                  "hub/ folder, e.g. from ../shared/reference/setup.sh DIR)")
        node = shutil.which("node")
        if node is None:
            raise ReferenceFailed("node is not on PATH (the reference store runs under node)")
        return cls(path, node)

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run(
            [self.node, str(DRIVER)], input=json.dumps({**spec, "hub_dir": str(self.hub_dir)}),
            capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False,
        )
        if done.returncode != 0:
            raise ReferenceFailed(f"reference driver failed ({done.returncode}): {done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    def init(self, path: Path) -> None:
        """Create an empty reference database at `path`, the reference's own way."""
        self.run({"mode": "init", "db": str(path)})


def reference_copy(template: Path, k: int) -> Path:
    dest = template.with_name(f"{template.name}.r{k}")
    _copy_sqlite_file(template, dest)
    return dest


# --------------------------------------------------------------------------- async


def load_async_store() -> tuple[Any, str | None]:
    """hubstore.aio.AsyncHubStore, or None and why not."""
    try:
        module = importlib.import_module("hubstore.aio")
    except ImportError as exc:
        return None, f"async skipped: hubstore.aio is not importable ({exc})"
    store_class = getattr(module, "AsyncHubStore", None)
    if store_class is None:
        return None, "async skipped: hubstore.aio has no AsyncHubStore"
    return store_class, None


async def _async_plan(store_class: Any, url: str, plan: Sequence[str],
                      ops: int, tasks: int = 1) -> dict[str, float]:
    """ops/s of each workload, its ``ops`` calls shared by ``tasks`` concurrent tasks."""
    rates: dict[str, float] = {}
    async with await store_class.open(url) as store:
        for name in plan:
            op = ASYNC_WORKLOADS.get(name)
            if op is None:
                continue

            async def share(k: int, op: AsyncOp = op) -> None:
                for i in range(k, ops, tasks):
                    await op(store, i)

            started = time.perf_counter()
            await asyncio.gather(*(share(k) for k in range(tasks)))
            elapsed = time.perf_counter() - started
            rates[name] = ops / elapsed if elapsed > 0 else float("inf")
    return rates


def run_async_plan(store_class: Any, url: str, plan: Sequence[str], ops: int,
                   tasks: int = 1) -> dict[str, float]:
    return asyncio.run(_async_plan(store_class, url, plan, ops, tasks))


# --------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    """Every repeat's ops/s per workload, for hubstore and (when run) the others."""

    runs: dict[str, list[float]]
    reference_runs: dict[str, list[float]] | None = None
    raw_runs: dict[str, list[float]] | None = None
    async_runs: dict[str, list[float]] | None = None
    async_note: str | None = None
    async_tasks: int = 1
    preload_s: float = 0.0
    reference_template: Path | None = None


def prepare(target: Target, rows: int, reference: Reference | None,
            log: Log) -> tuple[str, Path | None, float]:
    """A hubstore template (migrated, preloaded) and, with a reference, its template with
    the same rows: (hubstore URL, reference file, preload seconds)."""
    url = target.fresh()
    ref_path = None
    if reference is not None:
        ref_path = target.scratch(f"reference-{rows}.db")
        reference.init(ref_path)
    log(f"database: {display_url(url)}" + (f"; reference: {ref_path}" if ref_path else ""))
    with HubStore.open(url, auto_migrate=True) as store:
        preload_s = preload(store, rows, log, ref_path)
    return url, ref_path, preload_s


def _append(into: dict[str, list[float]], rates: dict[str, float]) -> None:
    for name, rate in rates.items():
        into.setdefault(name, []).append(rate)


def bench_database(target: Target, preload_rows: int, workloads: Sequence[str], ops: int,
                   repeats: int, log: Log, reference: Reference | None = None,
                   with_async: bool = False, async_tasks: int = 1,
                   raw_driver: bool = False) -> Measured:
    """Preload templates, then per repeat time the workloads on fresh copies."""
    plan = plan_workloads(workloads)
    url, ref_path, preload_s = prepare(target, preload_rows, reference, log)
    measured = Measured(runs={}, preload_s=preload_s, reference_template=ref_path,
                        async_tasks=async_tasks)
    store_class = None
    if with_async:
        store_class, measured.async_note = load_async_store()
        if measured.async_note:
            log(f"  {measured.async_note}")
    for k in range(1, repeats + 1):
        copy = copy_database(url, k)
        try:
            rates = run_plan(copy, plan, ops)
        finally:
            drop_copy(copy, target.keep)
        _append(measured.runs, rates)
        for name, rate in rates.items():
            log(f"  run {k}/{repeats} hubstore  {name:<22} {rate:>12,.1f} ops/s")
        if raw_driver:
            copy = copy_database(url, k)
            try:
                raw_rates = run_plan(copy, plan, ops, raw_driver=True)
            finally:
                drop_copy(copy, target.keep)
            measured.raw_runs = measured.raw_runs or {}
            _append(measured.raw_runs, raw_rates)
            for name, rate in raw_rates.items():
                log(f"  run {k}/{repeats} raw sqlite3 {name:<20} {rate:>12,.1f} ops/s")
        if reference is not None and ref_path is not None:
            ref_copy = reference_copy(ref_path, k)
            try:
                out = reference.run({"mode": "workloads", "db": str(ref_copy),
                                     "workloads": plan, "n": ops})
            finally:
                if not target.keep:
                    _remove_sqlite_files(ref_copy)
            measured.reference_runs = measured.reference_runs or {}
            _append(measured.reference_runs, out["rates"])
            for name, rate in out["rates"].items():
                log(f"  run {k}/{repeats} reference {name:<22} {rate:>12,.1f} ops/s")
        if store_class is not None:
            copy = copy_database(url, k)
            try:
                arates = run_async_plan(store_class, copy, plan, ops, async_tasks)
            finally:
                drop_copy(copy, target.keep)
            measured.async_runs = measured.async_runs or {}
            _append(measured.async_runs, arates)
    reported = [name for name in WORKLOADS if name in workloads]
    measured.runs = {name: measured.runs[name] for name in reported}
    if measured.reference_runs is not None:
        measured.reference_runs = {name: measured.reference_runs[name] for name in reported}
    if measured.async_runs is not None:
        measured.async_runs = {name: measured.async_runs[name] for name in reported
                               if name in measured.async_runs}
    if measured.raw_runs is not None:
        measured.raw_runs = {name: measured.raw_runs[name] for name in reported
                             if name in measured.raw_runs}
    return measured


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": round(min(values), 1), "median": round(statistics.median(values), 1),
            "max": round(max(values), 1)}


def medians(runs: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(statistics.median(values), 1) for name, values in runs.items()}


# --------------------------------------------------------------------------- the whole hub
#
# A simulated hub of N agents (reference_driver.mjs hubSecond runs the same mix). Per
# simulated second t, agent a with phase p = t + a heartbeats when p % 10 == 0, polls
# when p is even and writes an audit message when p is odd (0.5 a second each), runs an
# assign lifecycle (create, running, succeeded) when p % 50 == 0, learns from an error
# when p % 100 == 0 and looks one up when p % 100 == 50. The hub reads its figures once a
# second and sweeps stale agents every 5 seconds. With N a multiple of 100, every
# simulated second holds the same mix, so any whole number of them is a fair sample.


@dataclass
class HubCounters:
    messages: int = 0
    errors: int = 0
    lookups: int = 0


def _hub_agent(a: int) -> str:
    return f"hub-{a}"


def hub_second(store: Store, t: int, agents: int, counters: HubCounters) -> int:
    """One simulated second of the whole hub; the number of store calls made."""
    ops = 0
    for a in range(agents):
        p = t + a
        name = _hub_agent(a)
        if p % 10 == 0:
            store.refresh_lease(name)
            ops += 1
        if p % 2 == 0:
            store.poll_for_agent(name)
        else:
            k = counters.messages
            counters.messages += 1
            to_topic = k % 3 == 0
            store.audit_log(
                type="event", from_agent=name,
                to_agent="topic:t.a" if to_topic else _hub_agent((a + 1) % agents),
                topic="t.a" if to_topic else f"t.{a % 7}", payload={"i": k, "text": "hub message"},
            )
        ops += 1
        if p % 50 == 0:
            job = store.create_assign(supervisor_agent="hub-lead", worker_agent=name,
                                      task=f"h{t}-{a}")
            store.update_assign_status(job.job_id, "running")
            store.update_assign_status(job.job_id, "succeeded", result={"ok": True})
            ops += 3
        if p % 100 == 0:
            op_reflexion_learn(store, counters.errors)
            counters.errors += 1
            ops += 1
        if p % 100 == 50:
            op_reflexion_lookup_ctx(store, counters.lookups)
            counters.lookups += 1
            ops += 1
    store.get_hub_stats()
    store.get_audit_stats()
    ops += 2
    if t % 5 == 0:
        store.sweep_stale_agents()
        ops += 1
    return ops


def driver_statement(prepared: Any, dialect: Any) -> tuple[str, list[str], dict[str, Any]]:
    """A hubstore statement as the driver runs it: its SQL text (with the dialect's
    casts), its parameters' names in order (qmark style; [] for named ones), and the
    values of those it binds itself (a literal OFFSET 0, say)."""
    compiled = prepared.statement.compile(dialect=dialect)
    bound = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
    return str(compiled), list(compiled.positiontup or []), bound


def _qmark(prepared: Any) -> tuple[str, list[str], dict[str, Any]]:
    """driver_statement for Python's sqlite3."""
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    return driver_statement(prepared, sqlite_dialect.dialect())


class RawDriverHub:
    """The whole hub's three most frequent calls straight on Python's sqlite3: the same
    statements hubstore runs (compiled from its own), on the store's own writing
    connection (so the same page cache, pragmas and file), with nothing around them (no
    validation, no unit of work, no write lock, rows returned as tuples with their JSON
    payload decoded). Poll, audit_log and heartbeat are about nine in ten of the hub's
    calls and of its time; every other call goes to ``store``.

    Its capacity is an anchor, not a competitor: about the most any Python library could
    serve with this driver, this file's layout and these statements, so hubstore's
    figure over it is the share its own layers leave.
    """

    def __init__(self, store: HubStore) -> None:
        from hubstore.services import agents, messages

        self.store = store
        # The thread's kept writing connection (in autocommit between units of work): a
        # connection of its own would find its page cache dropped after each of the
        # store's writes, and the store's after each of its own.
        with store.one_statement() as uow:
            self.db: sqlite3.Connection = uow.driver
        self._heartbeat = _qmark(agents._HEARTBEAT_ONLINE)
        self._insert = _qmark(messages._INSERT)
        self._topics = _qmark(messages._AGENT_TOPICS)
        self._polls: dict[int, tuple[str, list[str], dict[str, Any]]] = {}
        self._payload = list(table_of(Message).c.keys()).index("payload_json")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _run(self, statement: tuple[str, list[str], dict[str, Any]],
             values: dict[str, Any]) -> sqlite3.Cursor:
        sql, names, bound = statement
        return self.db.execute(sql, [values[n] if n in values else bound[n] for n in names])

    def refresh_lease(self, agent_id: str) -> None:
        now = now_ms()
        self._run(self._heartbeat,
                  {"p_agent_id": agent_id, "p_now": now, "p_expires": now + 30_000})

    def poll_for_agent(self, agent_id: str) -> list[tuple[Any, ...]]:
        from hubstore.services.messages import DEFAULT_POLL, _poll_statement

        (topics_json,) = self._run(self._topics, {"p_agent_id": agent_id}).fetchone()
        topics = json.loads(topics_json)
        statement = self._polls.get(len(topics))
        if statement is None:
            statement = self._polls[len(topics)] = _qmark(
                _poll_statement(dialect_for("sqlite"), len(topics)))
        values = {"p_agent_id": agent_id, "p_limit": DEFAULT_POLL,
                  **{f"p_topic_{k}": topic for k, topic in enumerate(topics)}}
        at = self._payload
        return [(*row[:at], json.loads(row[at]), *row[at + 1:])
                for row in self._run(statement, values).fetchall()]

    def audit_log(self, *, type: str, from_agent: str, to_agent: str, topic: str,
                  payload: Any) -> str:
        now = now_ms()
        message_id = uuidv7()
        self._run(self._insert, {
            "id": message_id, "type": type, "from_agent": from_agent, "to_agent": to_agent,
            "topic": topic, "priority": 5, "ttl_ms": 300_000, "created_at_ms": now,
            "expires_at_ms": now + 300_000, "correlation_id": uuidv7(),
            "trace_id": uuidv7(), "payload_json": json.dumps(payload), "status": "queued"})
        return message_id


def rss_bytes() -> int:
    """This process's resident set size now."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # no /proc: the peak is the best there is
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_hub(url: str, agents: int, seconds: int, budget_s: float,
            ops_target: int | None, raw_driver: bool = False) -> dict[str, Any]:
    """The whole hub on the store at `url`, as fast as it goes.

    Runs whole simulated seconds until `seconds` of them or `budget_s` wall seconds are
    done, or, with `ops_target`, until that many store calls (RSS is sampled after the
    first tenth of them, the warm-up, and at the end). With `raw_driver` (SQLite), the
    hub's polls, audit_log calls and heartbeats run on Python's sqlite3 alone
    (RawDriverHub).
    """
    with HubStore.open(url) as store:
        for a in range(agents):
            store.register_agent(_hub_agent(a), "codex", topics=_topics(a))
        calls: Store = RawDriverHub(store) if raw_driver else store
        counters = HubCounters()
        ops = t = 0
        warm_rss: int | None = None
        peak = 0
        started = time.perf_counter()
        while True:
            ops += hub_second(calls, t, agents, counters)
            t += 1
            if ops_target is not None:
                if warm_rss is None and ops >= ops_target // 10:
                    warm_rss = rss_bytes()
                if warm_rss is not None and t % 100 == 0:
                    peak = max(peak, rss_bytes())
                if ops >= ops_target:
                    break
            elif t >= seconds or time.perf_counter() - started >= budget_s:
                break
        wall = time.perf_counter() - started
        end_rss = rss_bytes()
    result: dict[str, Any] = {
        "sim_seconds": t, "agents": agents, "ops": ops, "wall_seconds": round(wall, 3),
        "agent_seconds_per_s": round(agents * t / wall, 1), "rss_bytes": end_rss,
    }
    if warm_rss is not None:
        result["rss_after_warmup_bytes"] = warm_rss
        result["rss_peak_bytes"] = max(peak, end_rss)
        result["rss_growth"] = round(end_rss / warm_rss - 1, 4)
        result["rss_flat"] = abs(end_rss / warm_rss - 1) <= 0.10
    return result


# --------------------------------------------------------------------------- output


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)
        )
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _rate(value: float) -> str:
    return f"{value:,.1f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:,.0f}x"


def reference_for(preload_rows: int) -> dict[str, float] | None:
    if preload_rows not in REFERENCE_PRELOADS:
        return None
    column = REFERENCE_PRELOADS.index(preload_rows)
    return {name: figures[column] for name, figures in REFERENCE.items()}


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The median of the per-repeat ratios: repeat k of hubstore and repeat k of the
    reference run seconds apart, so a machine whose load changes between repeats moves
    both figures of a pair alike (the ratio of medians pairs runs minutes apart)."""
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def _spread_cells(values: Sequence[float]) -> list[str]:
    s = spread(values)
    return [_rate(s["min"]), _rate(s["median"]), _rate(s["max"])]


def results_table(measured: Measured, published: dict[str, float] | None) -> str:
    header = ["workload", "hubstore min", "median", "max"]
    ref = measured.reference_runs
    if ref is not None:
        header += ["reference min", "median", "max", "ratio", "paired"]
    elif published is not None:
        header += ["published reference (other machine)", "ratio"]
    if measured.async_runs:
        tasks = measured.async_tasks
        header += [f"async median ({tasks} task{'s' if tasks > 1 else ''})", "async/sync"]
    raw = measured.raw_runs
    if raw is not None:
        header += ["raw sqlite3 median", "hubstore/raw"]
        if ref is not None:
            header += ["raw/reference"]
    rows = []
    for name, values in measured.runs.items():
        median = statistics.median(values)
        row = [name, *_spread_cells(values)]
        if ref is not None:
            row += [*_spread_cells(ref[name]), _ratio(median / statistics.median(ref[name])),
                    _ratio(paired_ratio(values, ref[name]))]
        elif published is not None:
            row += [f"{published[name]:,.0f}", _ratio(median / published[name])]
        if measured.async_runs:
            avalues = measured.async_runs.get(name)
            row += ([_rate(statistics.median(avalues)),
                     f"{statistics.median(avalues) / median:.2f}x"] if avalues else ["-", "-"])
        if raw is not None:
            rvalues = raw.get(name)
            if rvalues:
                row += [_rate(statistics.median(rvalues)),
                        f"{median / statistics.median(rvalues):.2f}"]
                if ref is not None:
                    row += [_ratio(statistics.median(rvalues) / statistics.median(ref[name]))]
            else:
                row += ["-", "-"] + (["-"] if ref is not None else [])
        rows.append(row)
    return format_table(header, rows)


def scaling_table(
    scales: Sequence[int], by_scale: dict[str, dict[str, float]], kept: dict[str, float]
) -> str:
    header = ["workload", *[f"{scale:,} rows" for scale in scales], "kept"]
    rows = [
        [name, *(_rate(by_scale[str(scale)][name]) for scale in scales), f"{fraction:.1%}"]
        for name, fraction in kept.items()
    ]
    return format_table(header, rows)


def kept_fraction(rates: Sequence[float]) -> float:
    """Speed at the largest scale as a fraction of the speed at the smallest."""
    return rates[-1] / rates[0] if rates[0] else 0.0


def emit(payload: dict[str, Any], table: str, json_only: bool) -> None:
    print(json.dumps(payload), flush=True)
    if not json_only:
        print()
        print(table, flush=True)


# --------------------------------------------------------------------------- modes


def run_standard(args: argparse.Namespace, target: Target, log: Log) -> None:
    measured = bench_database(target, args.preload, args.workloads, args.n, args.repeat, log,
                              args.reference, args.async_, args.async_tasks, args.raw_driver)
    yardstick = machine_yardstick()
    results = medians(measured.runs)
    payload: dict[str, Any] = {
        "url": display_url(target.last_url),
        "preload": args.preload,
        "n": args.n,
        "repeat": args.repeat,
        "repeats": "fresh copy of the preloaded template per repeat, same operations",
        "results": results,
        "spread": {name: spread(values) for name, values in measured.runs.items()},
        "preload_seconds": round(measured.preload_s, 2),
        "yardstick_ops_per_s": yardstick,
    }
    published = None
    if measured.reference_runs is not None:
        reference = medians(measured.reference_runs)
        payload["reference"] = reference
        payload["reference_source"] = "measured"
        payload["reference_dir"] = str(args.reference.hub_dir)
        payload["reference_template"] = str(measured.reference_template)
        payload["reference_spread"] = {
            name: spread(values) for name, values in measured.reference_runs.items()}
        payload["ratio"] = {name: float(f"{results[name] / reference[name]:.4g}")
                            for name in results}
        payload["paired_ratio"] = {
            name: float(f"{paired_ratio(values, measured.reference_runs[name]):.4g}")
            for name, values in measured.runs.items()}
    else:
        published = reference_for(args.preload)
        if published is not None:
            payload["reference"] = {name: published[name] for name in results}
            payload["reference_source"] = "published"
    if measured.async_runs is not None:
        payload["async"] = medians(measured.async_runs)
        payload["async_tasks"] = measured.async_tasks
        payload["async_spread"] = {
            name: spread(values) for name, values in measured.async_runs.items()}
    if measured.async_note:
        payload["async_note"] = measured.async_note
    if measured.raw_runs is not None:
        raw = medians(measured.raw_runs)
        payload["raw_driver"] = raw
        payload["raw_driver_spread"] = {
            name: spread(values) for name, values in measured.raw_runs.items()}
        payload["share_of_raw"] = {name: float(f"{results[name] / raw[name]:.4g}")
                                   for name in raw}
        if measured.reference_runs is not None:
            payload["raw_ratio"] = {
                name: float(f"{raw[name] / payload['reference'][name]:.4g}") for name in raw}
    table = results_table(measured, published)
    title = (f"ops/s, {args.n} ops, {args.repeat} repeats (min/median/max), "
             f"{args.preload:,} background rows")
    notes = [measured.async_note] if measured.async_note else []
    emit(payload, "\n".join([title, table, "", yardstick_line(yardstick), *notes]),
         args.json_only)


def run_scaling(args: argparse.Namespace, target: Target, log: Log) -> None:
    by_scale: dict[str, dict[str, float]] = {}
    for scale in args.scales:
        log(f"scale {scale:,}")
        measured = bench_database(target, scale, args.workloads, args.n, args.repeat, log)
        by_scale[str(scale)] = medians(measured.runs)
    names = list(by_scale[str(args.scales[0])])
    kept = {
        name: round(kept_fraction([by_scale[str(s)][name] for s in args.scales]), 4)
        for name in names
    }
    payload = {
        "mode": "scaling",
        "url": display_url(target.last_url),
        "n": args.n,
        "repeat": args.repeat,
        "scales": list(args.scales),
        "results": by_scale,
        "kept": kept,
    }
    lines = [scaling_table(args.scales, by_scale, kept), ""]
    for name, fraction in kept.items():
        lines.append(
            f"{name} keeps {fraction:.1%} of its speed from "
            f"{args.scales[0]:,} to {args.scales[-1]:,} rows"
        )
    emit(payload, "\n".join(lines), args.json_only)


def _mib(value: int) -> str:
    return f"{value / 2**20:,.1f} MiB"


def run_hub_mode(args: argparse.Namespace, target: Target, log: Log) -> None:
    reference: Reference | None = args.reference
    by_scale: dict[str, dict[str, Any]] = {}
    for scale in args.scales:
        url, ref_path, preload_s = prepare(target, scale, reference, log)
        hub_runs: list[dict[str, Any]] = []
        raw_runs: list[dict[str, Any]] = []
        ref_runs: list[dict[str, Any]] = []
        for k in range(1, args.repeat + 1):
            copy = copy_database(url, k)
            try:
                run = run_hub(copy, args.agents, args.seconds, args.budget, args.ops)
            finally:
                drop_copy(copy, target.keep)
            hub_runs.append(run)
            log(f"  {scale:,} rows, run {k}: hubstore {run['agent_seconds_per_s']:,.1f} "
                f"agent-s/s ({run['sim_seconds']} s simulated, {run['ops']:,} calls)")
            if args.raw_driver:
                copy = copy_database(url, k)
                try:
                    raw = run_hub(copy, args.agents, args.seconds, args.budget, args.ops,
                                  raw_driver=True)
                finally:
                    drop_copy(copy, target.keep)
                raw_runs.append(raw)
                log(f"  {scale:,} rows, run {k}: raw sqlite3 "
                    f"{raw['agent_seconds_per_s']:,.1f} agent-s/s")
            if reference is not None and ref_path is not None:
                ref_copy = reference_copy(ref_path, k)
                try:
                    out = reference.run({
                        "mode": "hub", "db": str(ref_copy), "agents": args.agents,
                        "seconds": run["sim_seconds"] if args.ops else args.seconds,
                        "budget_s": args.budget})
                finally:
                    if not target.keep:
                        _remove_sqlite_files(ref_copy)
                ref_runs.append(out)
                log(f"  {scale:,} rows, run {k}: reference {out['agent_seconds_per_s']:,.1f} "
                    f"agent-s/s ({out['sim_seconds']} s simulated, {out['ops']:,} calls)")
        entry: dict[str, Any] = {
            "preload_seconds": round(preload_s, 2),
            "hubstore": spread([r["agent_seconds_per_s"] for r in hub_runs]),
            "hubstore_runs": hub_runs,
        }
        if raw_runs:
            entry["raw_driver"] = spread([r["agent_seconds_per_s"] for r in raw_runs])
            entry["raw_driver_runs"] = raw_runs
            entry["share_of_raw"] = float(
                f"{entry['hubstore']['median'] / entry['raw_driver']['median']:.4g}")
        if ref_runs:
            entry["reference"] = spread([r["agent_seconds_per_s"] for r in ref_runs])
            entry["reference_runs"] = ref_runs
            entry["ratio"] = float(
                f"{entry['hubstore']['median'] / entry['reference']['median']:.4g}")
            if raw_runs:
                entry["raw_ratio"] = float(
                    f"{entry['raw_driver']['median'] / entry['reference']['median']:.4g}")
        by_scale[str(scale)] = entry
    payload = {
        "mode": "hub", "url": display_url(target.last_url), "agents": args.agents,
        "repeat": args.repeat, "seconds": args.seconds, "budget_s": args.budget,
        "ops_target": args.ops, "scales": list(args.scales), "results": by_scale,
        "figure": "agent-seconds served per wall second (agents served in real time)",
    }
    header = ["history rows", "hubstore min", "median", "max"]
    if args.raw_driver:
        header += ["raw sqlite3 min", "median", "max", "hubstore/raw"]
    if reference is not None:
        header += ["reference min", "median", "max", "ratio"]
        if args.raw_driver:
            header += ["raw/reference"]
    rows = []
    for scale in args.scales:
        entry = by_scale[str(scale)]
        h = entry["hubstore"]
        row = [f"{scale:,}", _rate(h["min"]), _rate(h["median"]), _rate(h["max"])]
        if "raw_driver" in entry:
            w = entry["raw_driver"]
            row += [_rate(w["min"]), _rate(w["median"]), _rate(w["max"]),
                    f"{entry['share_of_raw']:.2f}"]
        if "reference" in entry:
            r = entry["reference"]
            row += [_rate(r["min"]), _rate(r["median"]), _rate(r["max"]), _ratio(entry["ratio"])]
            if "raw_ratio" in entry:
                row += [_ratio(entry["raw_ratio"])]
        rows.append(row)
    lines = [f"whole hub, {args.agents} agents: agent-seconds served per wall second",
             format_table(header, rows)]
    if args.raw_driver:
        lines.append("raw sqlite3: the polls, audit_log calls and heartbeats on Python's "
                     "sqlite3 alone, with hubstore's own statements (RawDriverHub)")
    for scale in args.scales:
        for run in by_scale[str(scale)]["hubstore_runs"]:
            if "rss_after_warmup_bytes" in run:
                lines.append(
                    f"RSS ({scale:,} rows, {run['ops']:,} calls): after warm-up "
                    f"{_mib(run['rss_after_warmup_bytes'])}, end {_mib(run['rss_bytes'])}, "
                    f"peak {_mib(run['rss_peak_bytes'])}: {run['rss_growth']:+.1%} "
                    f"({'flat' if run['rss_flat'] else 'NOT flat'}, within 10%)")
    emit(payload, "\n".join(lines), args.json_only)


# --- claim mode: P processes compete for J queued jobs of one worker


@dataclass(frozen=True)
class ClaimReport:
    index: int
    job_ids: list[str]
    error: str | None


def claim_loop(store: HubStore) -> list[str]:
    """Claim and finish jobs of CLAIM_WORKER until none is left; the ids claimed."""
    job_ids: list[str] = []
    while (job := store.claim_next_assign(CLAIM_WORKER)) is not None:
        store.report_assign_result(
            job.job_id,
            "succeeded",
            worker_agent=CLAIM_WORKER,
            attempt=job.attempt,
            result={"ok": 1},
        )
        job_ids.append(job.job_id)
    return job_ids


def raw_claim_loop(url: str, connected: Callable[[], None]) -> list[str]:
    """claim_loop on psycopg alone: hubstore's own claim and routine-finish statements
    (compiled from its own), prepared, in autocommit, with nothing around them (no
    validation, no pool, no unit of work, no objects: the rows' job id and attempt only).
    An anchor: about the most any Python client could do with these statements."""
    import psycopg

    from hubstore.services.assign_hub import _CLAIM, _finish_with_event

    dialect = create_engine(url).dialect  # the URL's own (psycopg), as hubstore compiles
    claim_sql, _, claim_bound = driver_statement(_CLAIM, dialect)
    finish_sql, _, finish_bound = driver_statement(
        _finish_with_event(dialect_for("postgresql"), False), dialect)
    names = list(table_of(AssignJob).c.keys())
    at_id, at_attempt = names.index("job_id"), names.index("attempt")
    job_ids: list[str] = []
    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute("SELECT 1")
        connected()
        while True:
            row = conn.execute(claim_sql, {**claim_bound, "p_worker": CLAIM_WORKER,
                                           "p_now": now_ms()}, prepare=True).fetchone()
            if row is None:
                return job_ids
            finished = conn.execute(finish_sql, {
                **finish_bound, "p_job_id": row[at_id], "p_worker": CLAIM_WORKER,
                "p_attempt": row[at_attempt], "p_status": "succeeded",
                "p_result": json.dumps({"ok": 1}), "p_error": None, "p_now": now_ms(),
                "m_id": uuidv7(), "m_corr": uuidv7(), "m_trace": uuidv7()},
                prepare=True).fetchone()
            assert finished is not None, f"job {row[at_id]} was not finished"
            job_ids.append(row[at_id])


#: The bare queue of the --claim --raw-driver run: a job table with its key and the one
#: partial index a claim needs, no triggers, no event; claimed and finished in two
#: autocommit statements as hubstore's are. The least two commits per job cost here.
BARE_TABLE = "bench_bare_jobs"
_BARE_CLAIM = (f"UPDATE {BARE_TABLE} SET status = 'running' WHERE job_id = (SELECT job_id "
               f"FROM {BARE_TABLE} WHERE status = 'queued' ORDER BY priority DESC, job_id "
               "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING job_id")
_BARE_FINISH = (f"UPDATE {BARE_TABLE} SET status = 'succeeded', result = %s::jsonb "
                "WHERE job_id = %s AND status = 'running'")


def _conninfo(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as libpq takes it."""
    return make_url(url).set(drivername="postgresql", query={}).render_as_string(
        hide_password=False)


def create_bare_jobs(url: str, jobs: int) -> list[str]:
    """The bare queue's table, made anew with ``jobs`` queued jobs; their ids."""
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {BARE_TABLE}")
        conn.execute(f"CREATE TABLE {BARE_TABLE} (job_id text PRIMARY KEY, status text NOT "
                     "NULL, priority int NOT NULL DEFAULT 5, result jsonb)")
        conn.execute(f"CREATE INDEX ON {BARE_TABLE} (priority DESC, job_id) "
                     "WHERE status = 'queued'")
        ids = [uuidv7() for _ in range(jobs)]
        with conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {BARE_TABLE} (job_id, status) VALUES (%s, "
                               "'queued')", [(job_id,) for job_id in ids])
        conn.execute(f"ANALYZE {BARE_TABLE}")
    return ids


def bare_statuses(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        return {status: count for status, count in conn.execute(
            f"SELECT status, count(*) FROM {BARE_TABLE} GROUP BY status")}


def bare_claim_loop(url: str, connected: Callable[[], None]) -> list[str]:
    """claim_loop on the bare queue, psycopg alone, prepared, in autocommit."""
    import psycopg

    job_ids: list[str] = []
    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute("SELECT 1")
        connected()
        while (row := conn.execute(_BARE_CLAIM, prepare=True).fetchone()) is not None:
            done = conn.execute(_BARE_FINISH, ('{"ok": 1}', row[0]), prepare=True)
            assert done.rowcount == 1, f"job {row[0]} was not finished"
            job_ids.append(row[0])
    return job_ids


def claim_worker(index: int, url: str, ready: Any, start: Any, results: Any,
                 lane: str = "hubstore") -> None:
    """Child process: open its own store, wait for the start signal, claim until empty
    (lane "raw": raw_claim_loop, "bare": bare_claim_loop, each on a psycopg connection
    of its own).

    Sends a plain dict (index, job_ids, error) back: a class defined in this script
    would not unpickle in the parent, whose main module has another name.
    """
    job_ids: list[str] = []
    error: str | None = None
    signalled = False

    def connected() -> None:
        nonlocal signalled
        ready.release()
        signalled = True
        start.wait()

    try:
        if lane == "raw":
            job_ids = raw_claim_loop(url, connected)
        elif lane == "bare":
            job_ids = bare_claim_loop(url, connected)
        else:
            with HubStore.open(url) as store:
                store.get_hub_stats()  # connect before the start signal
                connected()
                job_ids = claim_loop(store)
    except Exception as exc:  # reported to the parent, which fails the run
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    if not signalled:
        ready.release()
    results.put({"index": index, "job_ids": job_ids, "error": error})


def create_claim_jobs(store: HubStore, jobs: int) -> list[str]:
    ids: list[str] = []
    for first in range(0, jobs, PRELOAD_UNIT_ROWS):
        with store.unit_of_work() as uow:
            for k in range(first, min(jobs, first + PRELOAD_UNIT_ROWS)):
                job = uow.create_assign(
                    supervisor_agent="lead", worker_agent=CLAIM_WORKER, task=f"claim{k}"
                )
                ids.append(job.job_id)
    return ids


def final_statuses(store: HubStore, ids: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    with store.unit_of_work() as uow:
        for job_id in ids:
            job = uow.get_assign(job_id)
            status = "missing" if job is None else job.status
            counts[status] = counts.get(status, 0) + 1
    return counts


def run_claim_processes(url: str, processes: int, lane: str = "hubstore"
                        ) -> tuple[list[ClaimReport], float]:
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    start = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(target=claim_worker, args=(k, url, ready, start, results, lane))
        for k in range(processes)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=CLAIM_TIMEOUT_S):
                raise RuntimeError("a claiming process did not start")
        started = time.perf_counter()
        start.set()
        raw = [results.get(timeout=CLAIM_TIMEOUT_S) for _ in procs]
        wall = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.join(timeout=CLAIM_TIMEOUT_S)
    reports = [ClaimReport(r["index"], r["job_ids"], r["error"]) for r in raw]
    return sorted(reports, key=lambda r: r.index), wall


def sqlite_commits(statements: Sequence[str]) -> int:
    """Commits in a SQLite statement trace: each COMMIT, and each write run outside a
    transaction (autocommit: the statement commits itself)."""
    commits, open_transaction = 0, False
    for statement in statements:
        word = statement.split(None, 1)[0].upper() if statement.strip() else ""
        if word == "BEGIN":
            open_transaction = True
        elif word in ("COMMIT", "END", "ROLLBACK"):
            commits += word != "ROLLBACK"
            open_transaction = False
        elif not open_transaction and word not in ("SELECT", "PRAGMA", "SAVEPOINT"):
            commits += 1
    return commits


class StatementCounter:
    """Counts what one process sends to the database, below SQLAlchemy.

    PostgreSQL: libpq's own trace of every connection (psycopg ``pgconn.trace``): each
    frontend Query or Execute message is a statement (BEGIN, COMMIT and the pool's
    pre-ping included), each ReadyForQuery from the server ends a round trip, and one
    that says the server is idle again after statements ends a transaction (a COMMIT or
    an autocommit statement: the commits, rolled-back transactions included). SQLite:
    sqlite3's trace callback, one call per statement the library runs (BEGIN and COMMIT
    included, trigger bodies not; a write outside a transaction is a commit of its own);
    SQLite has no round trips (it runs in the process).
    Only pool "connect" listeners are added: no execution event listener, so the store
    runs the same code paths as in the timed run.
    """

    def __init__(self, engine: Any, scratch: Path) -> None:
        self.dialect = engine.dialect.name
        self.scratch = scratch
        self.traced: list[tuple[Any, Path, Any]] = []
        self.sqlite_statements: list[str] = []
        self._offsets: dict[Path, int] = {}
        event.listen(engine, "connect", self._on_connect)
        engine.dispose()  # connections made before the listener are not traced

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        if self.dialect == "sqlite":
            dbapi_conn.set_trace_callback(self.sqlite_statements.append)
            return
        path = self.scratch / f"libpq-trace-{len(self.traced)}.txt"
        handle = open(path, "w")  # noqa: SIM115 - closed in totals()
        self._trace(dbapi_conn, handle)
        self.traced.append((dbapi_conn, path, handle))

    def start(self) -> None:
        """Count from here on."""
        self.sqlite_statements.clear()
        for conn, path, handle in self.traced:
            if conn.closed:
                continue
            conn.pgconn.untrace()  # flushes libpq's buffer, so the size is all of it so far
            self._offsets[path] = path.stat().st_size
            self._trace(conn, handle)

    @staticmethod
    def _trace(conn: Any, handle: Any) -> None:
        from psycopg import pq

        conn.pgconn.trace(handle.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def totals(self) -> dict[str, int]:
        if self.dialect == "sqlite":
            # Python's sqlite3 reports each statement a trigger runs as its outer one
            # again: a repeat of the statement just before is not one of its own.
            executed = [s for k, s in enumerate(self.sqlite_statements)
                        if not s.startswith("--")
                        and (k == 0 or s != self.sqlite_statements[k - 1])]
            return {"statements": len(executed), "commits": sqlite_commits(executed)}
        statements = round_trips = commits = 0
        for conn, path, handle in self.traced:
            if not conn.closed:
                conn.pgconn.untrace()  # flushes libpq's buffer
            handle.close()
            with open(path) as trace:
                trace.seek(self._offsets.get(path, 0))
                ran = False  # a statement since the server was last idle
                for line in trace:
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) < 3:
                        continue
                    if parts[0] == "F" and parts[2] in ("Query", "Execute"):
                        statements += 1
                        ran = True
                    elif parts[0] == "B" and parts[2] == "ReadyForQuery":
                        round_trips += 1
                        # Idle again after statements: a transaction ended (a COMMIT, or
                        # an autocommit statement, which is its own transaction).
                        if ran and parts[-1].strip() == "I":
                            commits += 1
                            ran = False
        return {"statements": statements, "round_trips": round_trips, "commits": commits}


def count_per_job(url: str, jobs: int, scratch: Path) -> dict[str, Any]:
    """Statements (and on PostgreSQL round trips) per job of one claiming process."""
    with HubStore.open(url) as store:
        counter = StatementCounter(store.engine, scratch)
        ids = create_claim_jobs(store, jobs)
        counter.start()
        claimed = claim_loop(store)
        totals = counter.totals()
    counted = len(claimed)
    per_job: dict[str, Any] = {
        name: round(value / counted, 2) if counted else None for name, value in totals.items()}
    per_job["jobs"] = counted
    per_job["all_claimed"] = sorted(claimed) == sorted(ids)
    per_job["method"] = (
        "libpq trace of each connection of one claiming process (Query/Execute messages = "
        "statements, ReadyForQuery = round trips), after the timed run"
        if store.engine.dialect.name == "postgresql" else
        "sqlite3 trace callback of one claiming process (statements the library ran), "
        "after the timed run")
    return per_job


def claim_once(args: argparse.Namespace, url: str, log: Callable[[str], None],
               lane: str = "hubstore") -> dict[str, Any]:
    """One timed claim run on the empty database at ``url``, with its checks: the jobs
    made and checked through hubstore, claimed and finished by hubstore or (lane "raw")
    raw_claim_loop; lane "bare": the bare queue's own jobs and loop."""
    log(f"database: {display_url(url)}; creating {args.jobs:,} jobs")
    if lane == "bare":
        ids = create_bare_jobs(url, args.jobs)
        log(f"  {args.processes} bare-queue processes claiming")
        reports, wall = run_claim_processes(url, args.processes, lane)
        statuses = bare_statuses(url)
    else:
        with HubStore.open(url, auto_migrate=True) as store:
            ids = create_claim_jobs(store, args.jobs)
            log(f"  {args.processes} {'raw psycopg ' if lane == 'raw' else ''}processes "
                "claiming")
            reports, wall = run_claim_processes(url, args.processes, lane)
            statuses = final_statuses(store, ids)
    claimed = [job_id for report in reports for job_id in report.job_ids]
    checks = {
        "claimed_total": len(claimed),
        "claimed_once": len(claimed) == len(set(claimed)),
        "all_claimed": len(claimed) == args.jobs and set(claimed) == set(ids),
        "all_succeeded": statuses == {"succeeded": args.jobs},
    }
    log(f"  {args.jobs / wall:,.1f} jobs/s")
    return {"jobs_per_s": round(args.jobs / wall, 1), "wall_seconds": round(wall, 3),
            "per_process": [len(r.job_ids) for r in reports], "statuses": statuses,
            "checks": checks, "errors": [f"process {r.index}: {r.error}"
                                         for r in reports if r.error]}


def run_claim(args: argparse.Namespace, target: Target, log: Callable[[str], None]) -> int:
    """``--repeat`` timed runs, each on a freshly emptied database; then the statements
    per job of one process. Every run must claim each job exactly once."""
    url = target.fresh()
    if _is_sqlite(url) and _sqlite_path(url) is None:
        raise SystemExit("--claim needs a database that several processes can open")
    runs = []
    raw_runs = []
    bare_runs = []
    for k in range(args.repeat):
        if k:
            url = target.fresh()
        runs.append(claim_once(args, url, log))
        if args.raw_driver:  # alternating with hubstore's runs, each on an emptied database
            url = target.fresh()
            bare_runs.append(claim_once(args, url, log, lane="bare"))
            url = target.fresh()  # (last: the per-job count below runs on hubstore's schema)
            raw_runs.append(claim_once(args, url, log, lane="raw"))
    failed = [run for run in [*runs, *raw_runs, *bare_runs]
              if run["errors"] or not all(v for n, v in run["checks"].items()
                                          if n != "claimed_total")]
    shown = failed[0] if failed else runs[-1]
    errors = [f"run {k + 1}, {error}" for k, run in enumerate(runs) for error in run["errors"]]
    errors += [f"{label} run {k + 1}, {error}"
               for label, lane in (("raw psycopg", raw_runs), ("bare queue", bare_runs))
               for k, run in enumerate(lane) for error in run["errors"]]
    ok = not failed
    checks = shown["checks"]
    per_job = count_per_job(url, min(args.jobs, COUNTED_JOBS), target.workdir()) if ok else {}
    rates = [run["jobs_per_s"] for run in runs]
    payload = {
        "mode": "claim",
        "url": display_url(url),
        "processes": args.processes,
        "jobs": args.jobs,
        "repeat": args.repeat,
        "jobs_per_s": round(statistics.median(rates), 1),
        "jobs_per_s_spread": spread(rates),
        "runs": runs,
        "wall_seconds": shown["wall_seconds"],
        "per_process": shown["per_process"],
        "statuses": shown["statuses"],
        "checks": checks,
        "errors": errors,
        "ok": ok,
        "per_job": per_job,
    }
    if raw_runs:
        raw_rates = [run["jobs_per_s"] for run in raw_runs]
        bare_rates = [run["jobs_per_s"] for run in bare_runs]
        payload.update({
            "raw_driver_runs": raw_runs, "raw_jobs_per_s_spread": spread(raw_rates),
            "share_of_raw": float(
                f"{statistics.median(rates) / statistics.median(raw_rates):.4g}"),
            "bare_queue_runs": bare_runs, "bare_jobs_per_s_spread": spread(bare_rates),
            "raw_share_of_bare": float(
                f"{statistics.median(raw_rates) / statistics.median(bare_rates):.4g}")})
    rows = [[f"{label}run {k + 1}", f"{run['jobs_per_s']:,.1f}",
             " ".join(f"{n:,}" for n in run["per_process"]),
             "yes" if run["checks"]["claimed_once"] and run["checks"]["all_succeeded"]
             else "NO"]
            for label, lane in (("", runs), ("raw psycopg ", raw_runs),
                                ("bare queue ", bare_runs))
            for k, run in enumerate(lane)]
    table = format_table(["run", "jobs/s", "jobs per process", "each once"], rows)
    rate = spread(rates)
    summary = (
        f"{args.jobs:,} jobs, {args.processes} processes, {args.repeat} runs: "
        f"{rate['median']:,.1f} jobs/s median (min {rate['min']:,.1f}, max "
        f"{rate['max']:,.1f}); claimed once: {checks['claimed_once']}, "
        f"all succeeded: {checks['all_succeeded']}"
    )
    lines = [table, "", summary, *errors]
    if raw_runs:
        raw_rate = payload["raw_jobs_per_s_spread"]
        lines.append(
            f"raw psycopg, hubstore's two statements with nothing around them: "
            f"{raw_rate['median']:,.1f} jobs/s median (min {raw_rate['min']:,.1f}, max "
            f"{raw_rate['max']:,.1f}); hubstore/raw {payload['share_of_raw']:.2f}")
        bare_rate = payload["bare_jobs_per_s_spread"]
        lines.append(
            f"bare queue (a key and one partial index, no triggers, no event), psycopg "
            f"alone: {bare_rate['median']:,.1f} jobs/s median (min {bare_rate['min']:,.1f}, "
            f"max {bare_rate['max']:,.1f}); raw/bare {payload['raw_share_of_bare']:.2f}")
    if per_job:
        trips = per_job.get("round_trips")
        lines.append(f"per job: {per_job['statements']} statements"
                     + (f", {trips} round trips" if trips is not None else "")
                     + f", {per_job['commits']} commits ({per_job['method']})")
    emit(payload, "\n".join(lines), args.json_only)
    return 0 if ok else 1


# --------------------------------------------------------------------------- command line


def _count_arg(value: str) -> int:
    number = int(value.replace("_", "").replace(",", ""))
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return number


def _workload_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(WORKLOADS)}"
        )
    return names


def _scale_list(value: str) -> list[int]:
    scales = [_count_arg(part) for part in value.split(",") if part.strip()]
    if not scales:
        raise argparse.ArgumentTypeError("expected a comma-separated list of row counts")
    return scales


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="workloads: " + ", ".join(WORKLOADS),
    )
    parser.add_argument("--url", help="SQLAlchemy URL (default: new SQLite file in a temp dir)")
    parser.add_argument(
        "--reset",
        action="store_true",
        help="empty a non-empty target first (PostgreSQL: DROP SCHEMA public "
        "CASCADE; CREATE SCHEMA public; SQLite: delete the file)",
    )
    parser.add_argument(
        "--preload",
        type=_count_arg,
        default=0,
        metavar="N",
        help="background messages loaded before timing (default 0)",
    )
    parser.add_argument(
        "-n",
        type=_count_arg,
        default=1000,
        metavar="OPS",
        help="operations per workload (default 1000)",
    )
    parser.add_argument(
        "--repeat",
        type=_count_arg,
        default=3,
        metavar="R",
        help="runs per workload (--claim: timed claim runs, each on an emptied "
        "database); the median is reported (default 3)",
    )
    parser.add_argument(
        "--workloads",
        type=_workload_list,
        default=None,
        help="comma-separated workloads (default: all)",
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="fresh database per --scales value; default workloads " + ",".join(SCALING_WORKLOADS),
    )
    parser.add_argument(
        "--scales",
        type=_scale_list,
        default=None,
        help="background rows per scale (default 10000,100000,1000000; --hub: 0,100000,1000000)",
    )
    parser.add_argument(
        "--claim", action="store_true", help="multi-process claim_next_assign benchmark"
    )
    parser.add_argument(
        "--processes",
        type=_count_arg,
        default=4,
        metavar="P",
        help="claiming processes (default 4)",
    )
    parser.add_argument(
        "--jobs", type=_count_arg, default=2000, metavar="J", help="jobs to claim (default 2000)"
    )
    parser.add_argument(
        "--reference",
        metavar="HUB_DIR",
        default=None,
        help="also run the workloads through the reference store in HUB_DIR (store.mjs, "
        "reflexion.mjs; ../shared/reference/setup.sh DIR makes one), under node, side by side",
    )
    parser.add_argument(
        "--hub", action="store_true",
        help="whole-hub workload: agents served in real time per --scales history size "
        "(default " + ",".join(str(s) for s in HUB_SCALES) + ")",
    )
    parser.add_argument(
        "--agents", type=_count_arg, default=100, metavar="N",
        help="--hub: simulated agents (default 100; a multiple of 100 keeps every second alike)",
    )
    parser.add_argument(
        "--seconds", type=_count_arg, default=600, metavar="S",
        help="--hub: simulated seconds per run at most (default 600)",
    )
    parser.add_argument(
        "--budget", type=float, default=20.0, metavar="WALL_S",
        help="--hub: wall seconds per run at most (default 20; whole simulated seconds)",
    )
    parser.add_argument(
        "--ops", type=_count_arg, default=None, metavar="CALLS",
        help="--hub: run until this many store calls instead (no budget), and report "
        "RSS after warm-up (the first tenth) against the end",
    )
    parser.add_argument(
        "--raw-driver", action="store_true",
        help="SQLite: also run heartbeat, audit_log and poll_for_agent (standard run; "
        "with --hub, the mix's) on Python's sqlite3 alone; --claim on PostgreSQL: also "
        "claim and finish on psycopg alone. hubstore's own statements with nothing "
        "around them: what the driver, the layout and the statements allow",
    )
    parser.add_argument(
        "--async", dest="async_", action="store_true",
        help="also time the workloads through hubstore.aio.AsyncHubStore (skipped with a "
        "note when it is not importable)",
    )
    parser.add_argument(
        "--async-tasks", type=int, default=1, metavar="T",
        help="--async: share each workload's calls among T concurrent tasks (default 1: "
        "one call at a time, as the sync run makes them)",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the temporary SQLite files")
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if sum((args.scaling, args.claim, args.hub)) > 1:
        parser.error("--scaling, --claim and --hub are separate modes")
    if args.n < 1 or args.repeat < 1:
        parser.error("-n and --repeat must be at least 1")
    if args.claim and args.processes < 1:
        parser.error("--processes must be at least 1")
    if args.hub and (args.agents < 1 or args.seconds < 1 or args.budget <= 0):
        parser.error("--agents, --seconds and --budget must be positive")
    if args.raw_driver and args.scaling:
        parser.error("--raw-driver goes with the standard run, --hub or --claim")
    if args.raw_driver:
        backend = make_url(args.url).get_backend_name() if args.url else "sqlite"
        if not args.claim and backend != "sqlite":
            parser.error("--raw-driver (standard run, --hub) runs on SQLite files only")
        if args.claim and backend != "postgresql":
            parser.error("--claim --raw-driver runs on PostgreSQL (psycopg) only")
    if args.reference is not None and (args.scaling or args.claim):
        parser.error("--reference goes with the standard run and --hub")
    if args.scales is None:
        args.scales = list(HUB_SCALES if args.hub else DEFAULT_SCALES)
    if args.workloads is None:
        args.workloads = list(SCALING_WORKLOADS if args.scaling else WORKLOADS)
    if args.reference is not None:
        try:
            args.reference = Reference.check(args.reference)
        except ReferenceFailed as exc:
            parser.error(f"--reference: {exc}")
    return args


def make_logger(quiet: bool) -> Callable[[str], None]:
    def log(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return log


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log = make_logger(args.json_only)
    target = Target(url=args.url, reset=args.reset, keep=args.keep_db)
    try:
        if args.claim:
            return run_claim(args, target, log)
        if args.scaling:
            run_scaling(args, target, log)
        elif args.hub:
            run_hub_mode(args, target, log)
        else:
            run_standard(args, target, log)
        return 0
    except NonEmptyDatabase as exc:
        print(f"bench_store: refusing to run: {exc}", file=sys.stderr)
        return 2
    except ReferenceFailed as exc:
        print(f"bench_store: {exc}", file=sys.stderr)
        return 3
    finally:
        target.cleanup()


if __name__ == "__main__":
    sys.exit(main())
