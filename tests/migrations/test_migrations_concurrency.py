"""Processes that open the same new database with auto_migrate at the same moment all
succeed, and the migrations run once."""

from __future__ import annotations

import logging
import multiprocessing
from multiprocessing.synchronize import Barrier

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations

PROCESSES = 4


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.applied = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.applied += record.getMessage().startswith("Running upgrade")


def _open(url: str, barrier: Barrier, results: multiprocessing.Queue[int | str]) -> None:
    """In a child process: wait for the others, open with auto_migrate, report back."""
    counter = _Count()
    logger = logging.getLogger("alembic.runtime.migration")
    logger.setLevel(logging.INFO)
    logger.addHandler(counter)
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
