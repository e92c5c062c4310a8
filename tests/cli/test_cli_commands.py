"""Every ``hubstore`` command run as a user runs it: a process of its own per command
(``python -m hubstore`` forked from a process that imported the command line once:
tests/cli/forked_cli.py; the entry points themselves as plain subprocesses), real files
and databases, on SQLite and on PostgreSQL where the command applies; output and exit
status checked."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import pty
import re
import select
import shlex
import sqlite3
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, __version__, migrations
from hubstore.cli import main
from hubstore.cli.common import when
from hubstore.engine import ENV_URL
from hubstore.ids import now_ms
from hubstore.reflexion import lookup_solution, normalize_error
from hubstore.services import stats
from hubstore.testing.factories import (
    AssignJobFactory,
    DeadLetterFactory,
    MessageFactory,
    MessageInboxFactory,
    ReflexionEntryFactory,
)
from hubstore.types import AssignStatus
from tests.cli.forked_cli import ForkedCli
from tests.conftest import FIXTURES, PostgresDatabases
from tests.helpers import present
from tests.reference_ddl import build_legacy

BIN = Path(sys.executable).parent
HEAD = migrations.head()
DAY = 86_400_000
ERROR = "TypeError: Cannot read property 'x' of undefined"
# As users pipe it (issue 26): 80 columns, stdout a pipe, no colour codes.
ENV = {k: v for k, v in os.environ.items() if k != ENV_URL} | {
    "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


FORKED = ForkedCli()
atexit.register(FORKED.close)


def hubstore(*args: str, url: URL | None = None, stdin: str = "",
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m hubstore ARGS [--url URL]``, as a shell would run it (in a process of
    its own, forked: see tests/cli/forked_cli.py)."""
    extra = ["--url", url.render_as_string(hide_password=False)] if url is not None else []
    return FORKED.run([*args, *extra], env=ENV, stdin=stdin, cwd=cwd)


def file_stamp(url: URL) -> tuple[bytes, int, bytes] | None:
    """A SQLite file's bytes and mtime, and its write-ahead log's bytes (None on
    PostgreSQL): what any write, committed or checkpointed, would change."""
    if url.get_backend_name() != "sqlite":
        return None
    path = Path(str(url.database))
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes(), path.stat().st_mtime_ns, wal.read_bytes() if wal.exists() else b""


def checkpoint(url: URL) -> None:
    """SQLite: move the log into the file, so a reader closing last has nothing to move."""
    if url.get_backend_name() == "sqlite":
        with sqlite3.connect(str(url.database)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def sql(url: URL, *statements: str) -> None:
    """Raw SQL behind the store's back (foreign keys off on SQLite, as pysqlite leaves)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


@pytest.fixture
def read_only(db_url: URL, store: HubStore, request: pytest.FixtureRequest) -> Iterator[None]:
    """PostgreSQL: every new transaction of the test's database is READ ONLY, so a
    command that wrote anything would fail. SQLite: the file's bytes and mtime are
    compared afterwards."""
    checkpoint(db_url)
    before = file_stamp(db_url)
    if db_url.get_backend_name() == "postgresql":
        postgres: PostgresDatabases = request.getfixturevalue("postgres")
        with postgres.admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{db_url.database}" '
                              "SET default_transaction_read_only = on"))
    yield
    assert file_stamp(db_url) == before


# --- -h everywhere ---------------------------------------------------------------------

def _command_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]
    for name, command in main.commands.items():
        paths.append([name])
        paths.extend([name, sub] for sub in getattr(command, "commands", {}))
    return paths


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "hubstore")
def test_dash_h_everywhere(path: list[str]) -> None:
    run = subprocess.run([BIN / "hubstore", *path, "-h"], capture_output=True, text=True,
                         env=ENV, check=False, timeout=60)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.startswith(f"Usage: hubstore {' '.join(path)}".rstrip() + " ")
    assert "-h, --help" in run.stdout
    if path and path != ["db"]:
        assert "--url URL" in run.stdout


def test_version_and_module_entry_points() -> None:
    run = subprocess.run([BIN / "hubstore", "--version"], capture_output=True, text=True,
                         env=ENV, check=False, timeout=60)
    assert (run.returncode, run.stdout) == (0, f"hubstore, version {__version__}\n")
    for module in ("hubstore", "hubstore.cli"):
        run = subprocess.run([sys.executable, "-m", module, "db", "heads"], capture_output=True,
                             text=True, env=ENV | {ENV_URL: "sqlite:////nonexistent/x.db"},
                             check=False, timeout=60)
        assert (run.returncode, run.stderr) == (
            1, "Error: opening of sqlite:////nonexistent/x.db failed: there is no SQLite "
               "database at /nonexistent/x.db\n")


# --- db check ----------------------------------------------------------------------------

def test_check_a_healthy_database_reads_only(db_url: URL, store: HubStore) -> None:
    store.register_agent("codex-1", "codex", topics=["t.a"])
    store.enqueue_message("event", "codex-1", "gemini-1", "t.a", priority=9)
    store.create_assign("lead", "codex-1", task="build")
    DeadLetterFactory.create(message_id=MessageFactory.create().id)
    before = file_stamp(db_url)
    run = hubstore("db", "check", url=db_url)
    shown = db_url.render_as_string(hide_password=True)
    assert (run.returncode, run.stdout, run.stderr) == (
        0, f"{shown}: healthy (revision {HEAD})\n", "")
    assert file_stamp(db_url) == before


#: Damage done by raw SQL, and the one line `db check` prints about it.
DAMAGE: dict[str, tuple[list[str], str]] = {
    "figure": (["UPDATE hub_counters SET value = value + 5 WHERE name = 'messages'"],
               "figures: hub_counters says messages = 7, the rows count 2"),
    "drift": (["DROP INDEX idx_agents_status"],
              "schema: index missing from the database: agents.idx_agents_status"),
    "revision": (["UPDATE alembic_version SET version_num = '0006'"],
                 f"alembic_version: the revision is 0006, the head is {HEAD} "
                 "(run `hubstore db upgrade`)"),
}
SQLITE_DAMAGE: dict[str, tuple[list[str], str]] = {
    "foreign_key": (["INSERT INTO message_inbox (message_id, agent_id, attempts) "
                     "VALUES ('ghost', 'b', 0)"],
                    "foreign key: message_inbox row 3 has no parent row in messages"),
    "check_constraint": (["PRAGMA ignore_check_constraints = 1",
                          "UPDATE agents SET status = 'asleep'"],
                         "check constraint: agents has 1 row(s) breaking ck_agents_status "
                         "(status IN ('online', 'stale', 'offline'))"),
}


@pytest.mark.parametrize("damage", [*DAMAGE, *SQLITE_DAMAGE])
def test_check_reports_each_finding_on_one_line(db_url: URL, store: HubStore,
                                                damage: str) -> None:
    if damage in SQLITE_DAMAGE and db_url.get_backend_name() != "sqlite":
        pytest.skip("PostgreSQL enforces foreign keys and CHECK constraints itself")
    store.register_agent("codex-1", "codex")
    for _ in range(2):
        MessageInboxFactory.create()
    statements, line = (DAMAGE | SQLITE_DAMAGE)[damage]
    sql(db_url, *statements)
    before = file_stamp(db_url)
    run = hubstore("db", "check", url=db_url)
    assert (run.returncode, run.stdout, run.stderr) == (1, line + "\n", "")
    assert file_stamp(db_url) == before


def test_check_lists_every_finding(db_url: URL, store: HubStore) -> None:
    store.register_agent("codex-1", "codex")
    for _ in range(2):
        MessageInboxFactory.create()
    kinds = ["figure", "drift"] + (list(SQLITE_DAMAGE) if db_url.get_backend_name() == "sqlite"
                                   else [])
    damage = {k: (DAMAGE | SQLITE_DAMAGE)[k] for k in kinds}
    sql(db_url, *[s for statements, _ in damage.values() for s in statements])
    run = hubstore("db", "check", url=db_url)
    assert run.returncode == 1
    assert sorted(run.stdout.splitlines()) == sorted(line for _, line in damage.values())


def test_check_of_an_empty_database_says_it_is_not_migrated(empty_url: URL) -> None:
    if empty_url.get_backend_name() == "sqlite":
        sqlite3.connect(str(empty_url.database)).close()
    run = hubstore("db", "check", url=empty_url)
    assert (run.returncode, run.stdout) == (
        1, "alembic_version: none, and no hub tables: not migrated (run `hubstore db "
           f"upgrade` to create them at {HEAD})\n")


# --- db backup ---------------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from hubstore import HubStore
url, stop = sys.argv[1], Path(sys.argv[2])
worst, n = 0.0, 0
with HubStore.open(url) as store:
    while not stop.exists():
        started = time.perf_counter()
        message = store.enqueue_message("event", "w", "r", "t.a", priority=5 + n % 5)
        store.create_assign("lead", "w", task=message.id)
        worst = max(worst, time.perf_counter() - started)
        n += 1
        if n == 50:
            Path(sys.argv[2] + ".ready").touch()
print(n, worst)
"""


def test_backup_is_consistent_while_another_process_writes(tmp_path: Path, db_url: URL) -> None:
    if db_url.get_backend_name() != "sqlite":
        pytest.skip("SQLite's online backup (PostgreSQL: see the pg_dump test)")
    stop, dest = tmp_path / "stop", tmp_path / "backups" / "copy.db"
    dest.parent.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, db_url.render_as_string(hide_password=False), stop],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{stop}.ready").exists():
            assert writer.poll() is None, writer.communicate()
            assert time.monotonic() < deadline, "the writer wrote nothing in 60 s"
            time.sleep(0.05)
        run = hubstore("db", "backup", str(dest), url=db_url)
        time.sleep(0.3)  # the writer goes on after the copy
    finally:
        stop.touch()
        out, errors = writer.communicate(timeout=60)
    assert writer.returncode == 0, errors
    written, worst = int(out.split()[0]), float(out.split()[1])
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"{db_url.render_as_string()}: backed up to {dest} (")
    assert dest.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in dest.parent.iterdir()] == ["copy.db"]  # no partial file left

    with sqlite3.connect(f"{dest.as_uri()}?mode=ro", uri=True) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert copy.execute("PRAGMA foreign_key_check").fetchall() == []
        messages = copy.execute("SELECT count(*) FROM messages").fetchone()[0]
        jobs = copy.execute("SELECT count(*) FROM assign_jobs").fetchone()[0]
        counters = dict(copy.execute(str(stats.FIGURES_WITH_LOG)).fetchall())
    assert 50 <= messages <= written and jobs in (messages, messages - 1)
    assert counters["messages"] == messages and counters["assign_queued"] == jobs
    assert hubstore("db", "check", url=make_url(f"sqlite:///{dest}")).returncode == 0
    assert worst < 2.0, f"a write waited {worst:.2f} s during the backup"
    assert hubstore("db", "backup", str(dest), url=db_url).returncode == 1  # no overwrite
    assert hubstore("db", "backup", str(dest), "--force", url=db_url).returncode == 0


def test_backup_of_postgresql_explains_pg_dump(tmp_path: Path,
                                               postgres: PostgresDatabases) -> None:
    url = make_url("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    run = hubstore("db", "backup", str(tmp_path / "store.dump"), url=url)
    assert run.returncode == 2
    libpq = "postgresql://postgres@127.0.0.1:5432/test"
    assert (f"`pg_dump --format=custom --file {tmp_path / 'store.dump'} '{libpq}'`"
            in run.stderr)
    assert f"pg_restore --dbname '{libpq}'" in run.stderr
    assert list(tmp_path.iterdir()) == []


# --- db prune ----------------------------------------------------------------------------

def test_prune_older_than_30_days(db_url: URL, store: HubStore) -> None:
    now = int(time.time() * 1000)
    old = [MessageFactory.create(created_at_ms=now - 40 * DAY - i, priority=1 + i % 9)
           for i in range(30)]
    new = [MessageFactory.create(created_at_ms=now - 29 * DAY + i) for i in range(10)]
    for message in old[::2] + new[::2]:
        MessageInboxFactory.create(message_id=message.id)
        DeadLetterFactory.create(message_id=message.id)

    run = hubstore("db", "prune", "--older-than", "30d", "--batch-size", "7", url=db_url)
    assert (run.returncode, run.stdout) == (0, "30\n")
    assert "pruning messages" in run.stderr and "30/30" in run.stderr

    kept = {m.id for m in new}
    with store.unit_of_work(write=False) as uow:
        c = uow.connection
        assert set(c.scalars(text("SELECT id FROM messages"))) == kept
        assert set(c.scalars(text("SELECT message_id FROM message_inbox"))) == {
            m.id for m in new[::2]}
        assert set(c.scalars(text("SELECT message_id FROM dead_letters"))) == {
            m.id for m in new[::2]}
    assert store.get_hub_stats()["total_messages"] == 10
    assert store.get_queue_depths()["dlq"] == 5
    assert hubstore("db", "check", url=db_url).returncode == 0  # figures equal the counts

    again = hubstore("db", "prune", "--older-than", "30d", url=db_url)
    assert (again.returncode, again.stdout) == (0, "0\n")
    bad = hubstore("db", "prune", "--older-than", "a month", url=db_url)
    assert bad.returncode == 2 and "write it as 30d, 12h, 15m or 45s" in bad.stderr


# --- inspection ------------------------------------------------------------------------

def _documents(rows: list[Any]) -> Any:
    """What the store returned, as one JSON document reads back."""
    return json.loads(json.dumps([row.to_dict() for row in rows]))


@pytest.fixture
def busy_hub(store: HubStore) -> HubStore:
    store.register_agent("codex-1", "codex", topics=["t.a"], metadata={"ключ": "значение"})
    store.register_agent("gemini-1", "gemini")
    for i in range(4):
        store.enqueue_message("event", "gemini-1", "codex-1", "t.b", payload={"n": i})
    store.enqueue_message("event", "gemini-1", "topic:t.a", "t.a", priority=9)
    jobs: list[tuple[str, AssignStatus]] = [
        ("codex-1", "queued"), ("codex-1", "running"), ("gemini-1", "running"),
        ("codex-1", "failed")]
    for worker, status in jobs:
        store.create_assign("lead", worker, task=f"{worker} {status}", status=status)
    store.add_reflexion(normalize_error(ERROR), ERROR, "guard x")
    ReflexionEntryFactory.create(error_pattern="typeerror: cannot read property x of null",
                                 confidence=0.9)
    return store


def test_stats(db_url: URL, busy_hub: HubStore, read_only: None) -> None:
    figures = {**busy_hub.get_hub_stats(), **busy_hub.get_audit_stats()}
    run = hubstore("stats", "--json", url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout) == figures
    assert figures["total_messages"] == 5 and figures["assign_running"] == 2
    lines = hubstore("stats", url=db_url)  # piped: "figure<TAB>value" lines
    assert lines.returncode == 0
    assert [line.split("\t") for line in lines.stdout.splitlines()] == [
        [name, str(value)] for name, value in figures.items()]


def test_agents(db_url: URL, busy_hub: HubStore, read_only: None) -> None:
    run = hubstore("agents", "--json", url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout) == _documents(busy_hub.list_all_agents())
    lines = hubstore("agents", url=db_url).stdout.splitlines()
    assert len(lines) == 2
    codex = next(line.split("\t") for line in lines if line.startswith("codex-1\t"))
    assert codex[:4] == ["codex-1", "codex", "online", '["t.a"]']


@pytest.mark.parametrize(("options", "expected"), [
    ([], 4), (["--status", "running"], 2), (["--worker", "codex-1"], 3),
    (["--status", "running", "--worker", "codex-1"], 1), (["--status", "succeeded"], 0),
])
def test_jobs(db_url: URL, busy_hub: HubStore, read_only: None, options: list[str],
              expected: int) -> None:
    status = options[options.index("--status") + 1] if "--status" in options else None
    worker = options[options.index("--worker") + 1] if "--worker" in options else None
    jobs = busy_hub.list_assigns(status=status, worker_agent=worker)  # type: ignore[arg-type]
    assert len(jobs) == expected
    run = hubstore("jobs", *options, "--json", url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    documents = json.loads(run.stdout)
    # Every column: the reference's (to_dict()) and hubstore's own, with why and due_ms.
    assert [{k: d[k] for k in job} for d, job in zip(documents, _documents(jobs),
                                                      strict=True)] == _documents(jobs)
    for document, job in zip(documents, jobs, strict=True):
        assert {"limit_key", "unique_key", "not_before_ms", "why", "due_ms"} <= set(document)
        assert document["limit_key"] == job.limit_key
        assert document["why"] == ("" if job.status != "queued" else
                                   f"due: waiting for worker {job.worker_agent!r} to claim it")
    lines = hubstore("jobs", *options, url=db_url).stdout.splitlines()
    assert [line.split("\t")[:3] for line in lines] == [
        [j.job_id, j.status, j.worker_agent] for j in jobs]


def test_jobs_refuses_an_unknown_status(db_url: URL, read_only: None) -> None:
    run = hubstore("jobs", "--status", "runing", url=db_url)
    assert run.returncode == 2 and "'runing' is not one of 'queued'" in run.stderr


def test_messages(db_url: URL, busy_hub: HubStore, read_only: None) -> None:
    run = hubstore("messages", "--agent", "codex-1", "--limit", "3", "--json", url=db_url)
    assert (run.returncode, run.stderr) == (
        0, "note: rows 1-3 shown; more follow: hubstore messages ... --offset 3\n")
    polled = busy_hub.poll_for_agent("codex-1", 3)
    assert len(polled) == 3 and json.loads(run.stdout) == _documents(polled)
    lines = hubstore("messages", "--agent", "codex-1", url=db_url).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [  # its 4 and its topic's 1
        m.id for m in busy_hub.poll_for_agent("codex-1", 20)]
    again = hubstore("messages", "--agent", "codex-1", "--limit", "3", "--json", url=db_url)
    assert again.stdout == run.stdout  # polling marks nothing: the same newest messages


def test_reflexion(db_url: URL, busy_hub: HubStore, read_only: None) -> None:
    error = ERROR
    run = hubstore("reflexion", error, "--json", url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    entries = lookup_solution(busy_hub, error).entries
    assert len(entries) == 1 and json.loads(run.stdout) == _documents(entries)
    lines = hubstore("reflexion", error, url=db_url).stdout.splitlines()
    assert [line.split("\t")[:3] for line in lines] == [
        [entries[0].id, normalize_error(ERROR), "guard x"]]
    none = hubstore("reflexion", "nothing like it", "--json", url=db_url)
    assert (none.returncode, none.stdout) == (0, "[]\n")


# --- migrations ------------------------------------------------------------------------

def test_upgrade_sql_prints_sql_and_touches_nothing(empty_url: URL, tmp_path: Path) -> None:
    run = hubstore("db", "upgrade", "--sql", url=empty_url)
    assert run.returncode == 0, run.stderr
    assert "CREATE TABLE agents" in run.stdout
    assert f"UPDATE alembic_version SET version_num='{HEAD}'" in run.stdout
    if empty_url.get_backend_name() == "sqlite":
        assert list(tmp_path.iterdir()) == []
        return
    engine = create_engine(empty_url)
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == []
    engine.dispose()


def test_upgrade_sql_of_an_existing_file_changes_nothing(db_url: URL) -> None:
    before = file_stamp(db_url)
    run = hubstore("db", "upgrade", "0003", "--sql", url=db_url)
    assert run.returncode == 0 and "CREATE TABLE" in run.stdout
    assert file_stamp(db_url) == before and migrations.current(db_url) == HEAD


def test_downgrade_to_base_asks_first(db_url: URL) -> None:
    shown = db_url.render_as_string(hide_password=True)
    before = file_stamp(db_url)
    no = hubstore("db", "downgrade", "base", url=db_url, stdin="n\n")
    assert no.returncode == 1
    assert "removes every hub table and all their rows. Continue? [y/N]" in no.stderr
    assert f"cancelled: nothing was changed (still at {HEAD})" in no.stderr
    assert migrations.current(db_url) == HEAD and file_stamp(db_url) == before
    silent = hubstore("db", "downgrade", "base", url=db_url)  # no answer at all: no
    assert silent.returncode == 1 and migrations.current(db_url) == HEAD

    yes = hubstore("db", "downgrade", "base", "--yes", url=db_url)
    assert (yes.returncode, yes.stdout) == (0, f"{shown}: downgraded from {HEAD} to base\n")
    assert "Continue?" not in yes.stderr
    assert migrations.current(db_url) is None
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert not {"agents", "messages"} & set(inspect(conn).get_table_names())
    engine.dispose()
    nothing = hubstore("db", "downgrade", "base", url=db_url)
    assert (nothing.returncode, nothing.stdout) == (0, f"{shown}: already at base, nothing to do\n")


def test_downgrade_to_base_with_y(db_url: URL) -> None:
    run = hubstore("db", "downgrade", "base", url=db_url, stdin="y\n")
    assert run.returncode == 0 and run.stdout.endswith(f"downgraded from {HEAD} to base\n")


def test_stamp_heads_and_nothing_to_do(db_url: URL) -> None:
    shown = db_url.render_as_string(hide_password=True)
    assert hubstore("db", "heads", url=db_url).stdout == f"{HEAD} (head) (current)\n"
    run = hubstore("db", "upgrade", url=db_url)
    assert run.stdout == f"{shown}: already at head {HEAD}, nothing to do\n"
    run = hubstore("db", "stamp", "0003", url=db_url)
    assert (run.returncode, run.stdout) == (0, f"{shown}: stamped 0003 (was {HEAD}); "
                                               "no migration ran\n")
    assert hubstore("db", "heads", url=db_url).stdout == f"{HEAD} (head)\n"
    assert hubstore("db", "current", url=db_url).stdout == f"0003 (head is {HEAD})\n"
    assert hubstore("db", "stamp", "0003", url=db_url).stdout == (
        f"{shown}: already stamped 0003, nothing to do\n")
    assert hubstore("db", "stamp", "head", url=db_url).returncode == 0
    assert hubstore("db", "check", url=db_url).returncode == 0


MISSING_ARGS = [["db", "current"], ["db", "heads"], ["db", "history"], ["db", "check"],
                ["db", "stamp", "head"], ["db", "downgrade", "base", "--yes"],
                ["db", "backup", "copy.db"], ["db", "prune", "--older-than", "1d"],
                ["stats"], ["agents"], ["jobs"], ["messages", "--agent", "a"],
                ["reflexion", "TypeError"]]


@pytest.mark.parametrize("args", MISSING_ARGS, ids=" ".join)
def test_a_missing_sqlite_file_is_reported_and_not_created(tmp_path: Path,
                                                           args: list[str]) -> None:
    path = tmp_path / "missing.db"
    run = hubstore(*args, "--url", f"sqlite:///{path}", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.endswith(f"there is no SQLite database at {path}\n")
    assert "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bare_path_is_answered_with_the_fix(tmp_path: Path) -> None:
    run = hubstore("db", "upgrade", "--url", "store.db", cwd=tmp_path)
    assert run.returncode == 2
    assert "(did you mean sqlite:///store.db?)" in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_folders_are_created_under_an_existing_writable_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.db"
    run = hubstore("db", "upgrade", "--url", f"sqlite:///{path}")
    assert run.returncode == 0, run.stderr
    assert run.stderr == f"created the folder {path.parent} (in {tmp_path})\n"
    assert migrations.current(f"sqlite:///{path}") == HEAD


def test_no_folder_under_a_file_or_at_the_top(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    run = hubstore("db", "upgrade", "--url", f"sqlite:///{tmp_path / 'file' / 'sub' / 'x.db'}")
    assert run.returncode == 1
    assert f"{tmp_path / 'file'} is not a writable folder to create it in" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]

    top = Path("/") / f"hubstore-typo-{uuid.uuid4().hex[:8]}"
    run = hubstore("db", "upgrade", "--url", f"sqlite:///{top / 'sub' / 'x.db'}")
    assert run.returncode == 1
    assert "creates folders only inside an existing one" in run.stderr
    assert not top.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_no_folder_under_a_read_only_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    run = hubstore("db", "upgrade", "--url", f"sqlite:///{locked / 'sub' / 'x.db'}")
    assert run.returncode == 1 and "is not a writable folder" in run.stderr
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize(("fixture", "schema", "revision"), [
    ("triflux-7.2.1.db", 3, "0001"), ("triflux-10.17.4.db", 4, "0002")])
def test_adopting_a_triflux_file(tmp_path: Path, fixture: str, schema: int,
                                 revision: str) -> None:
    source = FIXTURES / fixture
    if not source.is_file():
        pytest.skip(f"{source} is not there")
    path = tmp_path / "triflux.db"
    path.write_bytes(source.read_bytes())
    url = make_url(f"sqlite:///{path}")
    before = file_stamp(url)
    check = hubstore("db", "check", url=url)
    assert (check.returncode, check.stdout) == (
        1, f"alembic_version: none: a triflux schema {schema} database, not adopted yet (run "
           f"`hubstore db upgrade` to adopt it as {revision} and upgrade to {HEAD})\n")
    assert file_stamp(url) == before
    run = hubstore("db", "upgrade", url=url)
    assert (run.returncode, run.stdout) == (
        0, f"sqlite:///{path}: adopted triflux schema {schema} as {revision}, "
           f"upgraded to {HEAD}\n")
    check = hubstore("db", "check", url=url)
    assert (check.returncode, check.stdout) == (0, f"sqlite:///{path}: healthy (revision {HEAD})\n")
    agents = json.loads(hubstore("agents", "--json", url=url).stdout)
    assert "codex-1" in {a["agent_id"] for a in agents}


@pytest.mark.parametrize("schema", [3, 4])
def test_adopting_a_triflux_database_on_both_dialects(empty_url: URL, schema: int) -> None:
    """The reference's own DDL (tests/reference_ddl.py), beside another application's
    tables: checked, adopted, checked again."""
    build_legacy(empty_url, schema)
    revision = migrations.LEGACY_REVISIONS[str(schema)]
    shown = empty_url.render_as_string(hide_password=True)
    check = hubstore("db", "check", url=empty_url)
    assert check.returncode == 1
    assert f"a triflux schema {schema} database, not adopted yet" in check.stdout
    run = hubstore("db", "upgrade", url=empty_url)
    assert (run.returncode, run.stdout) == (
        0, f"{shown}: adopted triflux schema {schema} as {revision}, upgraded to {HEAD}\n")
    check = hubstore("db", "check", url=empty_url)
    assert (check.returncode, check.stdout) == (0, f"{shown}: healthy (revision {HEAD})\n")


# --- issue 26: the commands as users ran them ------------------------------------------
# Each test does what the users reported doing: the command run at 80 columns with stdout
# piped (into grep, when that is what they did) or a terminal, on SQLite and PostgreSQL
# where it reads a hub.

SOLUTION = ("Guard every property read on a value that may be undefined: "
            + "check `x` before reading `x.y`, " * 12 + "then retry the step.")
PAYLOAD = {"text": "first line\nsecond\tline [red]not markup[/red] " + "lorem ipsum " * 60,
           "path": "C:\\tmp\\hub", "n": list(range(40)), "ключ": "значение"}


def piped(*args: str, grep: str, url: URL) -> subprocess.CompletedProcess[str]:
    """``python -m hubstore ARGS --url URL | grep -F -- GREP``, run by bash at 80 columns:
    its stdout is what grep found, one line a match."""
    command = [sys.executable, "-m", "hubstore", *args, "--url",
               url.render_as_string(hide_password=False)]
    line = f"set -o pipefail; {shlex.join(command)} | grep -F -- {shlex.quote(grep)}"
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=ENV,
                          timeout=300, check=False)


@pytest.fixture
def wordy_hub(store: HubStore) -> HubStore:
    """Long ids, a long payload with a newline and a tab, a long solution."""
    store.register_agent("codex-1", "codex", topics=["t.a"])
    for i in range(3):
        store.create_assign("lead-supervisor", "codex-1",
                            task=f"job {i}: " + "rebuild the index and report back " * 5)
    store.enqueue_message("event", "lead-supervisor", "codex-1", "t.b", payload=PAYLOAD)
    store.enqueue_message("event", "lead-supervisor", "codex-1", "t.b", payload={"n": 1})
    store.add_reflexion(normalize_error(ERROR), ERROR, SOLUTION)
    store.add_reflexion("typeerror: two lines", "TypeError: two lines",
                        "first line of the fix\nsecond line of the fix")
    return store


def test_piped_jobs_keep_each_uuid_on_one_line(db_url: URL, wordy_hub: HubStore,
                                               read_only: None) -> None:
    jobs = wordy_hub.list_assigns()
    for job in jobs:
        run = piped("jobs", grep=job.job_id, url=db_url)
        assert (run.returncode, run.stderr) == (0, "")
        assert run.stdout.split("\t") == [
            job.job_id, "queued", "codex-1", "lead-supervisor", "", job.task, "1",
            datetime.fromtimestamp(job.updated_at_ms / 1000, UTC).strftime(
                "%Y-%m-%d %H:%M:%S"), "",  # (due: empty, due now)
            "due: waiting for worker 'codex-1' to claim it\n"]
    lines = hubstore("jobs", url=db_url).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [j.job_id for j in jobs]


def test_piped_messages_keep_each_payload_on_one_line(db_url: URL, wordy_hub: HubStore,
                                                      read_only: None) -> None:
    """The payload is written as --json writes it (its newline and tab as \\n and \\t),
    whole, on the message's own line; one line a message."""
    message = wordy_hub.poll_for_agent("codex-1")[1]
    assert message.payload == PAYLOAD
    payload = json.dumps(message.payload, ensure_ascii=False)  # (JSONB orders its keys)
    run = piped("messages", "--agent", "codex-1", grep=payload, url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == "\t".join([
        message.id, "event", "lead-supervisor", "codex-1", "t.b", "5", "queued",
        datetime.fromtimestamp(message.created_at_ms / 1000, UTC).strftime(
            "%Y-%m-%d %H:%M:%S"), payload]) + "\n"
    assert piped("messages", "--agent", "codex-1", grep="[red]not markup[/red]",
                 url=db_url).stdout == run.stdout
    assert len(hubstore("messages", "--agent", "codex-1", url=db_url).stdout
               .splitlines()) == 2


def test_piped_reflexion_keeps_the_whole_solution(db_url: URL, wordy_hub: HubStore,
                                                  read_only: None) -> None:
    run = piped("reflexion", ERROR, grep=SOLUTION, url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    entry = lookup_solution(wordy_hub, ERROR).entries[0]
    assert run.stdout.split("\t")[:3] == [entry.id, normalize_error(ERROR), SOLUTION]
    two = piped("reflexion", "TypeError: two lines", grep="second line of the fix", url=db_url)
    assert two.returncode == 0
    assert two.stdout.split("\t")[2] == "first line of the fix\\nsecond line of the fix"


def in_terminal(*args: str, url: URL, columns: int) -> str:
    """``hubstore ARGS --url URL`` with stdout a terminal of ``columns`` columns (a pty):
    what it showed, without escape sequences."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in ENV.items() if k not in ("COLUMNS", "LINES")} | {
        "TERM": "xterm-256color"}  # (rich takes a dumb terminal for 80 columns)
    command = [sys.executable, "-m", "hubstore", *args, "--url",
               url.render_as_string(hide_password=False)]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower,
                             stderr=subprocess.PIPE, env=env)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert child.wait(timeout=300) == 0
    assert child.stderr is not None and child.stderr.read() == b""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode()).replace("\r\n", "\n")


def test_a_terminal_table_never_splits_an_id(db_url: URL, wordy_hub: HubStore,
                                             read_only: None) -> None:
    """80 columns cannot hold a job's row: one block of lines per job, without the
    optional lines that are empty. 120 hold a table without the optional columns, which
    says what it left out; 200, the whole table. Either way each id is whole on one
    line, and nothing is cut short."""
    jobs = wordy_hub.list_assigns()
    narrow = in_terminal("jobs", url=db_url, columns=80)
    assert narrow.startswith("assign jobs (3)\n")
    assert max(len(line) for line in narrow.splitlines()) <= 80
    for job in jobs:
        assert re.search(rf"^job +{job.job_id} *$", narrow, re.MULTILINE)
    assert "due (UTC)" not in narrow  # (empty: no line)
    assert len(re.findall(r"^why +due: waiting for worker 'codex-1' to claim it *$", narrow,
                          re.MULTILINE)) == 3
    middle = in_terminal("jobs", url=db_url, columns=120)
    assert max(len(line) for line in middle.splitlines()) <= 120
    assert "┃ job " in middle and "┃ task " in middle and "┃ why " in middle
    assert "┃ supervisor " not in middle and "too narrow for supervisor" in middle
    for job in jobs:
        assert re.search(rf"^│ {job.job_id} │ queued +│ codex-1 ", middle, re.MULTILINE)
    wide = in_terminal("jobs", url=db_url, columns=200)
    assert "┃ job " in wide and "┃ task " in wide
    for job in jobs:
        assert re.search(rf"^│ {job.job_id} │ queued +│ codex-1 ", wide, re.MULTILINE)
    messages = in_terminal("messages", "--agent", "codex-1", url=db_url, columns=80)
    payload = json.dumps(wordy_hub.poll_for_agent("codex-1")[1].payload, ensure_ascii=False)
    assert "".join(payload.split()) in "".join(messages.split())  # folded, never cut
    assert "[red]not markup[/red]" in messages  # data, not rich markup
    for message in wordy_hub.poll_for_agent("codex-1"):
        assert re.search(rf"^id +{message.id} *$", messages, re.MULTILINE)


def _created_jobs(store: HubStore, count: int) -> list[str]:
    """``count`` new jobs; their ids in list_assigns' order (at most its 100)."""
    with store.unit_of_work() as uow:
        for i in range(count):
            uow.create_assign("lead", "codex-1", task=f"t{i}")
    return [job.job_id for job in store.list_assigns(limit=100)]


def test_jobs_page_by_cursor_past_any_count(db_url: URL, store: HubStore) -> None:
    """--after takes the cursor the note of the page before gave: every job, once each,
    in list_assigns' order, past the 100 the store's list_assigns stops at."""
    with store.unit_of_work() as uow:
        made = [uow.create_assign("lead", "codex-1", task=f"t{i}").job_id
                for i in range(105)]
    pages: list[list[str]] = []
    after: list[str] = []
    while True:
        run = hubstore("jobs", "--limit", "40", *after, url=db_url)
        assert run.returncode == 0, run.stderr
        pages.append([line.split("\t")[0] for line in run.stdout.splitlines()])
        if not run.stderr:
            break
        note = re.fullmatch(r"note: 40 shown; more follow: hubstore jobs \.\.\. --after "
                            r"(\S+)\n", run.stderr)
        assert note is not None, run.stderr
        after = ["--after", note.group(1)]
    assert [len(page) for page in pages] == [40, 40, 25]
    listed = [job_id for page in pages for job_id in page]
    assert sorted(listed) == sorted(made)
    assert listed[:100] == [job.job_id for job in store.list_assigns(limit=100)]
    as_json = hubstore("jobs", "--limit", "2", *after, "--json", url=db_url)
    assert [job["job_id"] for job in json.loads(as_json.stdout)] == pages[-1][:2]
    bad = hubstore("jobs", "--after", "no-cursor", url=db_url)
    assert bad.returncode == 2 and "cursor" in bad.stderr
    over = hubstore("jobs", "--limit", "1001", url=db_url)
    assert over.returncode == 2 and "1001 is not in the range 1<=x<=1000" in over.stderr


def test_jobs_say_when_and_why_a_queued_job_is_not_due(db_url: URL, store: HubStore) -> None:
    later = now_ms() + 3_600_000
    scheduled = store.assign_async("lead", "w1", task="later", not_before_ms=later)
    store.assign_async("lead", "w2", task="backed off", max_retries=1,
                       retry_backoff_ms=600_000)
    failed = present(store.claim_next_assign("w2"))
    store.finish_assign(failed, "failed")
    due_now = store.assign_async("lead", "w3", task="now")
    lines = {line.split("\t")[0]: line.split("\t")
             for line in hubstore("jobs", url=db_url).stdout.splitlines()}
    assert lines[scheduled.job_id][8:] == [when(later), f"scheduled: due {when(later)} UTC"]
    assert lines[failed.job_id][9].startswith("back-off after retry 1: due ")
    assert lines[failed.job_id][4] == present(store.get_assign(failed.job_id)).claimed_by
    assert lines[due_now.job_id][8:] == ["", "due: waiting for worker 'w3' to claim it"]
    # The console's words, from the same function (issue 40 point 5).
    as_json = {d["job_id"]: d for d in json.loads(hubstore("jobs", "--json",
                                                           url=db_url).stdout)}
    assert as_json[scheduled.job_id]["due_ms"] == later
    assert as_json[due_now.job_id]["why"] == "due: waiting for worker 'w3' to claim it"


def test_jobs_say_which_limit_holds_a_job(db_url: URL, store: HubStore) -> None:
    """A due job whose limit is full says so, with the limit's figures, as the console
    does."""
    store.set_assign_limit("codex", max_running=1)
    store.assign_async("lead", "w1", task="first", limit_key="codex")
    held = store.assign_async("lead", "w1", task="second", limit_key="codex")
    assert present(store.claim_next_assign("w1", claimed_by="pod-7")).task == "first"
    lines = {line.split("\t")[0]: line.split("\t")
             for line in hubstore("jobs", url=db_url).stdout.splitlines()}
    assert lines[held.job_id][9] == "limit codex: 1/1 running"
    running = next(line for line in lines.values() if line[1] == "running")
    assert running[4] == "pod-7"  # who holds it (issue 40 point 11)


def test_jobs_cancel_and_retry(db_url: URL, store: HubStore) -> None:
    job = store.assign_async("lead", "w1", max_retries=0)
    run = hubstore("jobs", "cancel", job.job_id, "--reason", "operator", url=db_url)
    assert (run.returncode, run.stdout, run.stderr) == (0, f"{job.job_id}\tcancelled\n", "")
    assert present(store.get_assign(job.job_id)).error == {
        "message": "assign job cancelled", "reason": "operator"}
    again = hubstore("jobs", "retry", job.job_id, url=db_url)
    assert again.returncode == 1 and "never run again" in again.stderr
    missing = hubstore("jobs", "cancel", "no-such-job", url=db_url)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "there is no assign job no-such-job" in missing.stderr

    spent = store.assign_async("lead", "w2", max_retries=0)
    store.finish_assign(present(store.claim_next_assign("w2")), "failed")
    refused = hubstore("jobs", "retry", spent.job_id, url=db_url)
    assert refused.returncode == 1 and "has used its 0 retries" in refused.stderr
    forced = hubstore("jobs", "retry", spent.job_id, "--force", "--reason", "fixed",
                      url=db_url)
    assert (forced.returncode, forced.stdout) == (0, f"{spent.job_id}\tqueued\t2\n")
    event = [m.payload for m in store.get_messages_by_trace(spent.trace_id)
             if m.type == "event"][-1]
    assert (event["event"], event["retry_reason"], event["requested_by"]) == (
        "retry_scheduled", "fixed", "cli")


def test_db_sweep_once_and_every(db_url: URL, store: HubStore) -> None:
    stalled = AssignJobFactory.create(worker_agent="w1", status="running", max_retries=1,
                                      deadline_ms=now_ms() - 1)
    store.register_agent("old", "codex", heartbeat_ttl_ms=0)
    run = hubstore("db", "sweep", url=db_url)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["agents_stale\t1", "assigns_retried\t1",
                                       "assigns_timed_out\t1"]
    assert present(store.get_assign(stalled.job_id)).attempt == 2
    assert hubstore("db", "sweep", url=db_url).stdout == "nothing to sweep\n"
    # --every: round after round, until SIGTERM ends it cleanly
    proc = subprocess.Popen([sys.executable, "-m", "hubstore", "db", "sweep", "--every",
                             "0.1", "--url", db_url.render_as_string(hide_password=False)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    AssignJobFactory.create(worker_agent="w1", status="running", deadline_ms=now_ms() - 1)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)  # its first round that moved
    assert ready and proc.stdout.readline() == "assigns_timed_out\t1\n"
    proc.terminate()  # (its SIGTERM handler is in place before its first round)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, err, out) == (0, "", "")
    bad = hubstore("db", "sweep", "--every", "0", url=db_url)
    assert bad.returncode == 2


def test_messages_page_with_offset(db_url: URL, busy_hub: HubStore, read_only: None) -> None:
    newest = [m.id for m in busy_hub.poll_for_agent("codex-1", 20)]
    assert len(newest) == 5
    first = hubstore("messages", "--agent", "codex-1", "--limit", "2", url=db_url)
    second = hubstore("messages", "--agent", "codex-1", "--limit", "2", "--offset", "2",
                      "--json", url=db_url)
    last = hubstore("messages", "--agent", "codex-1", "--limit", "2", "--offset", "4",
                    url=db_url)
    assert [line.split("\t")[0] for line in first.stdout.splitlines()] == newest[:2]
    assert [m["id"] for m in json.loads(second.stdout)] == newest[2:4]
    assert [line.split("\t")[0] for line in last.stdout.splitlines()] == newest[4:]
    assert second.stderr.endswith("more follow: hubstore messages ... --offset 4\n")
    assert last.stderr == ""


def test_db_current_heads_history_check_json(db_url: URL) -> None:
    shown = db_url.render_as_string(hide_password=True)
    run = hubstore("db", "current", "--json", url=db_url)
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout) == {"url": shown, "revision": HEAD, "head": HEAD,
                                      "at_head": True}
    assert json.loads(hubstore("db", "heads", "--json", url=db_url).stdout) == [
        {"revision": HEAD, "current": True}]
    history = json.loads(hubstore("db", "history", "--json", url=db_url).stdout)
    walked = list(reversed(list(migrations.script_directory().walk_revisions())))
    assert [(r["revision"], r["down_revision"]) for r in history] == [
        (r.revision, r.down_revision) for r in walked]
    assert [r["revision"] for r in history if r["current"] or r["head"]] == [HEAD]
    assert history[0]["title"].startswith("The reference's schema version 3")
    check = hubstore("db", "check", "--json", url=db_url)
    assert (check.returncode, check.stderr) == (0, "")
    assert json.loads(check.stdout) == {"url": shown, "healthy": True, "head": HEAD,
                                        "findings": []}

    sql(db_url, "DROP INDEX idx_agents_status")
    sick = hubstore("db", "check", "--json", url=db_url)
    assert sick.returncode == 1
    assert json.loads(sick.stdout) == {
        "url": shown, "healthy": False, "head": HEAD,
        "findings": ["schema: index missing from the database: agents.idx_agents_status"]}

    assert hubstore("db", "downgrade", "0003", url=db_url).returncode == 0
    behind = json.loads(hubstore("db", "current", "--json", url=db_url).stdout)
    assert behind == {"url": shown, "revision": "0003", "head": HEAD, "at_head": False}
    assert hubstore("db", "downgrade", "base", "--yes", url=db_url).returncode == 0
    base = json.loads(hubstore("db", "current", "--json", url=db_url).stdout)
    assert base["revision"] is None and base["at_head"] is False
    assert not any(r["current"] for r in json.loads(
        hubstore("db", "history", "--json", url=db_url).stdout))


def test_db_json_of_a_missing_file_is_an_error_line(tmp_path: Path) -> None:
    for command in ("current", "heads", "history", "check"):
        run = hubstore("db", command, "--json", "--url", f"sqlite:///{tmp_path / 'no.db'}")
        assert (run.returncode, run.stdout) == (1, "")
        assert run.stderr.endswith(f"there is no SQLite database at {tmp_path / 'no.db'}\n")


def test_verbose_logs_on_stderr_only(db_url: URL, busy_hub: HubStore, read_only: None) -> None:
    quiet = hubstore("stats", url=db_url)
    assert quiet.stderr == ""
    shown = db_url.render_as_string(hide_password=True)
    for args in (["-v", "stats"], ["stats", "-v"], ["stats", "--verbose"]):
        run = hubstore(*args, url=db_url)
        assert run.returncode == 0 and run.stdout == quiet.stdout
        assert f" INFO hubstore.cli: reading the figures ({shown})\n" in run.stderr
        assert " INFO hubstore.cli: reading the figures: done in " in run.stderr
        assert "sqlalchemy.engine" not in run.stderr
    debug = hubstore("-v", "jobs", "-v", url=db_url)  # -v twice: -vv
    assert debug.stdout == hubstore("jobs", url=db_url).stdout
    assert "INFO hubstore.cli: jobs: 4 listed, the last page" in debug.stderr
    assert "INFO sqlalchemy.engine.Engine: SELECT " in debug.stderr


def test_verbose_upgrade_shows_alembic_steps(empty_url: URL) -> None:
    run = hubstore("db", "upgrade", "-v", url=empty_url)
    assert run.returncode == 0
    assert "INFO alembic.runtime.migration: Running upgrade  -> 0001" in run.stderr
    assert f"Running upgrade {migrations.script_directory().get_revision(HEAD).down_revision}"\
           f" -> {HEAD}" in run.stderr


def test_url_before_the_command(db_url: URL, busy_hub: HubStore, read_only: None,
                                tmp_path: Path) -> None:
    url = db_url.render_as_string(hide_password=False)
    figures = {**busy_hub.get_hub_stats(), **busy_hub.get_audit_stats()}
    run = hubstore("--url", url, "stats", "--json")
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout) == figures
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    ahead_of_env = subprocess.run(
        [sys.executable, "-m", "hubstore", "--url", url, "db", "check"], capture_output=True,
        text=True, env=ENV | {ENV_URL: elsewhere}, timeout=300, check=False)
    assert ahead_of_env.returncode == 0, ahead_of_env.stderr
    assert hubstore("db", "--url", url, "current").stdout == f"{HEAD} (head)\n"
    after_wins = hubstore("--url", url, "stats", "--url", elsewhere)  # the command's own
    assert after_wins.returncode == 1
    assert after_wins.stderr.endswith(f"there is no SQLite database at "
                                      f"{tmp_path / 'elsewhere.db'}\n")
    assert not (tmp_path / "elsewhere.db").exists()


def test_an_option_before_its_command_is_answered_with_the_fix() -> None:
    def console_script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BIN / "hubstore", *args], capture_output=True, text=True,
                              env=ENV, check=False, timeout=60)

    run = console_script("--json", "stats")
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.endswith(
        "Error: No such option '--json'. --json is an option of `hubstore stats`: write it "
        "after the command (hubstore stats --json ...).\n")
    run = console_script("db", "--json", "check")
    assert run.returncode == 2
    assert "(hubstore db check --json ...)" in run.stderr
    bad = hubstore("--url", "hub.db", "stats")
    assert bad.returncode == 2 and "(did you mean sqlite:///hub.db?)" in bad.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(db_url: URL, busy_hub: HubStore,
                                                          read_only: None) -> None:
    """``hubstore jobs | head -0``: the first write finds the pipe closed: status 141, as
    a shell's SIGPIPE, and no traceback."""
    for args in (["jobs"], ["jobs", "--json"]):
        reader, writer = os.pipe()
        os.close(reader)
        try:
            run = subprocess.run(
                [sys.executable, "-m", "hubstore", *args, "--url",
                 db_url.render_as_string(hide_password=False)],
                stdout=writer, stderr=subprocess.PIPE, text=True, env=ENV, timeout=300,
                check=False)
        finally:
            os.close(writer)
        assert (run.returncode, run.stderr) == (141, "")
