"""Processes that migrate the same new database at the same moment (HubStore.open with
auto_migrate, migrations.upgrade, `hubstore db upgrade`) all succeed, the migrations run
once, and each says what it found under the migration lock."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Barrier

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from hubstore.engine import sqlite_path

PROCESSES = 4


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.applied = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.applied += record.getMessage().startswith("Running upgrade")

    @classmethod
    def installed(cls) -> _Count:
        """A counter of the migrations that this process runs from now on."""
        counter = cls()
        logger = logging.getLogger("alembic.runtime.migration")
        logger.setLevel(logging.INFO)
        logger.addHandler(counter)
        return counter


def _open(url: str, barrier: Barrier, results: multiprocessing.Queue[int | str]) -> None:
    """In a child process: wait for the others, open with auto_migrate, report back."""
    counter = _Count.installed()
    try:
        barrier.wait(timeout=60)
        with HubStore.open(url, auto_migrate=True) as store:
            store.register_agent(f"agent-{multiprocessing.current_process().pid}", "codex")
        results.put(counter.applied)
    except BaseException as exc:  # the parent shows it
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_concurrent_first_opens_migrate_once(empty_url: URL) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results: multiprocessing.Queue[int | str] = ctx.Queue()
    url = empty_url.render_as_string(hide_password=False)
    workers = [ctx.Process(target=_open, args=(url, barrier, results))
               for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0

    assert all(isinstance(o, int) for o in outcomes), outcomes
    counts = [o for o in outcomes if isinstance(o, int)]  # all of them (asserted above)
    revisions = len(list(migrations.script_directory().walk_revisions()))
    assert sorted(counts) == [0] * (PROCESSES - 1) + [revisions]  # every revision, once
    engine = create_engine(empty_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [
            (migrations.head(),)]
        assert conn.execute(text("SELECT key, value FROM _meta")).all() == [
            ("schema_version", "4")]
        assert conn.execute(text("SELECT count(*) FROM agents")).scalar() == PROCESSES
    engine.dispose()


def _child(kind: str, url: str, barrier: Barrier,
           results: multiprocessing.Queue[tuple[str, int, str] | str]) -> None:
    """In a child process: ready to run (imported), wait for the others, then migrate by
    ``kind`` ("cli": `hubstore db upgrade`; "upgrade": migrations.upgrade; "open":
    HubStore.open with auto_migrate) and report (kind, migrations run, output)."""
    from click.testing import CliRunner

    from hubstore.cli import main

    counter = _Count.installed()
    try:
        barrier.wait(timeout=60)
        output = ""
        if kind == "cli":
            result = CliRunner().invoke(main, ["db", "upgrade", "--url", url])
            assert result.exit_code == 0, result.output
            output = result.output
        elif kind == "upgrade":
            migrations.upgrade(url)
        else:
            with HubStore.open(url, auto_migrate=True) as store:
                store.register_agent(f"agent-{multiprocessing.current_process().pid}", "codex")
        results.put((kind, counter.applied, output))
    except BaseException as exc:  # the parent shows it
        results.put(f"{type(exc).__name__}: {exc}")


@contextmanager
def _lock_held(url: URL) -> Iterator[Callable[[int], None]]:
    """The migration lock, held by the test until the block ends; yields a function that
    returns once that many runs wait for it (PostgreSQL: seen in pg_locks; SQLite, where a
    wait cannot be seen: after two seconds)."""
    path = sqlite_path(url)
    if path is not None:
        db = sqlite3.connect(path, isolation_level=None)  # a new, empty file
        db.execute("BEGIN IMMEDIATE")
        try:
            yield lambda _: time.sleep(2)
        finally:
            db.execute("ROLLBACK")
            db.close()
        return
    engine = create_engine(url)
    waiting = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                   "AND database = (SELECT oid FROM pg_database "
                   "WHERE datname = current_database())")

    def waiters(count: int) -> None:
        deadline = time.monotonic() + 60
        with engine.connect() as look:
            while look.execute(waiting).scalar_one() < count:
                assert time.monotonic() < deadline, "the runs never waited for the lock"
                time.sleep(0.05)
                look.rollback()

    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                         {"key": migrations.ADVISORY_LOCK_KEY})
            yield waiters
    finally:
        engine.dispose()


def _race(url: URL, kinds: list[str]) -> list[tuple[str, int, str]]:
    """Children that each migrate ``url`` by their kind, all started while the test holds
    the migration lock and released together once all of them wait for it."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(kinds) + 1)
    results: multiprocessing.Queue[tuple[str, int, str] | str] = ctx.Queue()
    shown = url.render_as_string(hide_password=False)
    workers = [ctx.Process(target=_child, args=(kind, shown, barrier, results))
               for kind in kinds]
    with _lock_held(url) as wait_for:
        for worker in workers:
            worker.start()
        barrier.wait(timeout=120)
        wait_for(len(kinds))
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    return sorted(o for o in outcomes if isinstance(o, tuple))


def _at_head_once(url: URL) -> None:
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [
            (migrations.head(),)]
    engine.dispose()


@pytest.mark.slow
def test_two_cli_upgrades_at_once_one_migrates_the_other_finds_head(empty_url: URL) -> None:
    """The second `hubstore db upgrade` waits for the first one's lock, then reports the
    revision it found under the lock: head, not base (each read it before the lock)."""
    outcomes = _race(empty_url, ["cli", "cli"])

    head = migrations.head()
    revisions = len(list(migrations.script_directory().walk_revisions()))
    assert sorted(applied for _, applied, _ in outcomes) == [0, revisions]
    said = sorted(output.split(": ", 1)[1] for _, _, output in outcomes)
    assert said == [f"already at head {head}, nothing to do\n",
                    f"upgraded from base to {head}\n"]
    _at_head_once(empty_url)


@pytest.mark.slow
def test_an_upgrade_and_an_auto_migrating_open_at_once_migrate_once(empty_url: URL) -> None:
    outcomes = _race(empty_url, ["open", "upgrade"])

    revisions = len(list(migrations.script_directory().walk_revisions()))
    assert sorted(applied for _, applied, _ in outcomes) == [0, revisions]
    _at_head_once(empty_url)
    with HubStore.open(empty_url) as store:
        assert len(store.list_all_agents()) == 1


def test_the_report_says_what_an_upgrade_found_and_left(empty_url: URL) -> None:
    head = migrations.head()
    assert migrations.upgrade_and_report(empty_url, "0003") == (None, None, "0003")
    assert migrations.upgrade_and_report(empty_url) == ("0003", None, head)
    assert migrations.upgrade_and_report(empty_url) == (head, None, head)
