"""What a new user tripped on at the command line (issue 40): a six-field or bad
``--cron`` exits 2 with the store's message, ``--every`` takes durations as every other
option does (``5m``), a "next" tick in the past says that nothing runs the maintenance,
and ``sqlite://hub.db`` (one slash short) is answered with the URL meant."""

from __future__ import annotations

import select
import subprocess
import sys

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.cli.common import Seconds
from hubstore.ids import now_ms
from hubstore.testing.factories import AssignJobFactory
from tests.cli.test_cli_commands import ENV, hubstore

SET = ("schedules", "set", "nightly", "--supervisor", "lead", "--worker", "w", "--cron")


@pytest.mark.parametrize(("cron", "said"), [
    ("0 0 3 * * *", "exactly five fields"), ("0 3 * *", "exactly five fields"),
    ("61 * * * *", "not a valid cron expression"), ("", "five fields")])
def test_a_bad_cron_exits_2_with_the_reason(db_url: URL, store: HubStore, cron: str,
                                           said: str) -> None:
    run = hubstore(*SET, cron, url=db_url)
    assert run.returncode == 2, run.stderr
    assert said in run.stderr and "Traceback" not in run.stderr
    assert store.get_assign_schedules() == {}


def test_a_five_field_cron_is_set(db_url: URL, store: HubStore) -> None:
    run = hubstore(*SET, "0 3 * * *", url=db_url)
    assert run.returncode == 0, run.stderr
    assert store.get_assign_schedules()["nightly"].cron == "0 3 * * *"


@pytest.mark.parametrize(("given", "seconds"), [
    ("5m", 300.0), ("45s", 45.0), ("12h", 43_200.0), ("1d", 86_400.0), ("0.5", 0.5),
    ("30", 30.0)])
def test_every_takes_durations_and_seconds(given: str, seconds: float) -> None:
    assert Seconds().convert(given, None, None) == seconds


@pytest.mark.parametrize("given", ["0", "-5", "nan", "inf", "5x", "m"])
def test_a_bad_every_exits_2(db_url: URL, given: str) -> None:
    run = hubstore("db", "sweep", "--every", given, url=db_url)
    assert run.returncode == 2 and "--every" in run.stderr


def test_db_sweep_every_5m_runs_until_stopped(db_url: URL, store: HubStore) -> None:
    """(Before, --every took a bare number of seconds only: "5m" exited 2.)"""
    AssignJobFactory.create(worker_agent="w1", status="running", deadline_ms=now_ms() - 1)
    proc = subprocess.Popen([sys.executable, "-m", "hubstore", "db", "sweep", "--every",
                             "5m", "--url", db_url.render_as_string(hide_password=False)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)  # its first round
    assert ready and proc.stdout.readline() == "assigns_timed_out\t1\n"
    proc.terminate()  # (its SIGTERM handler is in place before its first round)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, err, out) == (0, "", "")


def test_schedules_hints_when_a_next_tick_is_past(db_url: URL, store: HubStore) -> None:
    store.set_assign_schedule("nightly", "lead", "w", cron="0 3 * * *")
    run = hubstore("schedules", url=db_url)
    assert run.returncode == 0 and "hubstore db sweep" not in run.stderr
    with store.unit_of_work() as uow:
        uow.connection.execute(text("UPDATE assign_schedules SET next_due_ms = 1000"))
    run = hubstore("schedules", url=db_url)
    assert run.returncode == 0, run.stderr
    assert "nightly" in run.stderr and "in the past" in run.stderr
    assert "nothing runs the hub's maintenance" in run.stderr
    assert "hubstore db sweep" in run.stderr


def test_one_slash_short_names_the_url_meant() -> None:
    run = hubstore("db", "current", "--url", "sqlite://hub.db")
    assert run.returncode == 2
    assert "did you mean sqlite:///hub.db" in run.stderr
