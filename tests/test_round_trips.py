"""PostgreSQL round trips (issue 11): no ping before a connection in steady use, a ping
(and a fresh connection) after an idle spell, and claim and finish as one statement each,
in autocommit, with the same rows as the general path."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text

from hubstore import HubStore, engine


def _backend_pid(store: HubStore) -> int:
    with store.unit_of_work(write=False) as uow:
        return int(uow.connection.scalar(text("SELECT pg_backend_pid()")))


def _statements(store: HubStore) -> list[str]:
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_: seen.append(statement.split()[0].upper()))
    return seen


def test_an_idle_connection_killed_by_the_server_is_replaced_unseen(
        store: HubStore, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite has no server connection to lose")
    postgres = request.getfixturevalue("postgres")
    store.register_agent("before", "codex")
    pid = _backend_pid(store)
    with postgres.admin.connect() as admin:
        assert admin.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    monkeypatch.setattr(engine, "IDLE_PING_S", 0.0)  # every checkout counts as idle
    store.register_agent("after", "codex")  # pinged, found dead, connected afresh
    assert _backend_pid(store) != pid
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["after", "before"]


def test_claim_and_finish_are_one_statement_each_without_begin_or_commit(
        store: HubStore) -> None:
    store.assign_async("lead", "w", task="one", max_retries=0)
    seen = _statements(store)
    job = store.claim_next_assign("w")
    assert job is not None and job.status == "running"
    outcome = store.report_assign_result(job.job_id, "succeeded", worker_agent="w",
                                         attempt=job.attempt, result={"n": 1})
    if store.dialect == "postgresql":
        assert seen == ["UPDATE", "WITH"]  # autocommit: no BEGIN, no COMMIT, no ping
    assert outcome.event == "completed" and outcome.job.status == "succeeded"
    message = outcome.message
    assert message is not None
    stored = store.get_message(message.id)
    assert stored is not None
    assert stored.to_dict() == message.to_dict()
    assert stored.payload["status"] == "succeeded" and stored.payload["result"] == {"n": 1}
    assert (stored.type, stored.from_agent, stored.to_agent, stored.topic) == (
        "event", "w", "lead", "assign.result")
    assert stored.correlation_id == outcome.job.correlation_id
    assert stored.expires_at_ms == stored.created_at_ms + outcome.job.ttl_ms


def test_a_report_off_the_routine_path_still_runs_in_one_transaction(
        store: HubStore) -> None:
    job = store.assign_async("lead", "w", task="retry me", max_retries=1)
    claimed = store.claim_next_assign("w")
    assert claimed is not None and claimed.job_id == job.job_id
    outcome = store.report_assign_result(job.job_id, "failed", worker_agent="w",
                                         attempt=claimed.attempt, error={"e": 1})
    assert outcome.event == "retry_scheduled"
    again = store.get_assign(job.job_id)
    assert again is not None and again.status == "queued" and again.retry_count == 1
    kinds: list[Any] = [m.payload["event"] for m in store.get_messages_by_trace(job.trace_id)
                        if m.type == "event"]
    assert kinds.count("retry_scheduled") == 1
