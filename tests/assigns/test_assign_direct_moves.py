"""update_assign_status in one guarded UPDATE (issue 11): the routine moves (queued to
running, an active job to a terminal status, with a result, error or message id) are
one statement in autocommit, and write exactly what the general path (lock, check the
transition table, compare-and-set) writes, from every row the rules would rewrite too.

Each case moves twin jobs from the same row at the same clock: one by the direct path,
one with it switched off; the rows, the returned jobs and the events must be equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from hubstore import HubStore
from hubstore.errors import IllegalTransition
from hubstore.models import AssignJob
from hubstore.services import messages
from hubstore.services.assigns import creating, handoffs
from hubstore.services.assigns import moves as assigns
from hubstore.services.assigns import reports as assign_hub
from tests.factories import AssignJobFactory, bind, unbind
from tests.helpers import Heard, driver_trace, engine_statements

NOW = 1_800_000_000_000


@pytest.fixture
def factories(store: HubStore) -> Iterator[None]:
    bind(store)
    yield
    unbind()


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (assigns, assign_hub, creating, handoffs, messages):
        monkeypatch.setattr(module, "now_ms", lambda: NOW)


def _twins(store: HubStore, **fields: Any) -> tuple[str, str]:
    """Two jobs with the same row but their ids."""
    shared = {"trace_id": "trace", "correlation_id": "corr", "created_at_ms": NOW - 5_000,
              "updated_at_ms": NOW - 5_000, "deadline_ms": NOW + 60_000, "task": "same",
              **fields}
    return (AssignJobFactory.create(job_id="direct", **shared).job_id,
            AssignJobFactory.create(job_id="general", **shared).job_id)


def _set_raw(store: HubStore, sql: str) -> None:
    """Write values the store's rules never write (as another program might have)."""
    with store.unit_of_work() as uow:
        uow.connection.execute(text(f"UPDATE assign_jobs SET {sql}"))


def _row(store: HubStore, job_id: str) -> dict[str, Any]:
    with store.unit_of_work(write=False) as uow:
        found = uow.connection.execute(
            text("SELECT * FROM assign_jobs WHERE job_id = :j"), {"j": job_id}).mappings().one()
    return {key: value for key, value in found.items() if key != "job_id"}


def _move_both(store: HubStore, monkeypatch: pytest.MonkeyPatch, target: str,
               patch: dict[str, Any]) -> tuple[AssignJob | None, AssignJob | None]:
    direct = store.update_assign_status("direct", target, **patch)  # type: ignore[arg-type]
    with monkeypatch.context() as off:
        off.setattr(assigns, "DIRECT_TARGETS", frozenset())
        general = store.update_assign_status("general", target, **patch)  # type: ignore[arg-type]
    return direct, general


def _same_move(store: HubStore, heard: Heard, direct: AssignJob | None,
               general: AssignJob | None) -> None:
    assert direct is not None and general is not None
    assert _row(store, "direct") == _row(store, "general")
    mine, theirs = direct.to_dict(), general.to_dict()
    assert mine.pop("job_id") == "direct" and theirs.pop("job_id") == "general"
    assert mine == theirs
    assert [(e["job_id"], e["status"], e["result"], e["timestamp"]) for e, _ in heard] == [
        (job_id, direct.status, direct.result if direct.result is not None else direct.error,
         heard[0][0]["timestamp"]) for job_id in ("direct", "general")]


ROUTINE = [
    ("queued", "running", {}),
    ("queued", "succeeded", {"result": {"ok": True}}),
    ("running", "succeeded", {"result": [1, "two", None]}),
    ("running", "failed", {"error": {"message": "boom"}, "last_message_id": "m-1"}),
    ("running", "timed_out", {"result": None}),
    ("queued", "timed_out", {"error": "late"}),
]


@pytest.mark.parametrize(("source", "target", "patch"), ROUTINE)
def test_a_routine_move_writes_what_the_general_path_writes(
        store: HubStore, factories: None, frozen: None, heard: Heard,
        monkeypatch: pytest.MonkeyPatch, source: str, target: str,
        patch: dict[str, Any]) -> None:
    started = NOW - 1_000 if source == "running" else None
    _twins(store, status=source, started_at_ms=started, result={"old": 1})
    direct, general = _move_both(store, monkeypatch, target, patch)
    _same_move(store, heard, direct, general)
    assert direct is not None and direct.status == target and direct.updated_at_ms == NOW


#: Rows the rules rewrite beyond the patch (a bare move normalises them): the direct
#: statement must leave them to the general path, which gives the same result.
ODD_ROWS = {
    "no deadline": "deadline_ms = NULL",
    "deadline 0": "deadline_ms = 0",
    "started at 0": "started_at_ms = 0",
    "already started": f"started_at_ms = {NOW - 9_000}",
    "already completed": f"completed_at_ms = {NOW - 9_000}",
    "attempt 0": "attempt = 0",
    "negative retry count": "retry_count = -2",
    "timeout below the range": "timeout_ms = 50",
    "ttl above the range": "ttl_ms = 1000000000000",
    "JSON null payload": "payload_json = 'null'",
}
SQLITE_ODD_ROWS = {  # SQLite keeps whatever type it is given
    "priority 5.5": "priority = 5.5",
    "attempt as text": "attempt = '2'",  # (INTEGER affinity keeps it a number)
    "deadline as empty text": "deadline_ms = ''",
    "padded null payload": "payload_json = ' null' || char(10)",
}


def _odd_twins(store: HubStore, odd: str, **fields: Any) -> None:
    """Twin jobs (see _twins), both then given the odd row named ``odd``."""
    if odd in SQLITE_ODD_ROWS and store.dialect != "sqlite":
        pytest.skip("PostgreSQL's columns keep their types")
    _twins(store, **fields)
    change = {**ODD_ROWS, **SQLITE_ODD_ROWS}[odd]
    if odd == "JSON null payload" and store.dialect == "postgresql":
        change = "payload_json = 'null'::jsonb"
    _set_raw(store, change)


@pytest.mark.parametrize("target", ["running", "succeeded"])
@pytest.mark.parametrize("odd", sorted({**ODD_ROWS, **SQLITE_ODD_ROWS}))
def test_a_row_the_rules_would_rewrite_moves_as_the_general_path_moves_it(
        store: HubStore, factories: None, frozen: None, heard: Heard,
        monkeypatch: pytest.MonkeyPatch, odd: str, target: str) -> None:
    _odd_twins(store, odd, status="queued")
    patch = {"result": {"n": 1}} if target == "succeeded" else {}
    direct, general = _move_both(store, monkeypatch, target, patch)
    _same_move(store, heard, direct, general)


@pytest.mark.parametrize("patch", [
    {"attempt": 0}, {"timeout_ms": 10}, {"deadline_ms": None}, {"started_at_ms": 5},
    {"payload": None}, {"priority": "7"}, {"result": 1, "retry_count": 0}])
def test_a_patch_the_rules_read_moves_as_the_general_path_moves_it(
        store: HubStore, factories: None, frozen: None, heard: Heard,
        monkeypatch: pytest.MonkeyPatch, patch: dict[str, Any]) -> None:
    _twins(store, status="queued", payload={"p": 1})
    direct, general = _move_both(store, monkeypatch, "running", patch)
    _same_move(store, heard, direct, general)


@pytest.mark.parametrize(("target", "patch"), [
    ("running", {}), ("succeeded", {"result": {"ok": True}})])
def test_a_routine_move_is_one_statement_without_begin_or_commit(
        store: HubStore, factories: None, target: str, patch: dict[str, Any]) -> None:
    AssignJobFactory.create(job_id="j", status="queued")
    seen = engine_statements(store) if store.dialect == "postgresql" else driver_trace(store)
    moved = store.update_assign_status("j", target, **patch)  # type: ignore[arg-type]
    assert moved is not None and moved.status == target
    if store.dialect == "postgresql":
        assert seen == ["UPDATE"]
    else:  # (SQLite's trace also reports the statements of triggers)
        assert seen[0] == "UPDATE" and not {"BEGIN", "COMMIT", "SELECT"} & set(seen)
    with HubStore.open(store.engine.url) as other:  # committed: another store sees it
        again = other.get_assign("j")
        assert again is not None and again.to_dict() == moved.to_dict()


def test_what_the_direct_statement_does_not_cover_still_takes_the_rules(
        store: HubStore, factories: None, heard: Heard) -> None:
    AssignJobFactory.create(job_id="done", status="succeeded", completed_at_ms=5)
    AssignJobFactory.create(job_id="failed", status="failed")
    AssignJobFactory.create(job_id="busy", status="running", started_at_ms=7)
    assert store.update_assign_status("missing", "running") is None
    with pytest.raises(IllegalTransition, match="cannot move from succeeded to running"):
        store.update_assign_status("done", "running")
    with pytest.raises(IllegalTransition, match="only by a retry"):
        store.update_assign_status("failed", "queued")
    before = store.get_assign("done")
    same = store.update_assign_status("done", "succeeded", result={"again": 1})
    assert same is not None and before is not None and same.to_dict() == before.to_dict()
    progress = store.update_assign_status("busy", "running", result={"half": True})
    assert progress is not None and progress.result == {"half": True}
    assert progress.started_at_ms == 7
    assert heard == []  # no status changed


def test_a_direct_move_inside_a_unit_of_work_joins_it(
        store: HubStore, factories: None, heard: Heard) -> None:
    AssignJobFactory.create(job_id="j", status="queued")
    with pytest.raises(RuntimeError), store.unit_of_work():
        moved = store.update_assign_status("j", "running")
        assert moved is not None and moved.status == "running"
        raise RuntimeError("roll it back")
    again = store.get_assign("j")
    assert again is not None and again.status == "queued" and again.started_at_ms is None
    assert heard == []  # told only after a commit


@pytest.mark.parametrize("odd", sorted({**ODD_ROWS, **SQLITE_ODD_ROWS}))
@pytest.mark.parametrize(("target", "report"), [
    ("succeeded", {"result": {"ok": 1}}), ("failed", {"error": {"message": "boom"}})])
def test_the_hubs_routine_finish_leaves_a_row_the_rules_rewrite_to_the_general_path(
        store: HubStore, factories: None, frozen: None, monkeypatch: pytest.MonkeyPatch,
        odd: str, target: str, report: dict[str, Any]) -> None:
    """report_assign_result's one-statement finish (services/assigns/reports.py) takes only
    the rows the direct move takes: a row the rules would rewrite is finished, and its
    supervisor's event written, as the locking path does it."""
    _odd_twins(store, odd, status="running", started_at_ms=NOW - 1_000, worker_agent="w")
    routine = store.report_assign_result("direct", target, worker_agent="w", **report)
    with monkeypatch.context() as off:
        off.setattr(assign_hub, "finish_routine", lambda *args: None)
        general = store.report_assign_result("general", target, worker_agent="w", **report)
    assert _row(store, "direct") == _row(store, "general")
    assert routine.event == general.event
    mine, theirs = routine.job.to_dict(), general.job.to_dict()
    assert mine.pop("job_id") == "direct" and theirs.pop("job_id") == "general"
    assert mine == theirs
    assert routine.message is not None and general.message is not None
    sent, expected = routine.message.to_dict(), general.message.to_dict()
    del sent["id"], expected["id"]
    sent["payload"].pop("job_id"), expected["payload"].pop("job_id")
    assert sent == expected
