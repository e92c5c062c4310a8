"""Waits for another writer are bounded, on both dialects: a second store in the same
thread, and a writer frozen (SIGSTOP) or asleep with the lock held, stall no one beyond
the busy timeout (SQLite: DatabaseBusy; PostgreSQL's row locks: no wait at all); a
writer killed (SIGKILL) mid-write leaves the database intact, with whole units of work
only. Times are bounded, never measured as throughput.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from hubstore import HubStore
from hubstore.errors import DatabaseBusy
from tests.helpers import FAST_S

SHORT_MS = 300


#: What a DatabaseBusy after SHORT_MS may take at most (a loaded CI machine included).
BUSY_BOUND_S = 2.5


def test_a_second_store_nested_in_the_same_thread_never_hangs(store: HubStore) -> None:
    with HubStore.open(store.url, busy_timeout_ms=SHORT_MS) as second:
        with store.unit_of_work() as uow:
            uow.register_agent("first", "codex")
            began = time.monotonic()
            if store.dialect == "sqlite":  # one writer per file: busy, within the timeout
                with pytest.raises(DatabaseBusy) as caught:
                    second.register_agent("second", "codex")
                elapsed = time.monotonic() - began
                assert SHORT_MS / 1000 * 0.9 <= elapsed < BUSY_BOUND_S
                assert "write lock" in str(caught.value) or "locked" in str(caught.value)
            else:  # row locks only: another row is written at once, in its own transaction
                second.register_agent("second", "codex")
                assert time.monotonic() - began < FAST_S
            assert second.get_agent("first") is None
        assert second.get_agent("first") is not None
        second.register_agent("third", "codex")  # free again once the first committed
    expected = ["first", "third"] if store.dialect == "sqlite" else ["first", "second", "third"]
    assert sorted(a.agent_id for a in store.list_all_agents()) == expected


_HOLDER = """
import os, sys, time
from hubstore import HubStore
store = HubStore.open(sys.argv[1])
with store.unit_of_work() as uow:
    uow.register_agent("held", "codex")
    print("holding", flush=True)
    if sys.argv[2] == "stop":
        os.kill(os.getpid(), 19)  # SIGSTOP: a writer frozen in a debugger
    time.sleep(600)
"""


_WRITER_LOOP = """
import sys
from hubstore import HubStore
store = HubStore.open(sys.argv[1])
n = 0
while True:
    with store.unit_of_work() as uow:
        uow.audit_log("event", "w", "x", "t", payload={"n": n, "pad": "x" * 2000})
        uow.register_agent(f"a{n}", "codex")
    n += 1
    print(n, flush=True)
"""


def _child(script: str, *args: str) -> Any:
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _kill(proc: Any) -> None:
    import signal

    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.parametrize("how", ["stop", "sleep"])
def test_a_frozen_writer_stalls_no_one_beyond_the_busy_timeout(store: HubStore, how: str) -> None:
    holder = _child(_HOLDER, store.url.render_as_string(hide_password=False), how)
    try:
        assert holder.stdout.readline().strip() == "holding", holder.stderr.read()
        with HubStore.open(store.url, busy_timeout_ms=SHORT_MS) as other:
            began = time.monotonic()
            if store.dialect == "sqlite":
                with pytest.raises(DatabaseBusy):
                    other.register_agent("blocked", "codex")
                assert time.monotonic() - began < BUSY_BOUND_S
            else:
                other.register_agent("free", "codex")
                assert time.monotonic() - began < FAST_S
            assert other.get_agent("held") is None  # never committed
            _kill(holder)
            other.register_agent("after", "codex")  # the killed holder frees the lock
            assert other.get_agent("held") is None
    finally:
        if holder.returncode is None:
            _kill(holder)
    names = sorted(a.agent_id for a in store.list_all_agents())
    assert names == (["after"] if store.dialect == "sqlite" else ["after", "free"])


def test_kill_9_mid_write_leaves_the_database_intact(store: HubStore) -> None:
    writer = _child(_WRITER_LOOP, store.url.render_as_string(hide_password=False))
    try:
        done = 0
        while done < 30:
            line = writer.stdout.readline()
            assert line, writer.stderr.read()
            done = int(line)
    finally:
        _kill(writer)
    stats = store.get_hub_stats()
    committed = len(store.list_all_agents())
    assert committed >= done and stats["total_messages"] == committed  # whole units only
    if store.dialect == "sqlite":
        with store.unit_of_work(write=False) as uow:
            assert uow.connection.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    began = time.monotonic()
    store.register_agent("after", "codex")
    assert time.monotonic() - began < BUSY_BOUND_S
    assert store.get_hub_stats()["total_messages"] == committed
