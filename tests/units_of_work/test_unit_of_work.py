"""The unit of work: one transaction, commit or rollback, events after commit; a
failed statement fails the whole unit of work, loudly (never a silent loss), on both
dialects, and the connection goes back clean."""

from __future__ import annotations

import contextlib
import time

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from hubstore import HubStore, UnitOfWork, ValidationError
from hubstore.testing.factories import AgentFactory
from hubstore.types import AssignEvent
from tests.helpers import FAST_S


def test_one_transaction_commits_on_a_clean_exit(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        assert isinstance(uow, UnitOfWork) and isinstance(uow.session, Session)
        job = uow.create_assign(supervisor_agent="lead", worker_agent="w1", task="t")
        uow.audit_log(type="event", from_agent="lead", to_agent="w1", topic="x")
        inside = uow.get_assign(job.job_id)
        assert inside is not None
        assert inside.task == "t"  # visible inside
    stored = store.get_assign(job.job_id)
    assert stored is not None
    assert stored.task == "t"
    assert job.task == "t"  # usable after the unit of work ended
    assert store.get_hub_stats()["total_messages"] == 1


def test_an_exception_rolls_everything_back_and_propagates(store: HubStore) -> None:
    with pytest.raises(KeyError), store.unit_of_work() as uow:
        job = uow.create_assign("lead", "w1")
        uow.register_agent("a", "codex")
        raise KeyError("boom")
    assert store.get_assign(job.job_id) is None
    assert store.get_agent("a") is None


def test_a_failed_operation_inside_leaves_the_database_as_it_was(store: HubStore) -> None:
    store.register_agent("a", "codex")
    with pytest.raises(ValidationError), store.unit_of_work() as uow:
        uow.update_agent_status("a", "offline")
        uow.audit_log("event", "a", "b", "t", priority=99)
    agent = store.get_agent("a")
    assert agent is not None
    assert agent.status == "online"


def test_listeners_hear_only_committed_changes(store: HubStore) -> None:
    heard: list[tuple[str, str, str]] = []
    unsubscribe = store.on_assign_status_change(lambda event, job: heard.append(
        (event["job_id"], event["status"], job.status)))
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        uow.create_assign("lead", "w")
        raise RuntimeError
    assert heard == []
    with store.unit_of_work() as uow:
        job = uow.create_assign("lead", "w")
        uow.update_assign_status(job.job_id, "running")
        assert heard == []  # nothing before the commit
    assert heard == [(job.job_id, "queued", "queued"), (job.job_id, "running", "running")]
    unsubscribe()
    store.update_assign_status(job.job_id, "succeeded")
    assert len(heard) == 2


def test_event_shape(store: HubStore) -> None:
    events: list[AssignEvent] = []
    store.on_assign_status_change(lambda event, job: events.append(event))
    job = store.create_assign("lead", "w")
    store.update_assign_status(job.job_id, "failed", error={"message": "x"})
    assert events[-1]["status"] == "failed" and events[-1]["result"] == {"message": "x"}
    assert events[-1]["timestamp"].endswith("Z") and events[-1]["timestamp"][10] == "T"


def test_store_methods_join_the_unit_of_work(store: HubStore) -> None:
    with store.unit_of_work() as uow, uow.unit_of_work() as inner:
        assert inner is uow


def test_a_unit_of_work_cannot_be_entered_twice(store: HubStore) -> None:
    uow = store.unit_of_work()
    with uow:
        pass
    with pytest.raises(RuntimeError), uow:
        pass


def test_threads_share_a_store_safely(store: HubStore) -> None:
    import threading

    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(10):
                store.register_agent(f"t{t}-{i}", "codex")
                with store.unit_of_work() as uow:
                    uow.refresh_lease(f"t{t}-{i}")
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    # More threads than a default connection pool holds (5 + 10 overflow).
    threads = [threading.Thread(target=work, args=(t,)) for t in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.list_all_agents()) == 200


def test_a_failed_statement_leaves_the_connection_usable(store: HubStore) -> None:
    from sqlalchemy import text

    with pytest.raises(ValidationError) as caught, store.unit_of_work() as uow:
        uow.connection.execute(text(
            "INSERT INTO agents (agent_id, cli, last_seen_ms, lease_expires_ms, status) "
            "VALUES ('x', 'nope', 1, 1, 'online')"))
    assert "ck_agents_cli" in str(caught.value) and caught.value.__cause__ is not None
    store.register_agent("y", "codex")
    assert [a.agent_id for a in store.list_all_agents()] == ["y"]


def test_a_failed_commit_leaves_the_connection_clean(store: HubStore,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import event

    calls = {"n": 0}

    def failing_commit(conn: object) -> None:
        if calls["n"] == 0:
            calls["n"] += 1
            raise RuntimeError("disk full")

    event.listen(store.engine, "commit", failing_commit)
    with pytest.raises(RuntimeError, match="disk full"), store.unit_of_work() as uow:
        uow.register_agent("lost", "codex")
    store.register_agent("kept", "codex")  # the same thread's connection, usable again
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]


def test_after_commit_actions_run_once_committed_and_never_after_a_rollback(
        store: HubStore, caplog: pytest.LogCaptureFixture) -> None:
    ran: list[object] = []
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        uow.register_agent("lost", "codex")
        uow.after_commit(lambda: ran.append("rolled back"))
        raise RuntimeError
    assert ran == []

    def sees_the_commit() -> None:
        # Runs after the connection went back: a fresh unit of work sees the row.
        ran.append([a.agent_id for a in store.list_all_agents()])

    def fails() -> None:
        raise OSError("maintenance failed")

    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        uow.after_commit(fails)
        uow.after_commit(sees_the_commit)
        assert ran == []
    assert ran == [["kept"]]  # a failing action is logged; the next one still runs
    assert "maintenance failed" in caplog.text


# --- a failed statement fails the whole unit of work, loudly ----------------------


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
