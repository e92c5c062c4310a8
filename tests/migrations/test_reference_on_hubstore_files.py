"""The reference store on a file hubstore migrated to head (SQLite, the reference's one
database): its schema script leaves hubstore's definitions of the reference's index
names as they are (revision 0011), and the real store (node) writes messages hubstore
reads, polls what hubstore polls and sweeps what hubstore would."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from hubstore import HubStore, IllegalTransition, health
from hubstore.ids import now_ms
from hubstore.models import Message
from tests.helpers import present
from tests.reference_ddl import reference_ddl
from tests.reference_runner import reference_hub, run_reference

REDEFINED = {
    "idx_messages_to_agent": "ON messages (to_agent, created_at_ms, id)",
    "idx_messages_expires": "ON messages (expires_at_ms) WHERE status = 'queued'",
}


def hub_file(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "hub.db"
    url = f"sqlite:///{path}"
    HubStore.open(url, auto_migrate=True).close()
    return path, url


def message_indexes(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return {name: sql for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
            "AND tbl_name = 'messages' AND sql IS NOT NULL")}


def assert_redefined(indexes: dict[str, str]) -> None:
    """The reference's two index names hold hubstore's definitions (revision 0011)."""
    for name, definition in REDEFINED.items():
        assert indexes[name].endswith(definition), indexes[name]


def test_the_references_schema_script_keeps_hubstores_definitions(tmp_path: Path) -> None:
    path, url = hub_file(tmp_path)
    before = message_indexes(path)
    assert_redefined(before)
    assert not {"ix_messages_to_agent_created", "ix_messages_queued_expires"} & set(before)
    for version in (3, 4):  # what the reference runs when its schema version differs
        with sqlite3.connect(path) as conn:
            for statement in reference_ddl(version):
                conn.execute(statement)
    assert message_indexes(path) == before
    assert health.check(make_url(url)) == []  # the layout the models describe


def test_the_reference_store_reads_and_writes_messages_on_a_hubstore_file(
        tmp_path: Path) -> None:
    hub = reference_hub()
    path, url = hub_file(tmp_path)
    with HubStore.open(url) as store:
        store.register_agent("a", "codex", topics=["t"])
        ours: list[Message] = []
        for k in range(3):
            for to, topic in (("a", "d"), ("topic:t", "t")):
                ours.append(store.audit_log("event", "x", to, topic, payload={"k": k}))
                time.sleep(0.002)  # distinct times: the reference orders by time alone
        ours.append(store.audit_log("event", "x", "other", "d"))  # not a's
        due = store.audit_log("event", "x", "b", "d", ttl_ms=0)
    time.sleep(0.005)
    theirs, polled, swept = run_reference(hub, path, [
        ["auditLog", {"type": "event", "from": "y", "to": "a", "topic": "d",
                      "payload": {"n": 5}}],
        ["pollForAgent", "a", {"max_messages": 20, "include_topics": ["t"]}],
        ["sweepExpired"],
    ])
    assert swept["messages"] == 1
    with HubStore.open(url) as store:
        mine = store.poll_for_agent("a", 20, ["t"])
        assert [m.id for m in mine] == [m["id"] for m in polled]
        assert [m.id for m in mine] == [theirs["id"], *(m.id for m in reversed(ours[:6]))]
        written = store.get_message(theirs["id"])
        assert written is not None
        assert (written.from_agent, written.payload, written.status) == ("y", {"n": 5},
                                                                          "queued")
        gone = store.get_message(due.id)
        assert gone is not None and gone.status == "dead_letter"
        assert [d.message_id for d in store.get_dead_letters()] == [due.id]
        assert store.sweep_expired()["messages"] == 0  # the reference swept it already
    assert_redefined(message_indexes(path))


def test_the_reference_store_reads_and_moves_scheduled_jobs_on_a_hubstore_file(
        tmp_path: Path) -> None:
    """Revision 0012's columns: the reference reads a scheduled job with back-off, moves
    and retries it; a job the reference writes is due at once, without back-off."""
    hub = reference_hub()
    path, url = hub_file(tmp_path)
    later = now_ms() + 3_600_000
    with HubStore.open(url) as store:
        scheduled = store.create_assign("lead", "w1", task="later", not_before_ms=later,
                                        retry_backoff_ms=1_000, max_retries=1)
    got, listed, running, failed, retried, theirs = run_reference(hub, path, [
        ["getAssign", scheduled.job_id],
        ["listAssigns", {"worker_agent": "w1"}],
        ["updateAssignStatus", scheduled.job_id, "running"],
        ["updateAssignStatus", scheduled.job_id, "failed"],
        ["retryAssign", scheduled.job_id],
        ["createAssign", {"supervisor_agent": "lead", "worker_agent": "w2", "task": "t"}],
    ])
    assert got["job_id"] == scheduled.job_id and got["task"] == "later"
    assert {k: got[k] for k in scheduled.to_dict()} == scheduled.to_dict()
    assert [job["job_id"] for job in listed] == [scheduled.job_id]
    assert (running["status"], failed["status"], retried["status"]) == (
        "running", "failed", "queued")
    assert retried["attempt"] == 2
    with HubStore.open(url) as store:
        mine = store.get_assign(scheduled.job_id)
        assert mine is not None and mine.status == "queued" and mine.attempt == 2
        assert mine.to_dict() == {k: retried[k] for k in mine.to_dict()}
        assert mine.retry_backoff_ms == 1_000  # kept by the reference's UPDATEs
        written = store.get_assign(theirs["job_id"])
        assert written is not None
        assert (written.not_before_ms, written.retry_backoff_ms) == (None, 0)
        claimed = store.claim_next_assign("w2")
        assert claimed is not None and claimed.job_id == theirs["job_id"]
    assert health.check(make_url(url)) == []


def test_the_references_getters_return_hubstores_quota_columns(tmp_path: Path) -> None:
    """Revisions 0014 and 0017 (docs/compatibility.md): the reference's getters return
    every column of the row, so on a hubstore file also ``limit_key``, ``limit_share``
    and ``unique_key`` (beside 0012's two), as stored; a job the reference writes has
    them NULL."""
    hub = reference_hub()
    path, url = hub_file(tmp_path)
    with HubStore.open(url) as store:
        store.set_assign_limit("codex", max_running=2)
        job = store.assign_async("lead", "w1", task="q", limit_key="codex",
                                 unique_key="build-42")
        claimed = present(store.claim_next_assign("w1"))
        assert claimed.job_id == job.job_id and claimed.limit_share is not None
    got, listed, theirs = run_reference(hub, path, [
        ["getAssign", job.job_id],
        ["listAssigns", {"worker_agent": "w1"}],
        ["createAssign", {"supervisor_agent": "lead", "worker_agent": "w2", "task": "t"}],
    ])
    extra = {"limit_key": "codex", "limit_share": claimed.limit_share,
             "unique_key": "build-42", "not_before_ms": None, "retry_backoff_ms": 0}
    assert {k: got[k] for k in extra} == extra
    assert {k: listed[0][k] for k in extra} == extra
    assert not set(extra) & set(claimed.to_dict())  # hubstore's to_dict: the reference's
    with HubStore.open(url) as store:
        written = present(store.get_assign(theirs["job_id"]))
        assert (written.limit_key, written.limit_share, written.unique_key) == (
            None, None, None)
    assert {k: theirs.get(k) for k in ("limit_key", "limit_share", "unique_key")} == {
        "limit_key": None, "limit_share": None, "unique_key": None}


def test_the_reference_store_on_a_cancelled_job(tmp_path: Path) -> None:
    """Revision 0013's status (docs/compatibility.md): the reference reads a cancelled job
    as stored and lists it by its status; its figures count it nowhere; its moves check
    no transition, so a reference process that moves the job by hand revives it, where
    hubstore's rules refuse."""
    hub = reference_hub()
    path, url = hub_file(tmp_path)
    with HubStore.open(url) as store:
        job = store.assign_async("lead", "w1", task="c")
        cancelled = store.cancel_assign(job.job_id, reason="dropped")
        assert cancelled is not None
        with pytest.raises(IllegalTransition):
            store.update_assign_status(job.job_id, "running")
    got, listed, active, patched, revived = run_reference(hub, path, [
        ["getAssign", job.job_id],
        ["listAssigns", {"status": "cancelled"}],
        ["listAssigns", {"statuses": ["queued", "running"]}],
        ["updateAssignStatus", job.job_id, None, {"task": "renamed"}],
        ["updateAssignStatus", job.job_id, "running"],
    ])
    assert {k: got[k] for k in cancelled.to_dict()} == cancelled.to_dict()
    assert got["status"] == "cancelled" and got["error"] == {
        "message": "assign job cancelled", "reason": "dropped"}
    assert [j["job_id"] for j in listed] == [job.job_id] and active == []
    assert (patched["status"], patched["task"]) == ("cancelled", "renamed")
    assert revived["status"] == "running"
    with HubStore.open(url) as store:
        assert present(store.get_assign(job.job_id)).status == "running"
        assert store.get_audit_stats()["assign_running"] == 1
    assert health.check(make_url(url)) == []


def test_the_references_getters_return_the_claimer_and_the_timeout_origin(
        tmp_path: Path) -> None:
    """Revision 0020 (docs/compatibility.md): the reference's getters return
    ``timeout_from`` and ``claimed_by`` as stored; a job the reference writes takes
    ``'create'`` (its own meaning) and no claimer, and hubstore reads it so."""
    hub = reference_hub()
    path, url = hub_file(tmp_path)
    with HubStore.open(url) as store:
        job = store.assign_async("lead", "w1", task="long", timeout_ms=60_000,
                                 timeout_from="claim")
        claimed = present(store.claim_next_assign("w1", claimed_by="runner-7"))
        assert claimed.job_id == job.job_id
    got, listed, theirs = run_reference(hub, path, [
        ["getAssign", job.job_id],
        ["listAssigns", {"worker_agent": "w1"}],
        ["createAssign", {"supervisor_agent": "lead", "worker_agent": "w2", "task": "t"}],
    ])
    extra = {"timeout_from": "claim", "claimed_by": "runner-7"}
    assert {k: got[k] for k in extra} == extra
    assert {k: listed[0][k] for k in extra} == extra
    assert {k: theirs.get(k) for k in extra} == {"timeout_from": "create",
                                                 "claimed_by": None}
    with HubStore.open(url) as store:
        written = present(store.get_assign(theirs["job_id"]))
        assert (written.timeout_from, written.claimed_by) == ("create", None)
