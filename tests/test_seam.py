"""Issue 9: one owner for every transaction, on both dialects.

Nesting as Django's ``atomic``, read-only units of work, the Session, SQLAlchemy's
cursor events, bounded waits, descriptors, no ``fcntl``, ``fork()`` and PostgreSQL's
connect timeout and lost connections. Times are bounded, never measured as throughput.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.errors import DatabaseBusy, HubStoreError, ReadOnlyUnitOfWork
from hubstore.models import Agent, AssignJob
from hubstore.testing.factories import AgentFactory, AssignJobFactory

#: Far below the default busy timeout (5 s): a join that waited on its own lock would
#: take the whole timeout.
FAST_S = 1.0


@pytest.fixture
def other(store: HubStore) -> Iterator[HubStore]:
    """A second store on the same database (another connection, as another program)."""
    with HubStore.open(store.url) as second:
        yield second


def checkouts(store: HubStore) -> list[int]:
    """A list that grows by one each time the store's engine hands out a connection."""
    seen: list[int] = []
    event.listen(store.engine, "checkout", lambda *_: seen.append(1))
    return seen


# -- 1. nesting ----------------------------------------------------------------------


def test_a_store_method_inside_a_unit_of_work_joins_it_at_once(store: HubStore) -> None:
    opened = checkouts(store)
    with store.unit_of_work() as uow:
        uow.register_agent("outer", "codex")
        before = len(opened)
        began = time.monotonic()
        store.register_agent("inner", "codex")
        store.audit_log("event", "outer", "inner", "t")
        assert sorted(a.agent_id for a in store.list_all_agents()) == ["inner", "outer"]
        with store.unit_of_work() as joined:
            assert joined is uow
        assert time.monotonic() - began < FAST_S
        assert len(opened) == before  # no second connection
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["inner", "outer"]
    assert store.get_hub_stats()["total_messages"] == 1


def test_an_inner_exception_rolls_back_only_the_inner_block(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        with pytest.raises(KeyError), store.unit_of_work() as inner:
            inner.register_agent("lost", "codex")
            store.audit_log("event", "lost", "x", "t")
            raise KeyError("inner")
        assert uow.get_agent("lost") is None
        uow.audit_log("event", "kept", "x", "t")  # the outer block goes on
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]
    assert store.get_hub_stats()["total_messages"] == 1


def test_a_failing_store_method_inside_rolls_back_only_itself(store: HubStore) -> None:
    job = store.create_assign("lead", "w")
    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        with pytest.raises(Exception) as caught:
            store.update_assign_status(job.job_id, "succeeded", result={"bad": float("nan")})
        assert type(caught.value).__module__.startswith("hubstore")
        uow.update_assign_status(job.job_id, "running")
    got = store.get_assign(job.job_id)
    assert got is not None and got.status == "running"
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]


def test_the_outer_rollback_undoes_the_inner_work(store: HubStore) -> None:
    with pytest.raises(RuntimeError), store.unit_of_work():
        store.register_agent("a", "codex")
        with store.unit_of_work() as inner:
            inner.audit_log("event", "a", "b", "t")
        store.create_assign("lead", "w")
        raise RuntimeError("outer")
    assert store.list_all_agents() == []
    assert store.list_assigns() == []
    assert store.get_hub_stats()["total_messages"] == 0


def test_nothing_is_visible_elsewhere_before_the_outermost_commit(
        store: HubStore, other: HubStore) -> None:
    with store.unit_of_work():
        with store.unit_of_work():
            store.register_agent("a", "codex")
        assert store.get_agent("a") is not None  # visible inside
        began = time.monotonic()
        assert other.get_agent("a") is None  # not elsewhere, and the reader does not wait
        assert time.monotonic() - began < FAST_S
    seen = other.get_agent("a")
    assert seen is not None and seen.cli == "codex"


def test_listeners_of_a_rolled_back_savepoint_never_hear(store: HubStore) -> None:
    heard: list[tuple[str, str]] = []
    store.on_assign_status_change(lambda event, job: heard.append(
        (event["job_id"], event["status"])))
    with store.unit_of_work():
        kept = store.create_assign("lead", "w")
        with pytest.raises(KeyError), store.unit_of_work() as inner:
            lost = inner.create_assign("lead", "w")
            inner.update_assign_status(kept.job_id, "running")
            raise KeyError
        assert heard == []
    assert heard == [(kept.job_id, "queued")]
    assert store.get_assign(lost.job_id) is None
    got = store.get_assign(kept.job_id)
    assert got is not None and got.status == "queued"


def test_a_committed_savepoint_keeps_its_actions_for_the_outer_commit(store: HubStore) -> None:
    ran: list[str] = []
    with store.unit_of_work() as uow:
        with store.unit_of_work() as inner:
            inner.after_commit(lambda: ran.append("inner"))
        assert ran == []  # a savepoint's release is no commit
        uow.after_commit(lambda: ran.append("outer"))
    assert ran == ["inner", "outer"]


def test_a_failed_statement_fails_the_whole_unit_of_work_on_both_dialects(
        store: HubStore) -> None:
    from hubstore.errors import DuplicateKey, HubStoreError

    store.create_assign("lead", "w", job_id="taken")
    with pytest.raises(HubStoreError) as at_exit, store.unit_of_work() as uow:
        uow.register_agent("a", "codex")
        with pytest.raises(DuplicateKey):
            uow.create_assign("lead", "w", job_id="taken")
        with pytest.raises(HubStoreError) as refused:  # PostgreSQL aborted it; SQLite too
            uow.register_agent("b", "codex")
        assert "rolled back" in str(refused.value)
    assert isinstance(at_exit.value.__cause__, DuplicateKey)  # said, never a silent loss
    assert store.list_all_agents() == []
    store.register_agent("after", "codex")  # the connection went back clean
    assert [a.agent_id for a in store.list_all_agents()] == ["after"]


def test_a_failure_caught_and_left_alone_still_rolls_back_loudly(store: HubStore) -> None:
    from hubstore.errors import DuplicateKey, HubStoreError

    store.create_assign("lead", "w", job_id="taken")
    with pytest.raises(HubStoreError, match="rolled back"), store.unit_of_work() as uow:
        uow.register_agent("a", "codex")
        with contextlib.suppress(DuplicateKey):
            uow.create_assign("lead", "w", job_id="taken")
    assert store.list_all_agents() == []


def test_a_failure_inside_a_savepoint_lets_the_unit_of_work_go_on(store: HubStore) -> None:
    from hubstore.errors import DuplicateKey

    store.create_assign("lead", "w", job_id="taken")
    with store.unit_of_work() as uow:
        uow.register_agent("a", "codex")
        with pytest.raises(DuplicateKey), store.unit_of_work() as inner:
            inner.create_assign("lead", "w", job_id="taken")
        with pytest.raises(DuplicateKey):  # a store call is a savepoint of its own
            store.create_assign("lead", "w", job_id="taken")
        uow.register_agent("b", "codex")
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["a", "b"]


def test_a_failed_session_flush_fails_the_unit_of_work(store: HubStore) -> None:
    from sqlalchemy.exc import IntegrityError

    from hubstore.errors import HubStoreError

    AgentFactory.create(agent_id="taken")
    with pytest.raises(HubStoreError), store.unit_of_work() as uow:
        uow.register_agent("a", "codex")
        uow.session.add(AgentFactory.build(agent_id="taken"))
        with pytest.raises(IntegrityError):  # the Session's own call: its own error
            uow.session.flush()
        uow.register_agent("b", "codex")
    assert [a.agent_id for a in store.list_all_agents()] == ["taken"]
    began = time.monotonic()
    store.register_agent("after", "codex")  # nothing left open: no lock, no wait
    assert time.monotonic() - began < FAST_S


def test_a_raw_statement_error_caught_is_never_a_silent_loss(store: HubStore) -> None:
    """Raw SQL through ``uow.connection`` is the caller's: SQLite undoes the failed
    statement only, PostgreSQL aborts the transaction; either way nothing is lost
    unsaid (PostgreSQL's COMMIT of an aborted transaction raises)."""
    from sqlalchemy.exc import IntegrityError

    from hubstore.errors import HubStoreError

    bad = text("INSERT INTO agents (agent_id, cli, last_seen_ms, lease_expires_ms, status) "
               "VALUES ('x', 'nope', 1, 1, 'online')")
    if store.dialect == "sqlite":
        with store.unit_of_work() as uow:
            uow.register_agent("a", "codex")
            with pytest.raises(IntegrityError):
                uow.connection.execute(bad)
        assert [a.agent_id for a in store.list_all_agents()] == ["a"]
        return
    with pytest.raises(HubStoreError, match="rolled back"), store.unit_of_work() as uow:
        uow.register_agent("a", "codex")
        with pytest.raises(IntegrityError):
            uow.connection.execute(bad)
    assert store.list_all_agents() == []


# -- 3. read-only units of work ------------------------------------------------------


_RAW_INSERT = text("INSERT INTO agents (agent_id, cli, last_seen_ms, lease_expires_ms, "
                   "status) VALUES ('raw', 'codex', 1, 1, 'online')")


def test_a_read_only_unit_of_work_refuses_store_writes(store: HubStore) -> None:
    AgentFactory.create(agent_id="a")
    with store.unit_of_work(write=False) as uow:
        with pytest.raises(ReadOnlyUnitOfWork):
            uow.register_agent("b", "codex")
        with pytest.raises(ReadOnlyUnitOfWork):
            store.update_agent_status("a", "offline")  # joined: read-only too
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work() as inner:
            inner.audit_log("event", "a", "b", "t")
        got = uow.get_agent("a")  # reads still work
        assert got is not None and got.status == "online"
    agent = store.get_agent("a")
    assert agent is not None and agent.status == "online"
    assert [a.agent_id for a in store.list_all_agents()] == ["a"]
    assert store.get_hub_stats()["total_messages"] == 0


def test_a_read_only_unit_of_work_refuses_raw_sql_writes(store: HubStore) -> None:
    with pytest.raises(ReadOnlyUnitOfWork) as caught, store.unit_of_work(write=False) as uow:
        uow.connection.execute(_RAW_INSERT)
    assert caught.value.__cause__ is not None
    assert store.list_all_agents() == []
    store.register_agent("after", "codex")  # the connection went back usable
    assert [a.agent_id for a in store.list_all_agents()] == ["after"]


def test_a_read_only_unit_of_work_refuses_session_writes(store: HubStore) -> None:
    with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as uow:
        uow.session.add(AgentFactory.build(agent_id="orm"))
        uow.session.flush()
    with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as uow:
        uow.session.add(AgentFactory.build(agent_id="orm2"))  # flushed at the exit
    with store.unit_of_work(write=False) as uow:
        assert uow.session.get(Agent, "orm") is None
        assert uow.session.get(Agent, "orm2") is None
    assert store.list_all_agents() == []


def test_a_read_only_block_inside_a_writing_one_refuses_every_write(store: HubStore
                                                                    ) -> None:
    with store.unit_of_work() as outer:
        outer.register_agent("before", "codex")
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as inner:
            assert inner.get_agent("before") is not None  # reads see the outer writes
            inner.connection.execute(_RAW_INSERT)
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as inner:
            inner.register_agent("refused", "codex")
        # the outer block writes again, and reads through the store still work
        outer.register_agent("after", "codex")
        assert store.get_agent("after") is not None
    names = sorted(a.agent_id for a in store.list_all_agents())
    assert names == ["after", "before"]


def test_a_session_write_refused_in_a_nested_read_only_block_fails_the_unit_of_work(
        store: HubStore) -> None:
    with pytest.raises(HubStoreError, match="rolled back"), store.unit_of_work() as outer:
        outer.register_agent("before", "codex")
        with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as inner:
            inner.session.add(AgentFactory.build(agent_id="orm"))
            inner.session.flush()  # a failed flush rolls the whole transaction back
    assert store.list_all_agents() == []
    store.register_agent("later", "codex")  # and the connection is usable again
    assert [a.agent_id for a in store.list_all_agents()] == ["later"]


# -- 4. the Session ------------------------------------------------------------------


def test_pending_orm_changes_are_flushed_before_a_store_method(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        uow.session.add(AgentFactory.build(agent_id="orm"))
        assert uow.update_agent_status("orm", "offline") is True
        assert store.get_agent("orm") is not None  # a joined store call sees it too
    agent = store.get_agent("orm")
    assert agent is not None and agent.status == "offline"


def test_objects_loaded_through_the_session_read_the_store_writes(store: HubStore) -> None:
    job_id = AssignJobFactory.create(status="queued").job_id
    AgentFactory.create(agent_id="a")
    with store.unit_of_work() as uow:
        job = uow.session.get(AssignJob, job_id)
        agent = uow.session.get(Agent, "a")
        assert job is not None and job.status == "queued"
        assert agent is not None and agent.status == "online"
        uow.update_assign_status(job_id, "running")
        assert job.status == "running"
        store.update_agent_status("a", "offline")  # joined
        assert agent.status == "offline"


def test_returned_instances_are_detached_and_mergeable(store: HubStore) -> None:
    from sqlalchemy.orm.attributes import instance_state

    store.register_agent("a", "codex")
    with store.unit_of_work() as uow:
        agent = uow.get_agent("a")
        job = uow.create_assign("lead", "w", task="t")
    assert agent is not None
    for instance in (agent, job):
        state = instance_state(instance)
        assert state.detached and not state.expired
    assert agent.cli == "codex" and job.task == "t"  # readable after the unit of work
    with store.unit_of_work() as uow:
        merged = uow.session.merge(agent)
        merged.status = "offline"
    got = store.get_agent("a")
    assert got is not None and got.status == "offline"


# -- 5. SQLAlchemy's cursor events ---------------------------------------------------


def _each_common_call(store: HubStore) -> Iterator[tuple[str, Any]]:
    yield "register_agent", lambda: store.register_agent("w", "codex", topics=["t"])
    yield "refresh_lease", lambda: store.refresh_lease("w")
    yield "audit_log", lambda: store.audit_log("event", "lead", "w", "t")
    yield "poll_for_agent", lambda: store.poll_for_agent("w")
    yield "assign_async", lambda: store.assign_async("lead", "w", task="x")
    yield "claim_next_assign", lambda: store.claim_next_assign("w")
    yield "get_assign", lambda: store.get_assign(store.list_assigns()[0].job_id)
    yield "add_reflexion", lambda: store.add_reflexion("TypeError", "x is None", "check x")
    yield "find_reflexion", lambda: store.find_reflexion("TypeError")


def test_every_common_call_is_seen_by_cursor_events(store: HubStore) -> None:
    before: list[str] = []
    after: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *_: before.append(statement))
    event.listen(store.engine, "after_cursor_execute",
                 lambda conn, cursor, statement, *_: after.append(statement))
    for name, call in _each_common_call(store):
        seen = len(before)
        call()
        assert len(before) > seen, f"{name} ran no statement the events saw"
    assert after == before


def test_without_a_listener_the_sqlite_fast_path_skips_the_execution_layer(
        store: HubStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import Connection

    from tests.helpers import record_calls

    through = record_calls(monkeypatch, Connection, "exec_driver_sql")
    store.register_agent("w", "codex")
    store.refresh_lease("w")
    store.audit_log("event", "lead", "w", "t")
    assert len(store.poll_for_agent("w")) == 1
    if store.dialect == "sqlite":
        assert through == []  # run on the driver
        event.listen(store.engine, "before_cursor_execute", lambda *_: None)
        store.refresh_lease("w")  # a listener now: decided again on this very call
        assert through
    agent = store.get_agent("w")
    assert agent is not None and agent.status == "online"


def test_one_select_reads_use_the_idle_writers_connection_and_take_no_lock(
        store: HubStore) -> None:
    """SQLite: a store read of one SELECT runs on the thread's idle writing connection,
    whose page cache its own commits keep warm. It takes no lock (another program holds
    the write lock meanwhile), also when it begins SQLAlchemy's transaction; with a
    listener watching statements the reading connection serves it again."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL's reads run in autocommit on a pooled connection")
    import sqlite3

    from tests.helpers import driver_trace

    store.register_agent("w", "codex", topics=["t.a"])
    store.audit_log("event", "lead", "w", "t.x", payload={"n": 1})
    writing = driver_trace(store, whole=True)
    reading = driver_trace(store, write=False, whole=True)
    path = store.url.database
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        began = time.monotonic()
        assert [m.payload for m in store.poll_for_agent("w")] == [{"n": 1}]
        with store.one_read() as uow:
            assert uow.connection.execute(text("SELECT count(*) FROM agents")).scalar() == 1
        assert time.monotonic() - began < FAST_S
        assert [sql.split()[0] for sql in writing] == ["SELECT", "SELECT", "BEGIN",
                                                       "SELECT", "COMMIT"]
        assert writing[2] == "BEGIN DEFERRED" and reading == []
        writing.clear()
        event.listen(store.engine, "before_cursor_execute", lambda *_: None)
        assert [m.payload for m in store.poll_for_agent("w")] == [{"n": 1}]
        assert writing == [] and [sql.split()[0] for sql in reading] == [
            "BEGIN", "SELECT", "COMMIT", "BEGIN", "SELECT", "COMMIT"]
    finally:
        holder.close()
    # the guard of general reads is kept
    with pytest.raises(ReadOnlyUnitOfWork), store.unit_of_work(write=False) as uow:
        uow.connection.execute(text("DELETE FROM agents"))
    assert store.get_agent("w") is not None


# -- 2. bounded waits: a second store, a frozen writer, a killed writer ---------------


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


# -- 6. descriptors ------------------------------------------------------------------


def _open_fds() -> int:
    import gc
    import os

    gc.collect()
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="needs /proc")
def test_finished_threads_and_close_release_their_descriptors(db_url: URL) -> None:
    import threading

    baseline = _open_fds()
    store = HubStore.open(db_url)
    store.register_agent("main", "codex")
    warm = _open_fds()
    errors: list[BaseException] = []

    def write_once(i: int) -> None:
        try:
            store.register_agent(f"t{i}", "codex")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write_once, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.list_all_agents()) == 201
    assert _open_fds() - warm <= 10
    store.close()
    assert _open_fds() <= baseline + 2


# -- 7. no fcntl ---------------------------------------------------------------------


_NO_FCNTL = """
import sys, time
sys.modules["fcntl"] = None  # as on Windows: `import fcntl` raises ImportError
import hubstore
from hubstore import HubStore, sqlite
from hubstore.errors import DatabaseBusy
assert sqlite.fcntl is None
with HubStore.open(sys.argv[1], busy_timeout_ms=300) as store:
    store.register_agent("nofcntl", "codex")
    store.audit_log("event", "nofcntl", "x", "t", payload={"k": 1})
    agent = store.get_agent("nofcntl")
    print("read", agent.cli, store.get_hub_stats()["total_messages"])
    if store.dialect == "sqlite":  # SQLite's own lock still bounds the wait
        with HubStore.open(sys.argv[1], busy_timeout_ms=300) as second, store.unit_of_work():
            store.register_agent("holder", "codex")
            began = time.monotonic()
            try:
                second.register_agent("blocked", "codex")
            except DatabaseBusy:
                print("busy", round(time.monotonic() - began, 1) < 2.5)
print("ok", hubstore.__version__ is not None)
"""


def test_hubstore_works_without_fcntl(store: HubStore) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NO_FCNTL,
                           store.url.render_as_string(hide_password=False)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "read codex 1"
    if store.dialect == "sqlite":
        assert "busy True" in lines
    assert "ok True" in lines
    assert sorted(a.agent_id for a in store.list_all_agents()) == (
        ["holder", "nofcntl"] if store.dialect == "sqlite" else ["nofcntl"])


def test_the_package_says_which_systems_it_supports() -> None:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    classifiers = tomllib.loads(pyproject.read_text())["project"]["classifiers"]
    systems = {c for c in classifiers if c.startswith("Operating System ::")}
    assert {"Operating System :: POSIX", "Operating System :: Microsoft :: Windows"} <= systems


# -- 8. fork -------------------------------------------------------------------------


def test_a_store_used_before_fork_works_in_the_child_and_the_parent(store: HubStore) -> None:
    import os

    store.register_agent("parent", "codex")
    with store.unit_of_work(write=False) as uow:  # the parent's read connection, too
        assert uow.get_agent("parent") is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            store.register_agent("child", "codex")
            __import__("gc").collect()  # the parent's dropped connections, collected here
            with store.unit_of_work() as uow:
                uow.audit_log("event", "child", "parent", "t")
            seen = sorted(a.agent_id for a in store.list_all_agents())
            os.write(write, repr(seen).encode())
            code = 0
        except BaseException as exc:
            os.write(write, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, reported
    assert reported == "['child', 'parent']"
    store.register_agent("parent-after", "codex")  # the parent's connections still work
    assert sorted(a.agent_id for a in store.list_all_agents()) == [
        "child", "parent", "parent-after"]
    assert store.get_hub_stats()["total_messages"] == 1


# -- 9, 10. PostgreSQL: connect timeout, refused, a connection killed ----------------


def _pg_url(port: int, query: str = "") -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/x{query}"


def test_a_server_that_never_answers_times_out_as_unavailable() -> None:
    import socket

    from hubstore.errors import DatabaseUnavailable

    with socket.socket() as server:  # accepts (the kernel's backlog), never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as caught:
            HubStore.open(_pg_url(port, "?connect_timeout=1"))
        assert time.monotonic() - began < 3.0
    assert caught.value.__cause__ is not None
    assert "timeout" in str(caught.value).lower()


def test_a_refused_connection_is_unavailable_with_the_reason() -> None:
    import socket

    from hubstore.errors import DatabaseUnavailable

    with socket.socket() as probe:  # a port no one listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    began = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        HubStore.open(_pg_url(port))
    assert time.monotonic() - began < 3.0
    assert "refused" in str(caught.value).lower()


def test_postgresql_connects_with_a_default_timeout_the_url_overrides(postgres: Any) -> None:
    from sqlalchemy.engine import make_url

    from hubstore.engine import CONNECT_TIMEOUT_S, create_hub_engine

    assert CONNECT_TIMEOUT_S == 10
    admin = make_url(str(postgres.admin.url.render_as_string(hide_password=False)))
    for query, expected in (({}, 10), ({"connect_timeout": "3"}, "3")):
        engine = create_hub_engine(admin.update_query_dict(query))
        seen: list[dict[str, Any]] = []
        event.listen(engine, "do_connect", lambda d, r, cargs, cparams, seen=seen: seen.append(
            dict(cparams)))
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT 1")) == 1
        engine.dispose()
        assert seen and seen[0]["connect_timeout"] == expected


def test_a_connection_killed_inside_a_unit_of_work_is_unavailable_then_recovers(
        store: HubStore, request: pytest.FixtureRequest) -> None:
    from hubstore.errors import DatabaseUnavailable, HubStoreError

    if store.dialect != "postgresql":
        # SQLite: no server to lose; the nearest fault is a closed connection.
        with pytest.raises(HubStoreError), store.unit_of_work() as uow:
            uow.register_agent("lost", "codex")
            uow.driver.close()
        store.register_agent("after", "codex")
        assert [a.agent_id for a in store.list_all_agents()] == ["after"]
        return
    postgres = request.getfixturevalue("postgres")
    store.register_agent("before", "codex")
    began = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught, store.unit_of_work() as uow:
        uow.register_agent("lost", "codex")
        pid = uow.connection.scalar(text("SELECT pg_backend_pid()"))
        with postgres.admin.connect() as admin:
            assert admin.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        uow.audit_log("event", "lost", "x", "t")
    assert time.monotonic() - began < 5.0
    assert caught.value.__cause__ is not None
    store.register_agent("after", "codex")  # the pool recovered
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["after", "before"]
    assert store.get_hub_stats()["total_messages"] == 0


# -- 11. retention's pause, close() and the waiters ----------------------------------


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses prune_messages takes between its batches."""
    from hubstore.services import retention

    taken: list[float] = []
    monkeypatch.setattr(retention, "time", type("Clock", (), {
        "sleep": staticmethod(taken.append), "monotonic": staticmethod(time.monotonic)}))
    return taken


def test_prune_pauses_between_batches_only_as_its_own_transactions(
        store: HubStore, sleeps: list[float]) -> None:
    from hubstore.testing.factories import MessageFactory

    now = 10 ** 12
    MessageFactory.create_batch(6, created_at_ms=now - 10_000)
    with store.unit_of_work():  # a store call joined into an open unit of work
        assert store.prune_messages(1000, now_ms=now, batch_size=2) == 6
    assert sleeps == []
    MessageFactory.create_batch(6, created_at_ms=now - 10_000)
    with store.unit_of_work() as uow:  # called on the unit of work
        assert uow.prune_messages(1000, now_ms=now, batch_size=2) == 6
    assert sleeps == []
    MessageFactory.create_batch(6, created_at_ms=now - 10_000)
    assert store.prune_messages(1000, now_ms=now, batch_size=2) == 6
    assert len(sleeps) == 3  # after each full batch, its own short transaction
    assert store.get_hub_stats()["total_messages"] == 0


def test_close_wakes_the_waiters_and_stops_the_watcher(
        db_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from hubstore.services import waiting

    # Closed once the waiter waits (it subscribes before its first claim, which a
    # close could otherwise interrupt: not what this test is about).
    waits = threading.Event()
    real_pause = waiting.pause

    def pause(sub: Any, deadline: float | None) -> bool:
        waits.set()
        return real_pause(sub, deadline)

    monkeypatch.setattr(waiting, "pause", pause)
    store = HubStore.open(db_url)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(
        store.wait_for_assign("w", timeout_s=30)))
    waiter.start()
    assert waits.wait(10), "the waiter never waited"
    assert store.change_watcher()._subs
    watcher = store.change_watcher()
    began = time.monotonic()
    store.close()
    waiter.join(timeout=5)
    assert not waiter.is_alive() and got == [None]
    assert time.monotonic() - began < 2.0
    thread = watcher._thread
    if thread is not None:
        thread.join(timeout=5)
        assert not thread.is_alive()
    assert "_change_watcher" not in store.__dict__
