"""triflux 10.17.4's reflexion calls: list_reflexion, patch_reflexion, delete_reflexion.

Their semantics on both dialects, the project_slug index in the plans (100,000 entries),
and a cross-check against the real 10.17.4 store run through node.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from hubstore import HubStore, ValidationError
from hubstore.ids import now_ms
from hubstore.models import ReflexionEntry
from hubstore.services.reflexion import list_statement
from tests.factories import ReflexionEntryFactory
from tests.helpers import present
from tests.reference_runner import reference_hub, run_reference


def ids(entries: list[ReflexionEntry]) -> list[str]:
    return [e.id for e in entries]


def snapshot(store: HubStore) -> list[dict[str, Any]]:
    with store.unit_of_work(write=False) as uow:
        return [e.to_dict() for e in uow.session.query(ReflexionEntry).order_by("id")]


# --- list_reflexion ----------------------------------------------------------------

def test_list_orders_by_confidence_then_updated_then_id(store: HubStore) -> None:
    rows = [ReflexionEntryFactory.create(confidence=c, updated_at_ms=u)
            for c, u in [(0.5, 10), (0.9, 5), (0.5, 20), (0.1, 99), (0.5, 20), (0.9, 5)]]
    expected = sorted(rows, key=lambda e: (-e.confidence, -e.updated_at_ms, e.id))
    assert ids(store.list_reflexion()) == ids(expected)
    assert [e.to_dict() for e in store.list_reflexion()] == [e.to_dict() for e in expected]


def test_list_filters_by_type_and_min_confidence(store: HubStore) -> None:
    low = ReflexionEntryFactory.create(confidence=0.2)
    edge = ReflexionEntryFactory.create(confidence=0.5, type="adaptive")
    high = ReflexionEntryFactory.create(confidence=0.8, type="adaptive")
    assert ids(store.list_reflexion(type="adaptive")) == [high.id, edge.id]
    assert ids(store.list_reflexion(type="reflexion")) == [low.id]
    assert ids(store.list_reflexion(min_confidence=0.5)) == [high.id, edge.id]  # inclusive
    assert ids(store.list_reflexion(min_confidence=1)) == []
    assert ids(store.list_reflexion(min_confidence=-math.inf)) == [high.id, edge.id, low.id]
    assert ids(store.list_reflexion(type="reflexion", min_confidence=0.3)) == []
    assert ids(store.list_reflexion(type="")) == ids(store.list_reflexion())  # no filter
    assert len(store.list_reflexion(type=None, min_confidence=None, project_slug="")) == 3


def test_list_project_slug_is_strict_equality(store: HubStore) -> None:
    text_one = ReflexionEntryFactory.create(adaptive_state={"project_slug": "1"})
    for state in ({"project_slug": 1}, {"project_slug": ["1"]}, {"project_slug": {"1": 1}},
                  {"project_slug": None}, {"project_slug": True}, {"nested": {"project_slug": "1"}},
                  {}, ["1"], "1", {"project_slug": "1 "}, {"project_slug": "01"}):
        ReflexionEntryFactory.create(adaptive_state=state)
    other = ReflexionEntryFactory.create(adaptive_state={"project_slug": "ünï \"q\" ✓"},
                                         type="adaptive")
    assert ids(store.list_reflexion(project_slug="1")) == [text_one.id]
    assert ids(store.list_reflexion(project_slug='["1"]')) == []
    assert ids(store.list_reflexion(project_slug="true")) == []
    assert ids(store.list_reflexion(project_slug="ünï \"q\" ✓")) == [other.id]
    assert ids(store.list_reflexion(project_slug="ünï \"q\" ✓", type="reflexion")) == []
    assert len(store.list_reflexion(project_slug=None)) == 13


def test_list_with_unreadable_adaptive_state(store: HubStore, backend: str) -> None:
    """A legacy row whose adaptive_state_json is not JSON reads as {} and never matches
    (SQLite only: PostgreSQL's jsonb cannot hold such text)."""
    if backend != "sqlite":
        pytest.skip("jsonb holds only valid JSON")
    entry = ReflexionEntryFactory.create(adaptive_state={"project_slug": "p"})
    with store.unit_of_work() as uow:
        uow.connection.execute(text("UPDATE reflexion_entries SET adaptive_state_json = "
                                    "'{\"project_slug\": \"p\"' WHERE id = :id"), {"id": entry.id})
    assert store.list_reflexion(project_slug="p") == []
    assert present(store.get_reflexion(entry.id)).adaptive_state == {}
    ReflexionEntryFactory.create(adaptive_state={"project_slug": "p"})  # writes still work
    assert len(store.list_reflexion(project_slug="p")) == 1


@pytest.mark.parametrize("kwargs", [
    {"type": "bogus"}, {"type": 1}, {"min_confidence": "0.5"}, {"min_confidence": True},
    {"min_confidence": math.nan}, {"min_confidence": 10**400}, {"project_slug": 5},
    {"project_slug": ["a"]}, {"project_slug": "a\x00b"},
])
def test_list_refuses_bad_filters(store: HubStore, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        store.list_reflexion(**kwargs)


# --- page_reflexion -------------------------------------------------------------------

def _pages(store: HubStore, size: int, **filters: Any) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = store.page_reflexion(**filters, limit=size, after=after)
        pages.append(ids(page.entries))
        if page.next is None:
            return pages
        after = page.next


def test_pages_hold_the_lists_entries_once_in_its_order(store: HubStore) -> None:
    """Ties on confidence and on updated_at_ms, confidences that are no short decimal,
    ids with the cursor's separator: every page continues exactly where the last ended."""
    for i in range(23):
        ReflexionEntryFactory.create(
            id=f"id:{i % 5}:{i}", confidence=[0.1, 1 / 3, 0.9, 0.9][i % 4],
            updated_at_ms=[5, 5, 7][i % 3], type=["reflexion", "adaptive"][i % 2],
            adaptive_state={"project_slug": ["a", "b"][i % 2]})
    for filters in ({}, {"type": "adaptive"}, {"min_confidence": 1 / 3},
                    {"project_slug": "b", "min_confidence": 0.5}):
        listed = ids(store.list_reflexion(**filters))
        for size in (1, 4, 23, 1_000):
            pages = _pages(store, size, **filters)
            assert [e for page in pages for e in page] == listed, (filters, size)
            assert all(len(page) == size for page in pages[:-1])
    last = store.page_reflexion(limit=23)
    assert len(last.entries) == 23 and last.next is None


@pytest.mark.parametrize("after", ["", "x", "0.5:5", "nan:5:i", "0.5:five:i", "0.5:5:",
                                   "0.5:99999999999999999999:i", 5, ["0.5:5:i"]])
def test_a_bad_reflexion_cursor_is_refused(store: HubStore, after: Any) -> None:
    with pytest.raises(ValidationError, match="after"):
        store.page_reflexion(after=after)


@pytest.mark.parametrize("limit", [0, 1_001, 2.5, "5", True])
def test_a_bad_reflexion_page_size_is_refused(store: HubStore, limit: Any) -> None:
    with pytest.raises(ValidationError, match="limit"):
        store.page_reflexion(limit=limit)


# --- the project_slug index ----------------------------------------------------------

def _fill(store: HubStore, count: int) -> None:
    """``count`` entries, one slug in a thousand 'wanted', inserted by the database."""
    with store.unit_of_work() as uow:
        series = ("WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s "
                  "WHERE n < :count) SELECT n FROM s" if uow.dialect == "sqlite"
                  else "SELECT generate_series(1, :count) AS n")
        state = ("'{\"project_slug\":\"' || CASE WHEN n % 1000 = 0 THEN 'wanted' "
                 "ELSE 'p' || (n % 997) END || '\"}'")
        if uow.dialect == "postgresql":
            state = f"CAST({state} AS jsonb)"
        uow.connection.execute(text(
            "INSERT INTO reflexion_entries (id, type, error_pattern, error_message, "
            "context_json, solution, adaptive_state_json, confidence, hit_count, "
            "success_count, last_hit_ms, created_at_ms, updated_at_ms) "
            f"SELECT 'e' || n, 'adaptive', 'pattern ' || n, 'm', '{{}}', 's', {state}, "
            f"(n % 100) / 100.0, 1, 0, n, n, n FROM ({series}) AS s"), {"count": count})
        uow.connection.execute(text("ANALYZE"))


def _plan(store: HubStore) -> str:
    with store.unit_of_work(write=False) as uow:
        prepared = list_statement(uow.sql, False, False, True)
        assert isinstance(prepared.statement, ClauseElement)
        compiled = prepared.statement.compile(dialect=uow.connection.dialect)
        assert isinstance(compiled, SQLCompiler)
        if uow.dialect == "sqlite":
            rows = uow.driver.execute(f"EXPLAIN QUERY PLAN {compiled}", ["wanted"])
            return " ".join(str(row[3]) for row in rows)
        result = uow.connection.exec_driver_sql(f"EXPLAIN {compiled}", {"p_slug": '"wanted"'})
        return " ".join(str(row[0]) for row in result)


def test_project_slug_filter_uses_the_index_on_100k_entries(store: HubStore) -> None:
    _fill(store, 100_000)
    plan = _plan(store)
    assert "ix_reflexion_project_slug" in plan, plan
    found = store.list_reflexion(project_slug="wanted")
    assert len(found) == 100
    assert all(e.adaptive_state == {"project_slug": "wanted"} for e in found)
    assert [e.confidence for e in found] == sorted((e.confidence for e in found), reverse=True)


# --- patch_reflexion and delete_reflexion ------------------------------------------------

def test_patch_sets_fields_as_given(store: HubStore) -> None:
    entry = ReflexionEntryFactory.create(context={"cli": "codex"}, adaptive_state={"a": 1},
                                         solution_code="x()")
    before = now_ms()
    patched = present(store.patch_reflexion(entry.id, confidence=0.97, hit_count=40,
                                            success_count=1, solution="new"))
    after = now_ms()
    assert patched.confidence == 0.97  # not recalculated from the counts
    assert (patched.hit_count, patched.success_count, patched.solution) == (40, 1, "new")
    assert patched.context == {"cli": "codex"} and patched.adaptive_state == {"a": 1}
    assert patched.solution_code == "x()" and patched.created_at_ms == entry.created_at_ms
    assert before <= patched.updated_at_ms <= after
    assert present(store.get_reflexion(entry.id)).to_dict() == patched.to_dict()


def test_patch_none_keeps_json_fields_and_clears_solution_code(store: HubStore) -> None:
    entry = ReflexionEntryFactory.create(context={"k": "v"}, adaptive_state={"s": [1]},
                                         solution_code="code")
    patched = present(store.patch_reflexion(entry.id, context=None, adaptive_state=None,
                                            solution_code=None, updated_at_ms=None))
    assert patched.context == {"k": "v"} and patched.adaptive_state == {"s": [1]}
    assert patched.solution_code is None
    replaced = present(store.patch_reflexion(
        entry.id, context={}, adaptive_state={"project_slug": "p"}, type="adaptive",
        error_pattern="brand new pattern", error_message="E", last_hit_ms=5,
        updated_at_ms=7))
    assert replaced.context == {} and replaced.type == "adaptive"
    assert (replaced.last_hit_ms, replaced.updated_at_ms) == (5, 7)
    assert ids(store.list_reflexion(project_slug="p")) == [entry.id]
    assert ids(store.find_reflexion("brand new pattern")) == [entry.id]
    assert ids(store.find_reflexion("new pat")) == [entry.id]  # the search index follows


def test_patch_and_delete_a_missing_entry(store: HubStore) -> None:
    assert store.patch_reflexion("nope", confidence=1.0) is None
    assert store.delete_reflexion("nope") is False


@pytest.mark.parametrize("patch", [
    {"created_at_ms": 1}, {"confidense": 0.5}, {"type": "bogus"},
    {"type": None}, {"error_pattern": None}, {"solution": 3}, {"confidence": "0.5"},
    {"confidence": math.inf}, {"confidence": None}, {"hit_count": 1.5}, {"hit_count": 2**63},
    {"success_count": True}, {"last_hit_ms": None}, {"updated_at_ms": "now"},
    {"context": [1]}, {"adaptive_state": {"x": math.nan}}, {"solution_code": b"x"},
    {"confidence": 0.9, "bogus": 1},
])
def test_patch_refuses_bad_fields_and_writes_nothing(store: HubStore,
                                                     patch: dict[str, Any]) -> None:
    entry = ReflexionEntryFactory.create()
    before = snapshot(store)
    with pytest.raises(ValidationError):
        store.patch_reflexion(entry.id, **patch)
    assert snapshot(store) == before


def test_delete(store: HubStore) -> None:
    keep, gone = ReflexionEntryFactory.create(), ReflexionEntryFactory.create()
    assert store.delete_reflexion(gone.id) is True
    assert store.delete_reflexion(gone.id) is False
    assert store.get_reflexion(gone.id) is None
    assert ids(store.list_reflexion()) == [keep.id]
    for bad in ("", None, 5):
        with pytest.raises(ValidationError):
            store.delete_reflexion(bad)  # type: ignore[arg-type]


def test_patch_and_delete_roll_back_with_their_unit_of_work(store: HubStore) -> None:
    entry = ReflexionEntryFactory.create()
    before = snapshot(store)
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        assert present(uow.patch_reflexion(entry.id, confidence=0.1)).confidence == 0.1
        assert uow.delete_reflexion(entry.id) is True
        assert uow.list_reflexion() == []
        raise RuntimeError("roll back")
    assert snapshot(store) == before


# --- the same calls on triflux 10.17.4's own store (node) -----------------------------

SEED: list[dict[str, Any]] = [
    {"error_pattern": "a", "confidence": 0.5, "updated_at_ms": 100,
     "adaptive_state": {"project_slug": "alpha"}, "type": "adaptive"},
    {"error_pattern": "b", "confidence": 0.9, "updated_at_ms": 50,
     "adaptive_state": {"project_slug": 1}, "context": {"cli": "codex"}},
    {"error_pattern": "c", "confidence": 0.5, "updated_at_ms": 200,
     "adaptive_state": {"project_slug": "1"}, "solution_code": "fix()"},
    {"error_pattern": "d", "confidence": 0.2, "updated_at_ms": 300, "type": "adaptive",
     "adaptive_state": {"project_slug": "alpha", "rule": [1, 2]}},
    {"error_pattern": "e", "confidence": 0.75, "updated_at_ms": 10,
     "adaptive_state": {"project_slug": ["alpha"]}},
]
LISTS: list[dict[str, Any]] = [
    {}, {"type": "adaptive"}, {"type": ""}, {"min_confidence": 0.5}, {"min_confidence": 0.9},
    {"project_slug": "alpha"}, {"project_slug": "1"}, {"project_slug": ""},
    {"project_slug": "alpha", "type": "adaptive", "min_confidence": 0.3},
]


def _js_filters(filters: dict[str, Any]) -> dict[str, Any]:
    names = {"type": "type", "min_confidence": "minConfidence", "project_slug": "projectSlug"}
    return {names[k]: v for k, v in filters.items()}


def _operations(seeded: list[str]) -> list[tuple[str, list[Any]]]:
    """The calls of the cross-check after seeding, as (hubstore name, arguments)."""
    a, b, c, d, _ = seeded
    calls: list[tuple[str, list[Any]]] = [("list", [f]) for f in LISTS]
    calls += [
        ("patch", [a, {"confidence": 0.95, "hit_count": 7, "success_count": 3,
                       "updated_at_ms": 400}]),
        ("patch", [b, {"context": None, "adaptive_state": {"project_slug": "alpha"},
                       "updated_at_ms": 401, "solution": "other"}]),
        ("patch", [c, {"solution_code": None, "type": "adaptive", "context": {"k": [1]},
                       "error_pattern": "c2", "last_hit_ms": 5, "updated_at_ms": 402}]),
        ("patch", ["missing", {"confidence": 0.1, "updated_at_ms": 1}]),
        ("delete", [d]), ("delete", [d]), ("delete", ["missing"]), ("get", [d]),
    ]
    calls += [("list", [f]) for f in LISTS]
    return calls


def _js_call(name: str, args: list[Any]) -> list[Any]:
    if name == "list":
        return ["listReflexion", _js_filters(args[0])]
    if name == "patch":
        return ["patchReflexion", *args]
    return [{"delete": "deleteReflexion", "get": "getReflexion"}[name], *args]


def _hub_call(store: HubStore, name: str, args: list[Any]) -> Any:
    if name == "list":
        return [e.to_dict() for e in store.list_reflexion(**args[0])]
    if name == "patch":
        entry = store.patch_reflexion(args[0], **args[1])
        return None if entry is None else entry.to_dict()
    if name == "delete":
        return store.delete_reflexion(args[0])
    entry = store.get_reflexion(args[0])
    return None if entry is None else entry.to_dict()


def test_same_results_as_the_reference_store(backend: str, db_url: URL,
                                            tmp_path: Path) -> None:
    hub = reference_hub()
    reference_db = tmp_path / "reference.db"
    seed = [["addReflexion", {"error_message": "E", "solution": "S", **fields}]
            for fields in SEED]
    seeded = run_reference(hub, reference_db, seed)
    seeded_ids = [row["id"] for row in seeded]
    calls = _operations(seeded_ids)
    if backend == "sqlite":
        # hubstore adopts a copy of the very file the reference wrote
        copy = tmp_path / "adopted.db"
        shutil.copyfile(reference_db, copy)
        url = make_url(f"sqlite:///{copy}")
        store = HubStore.open(url, auto_migrate=True)
    else:
        store = HubStore.open(db_url)
        with store.unit_of_work() as uow:
            uow.session.add_all(ReflexionEntry(**row) for row in seeded)
    try:
        assert [present(store.get_reflexion(i)).to_dict() for i in seeded_ids] == seeded
        expected = run_reference(hub, reference_db, [_js_call(n, a) for n, a in calls])
        got = [_hub_call(store, name, args) for name, args in calls]
    finally:
        store.close()
    for (name, args), want, have in zip(calls, expected, got, strict=True):
        assert have == want, (name, args)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 0.25])
def test_a_patched_whole_confidence_comes_back_a_float(store: HubStore,
                                                        confidence: float) -> None:
    # SQLite's RETURNING gives a whole REAL as the int it stores (found by the
    # hostile-input property test: 0.0 came back as 0)
    entry = store.add_reflexion("p", "m", "s")
    patched = store.patch_reflexion(entry.id, confidence=confidence)
    assert patched is not None
    stored = store.get_reflexion(entry.id)
    assert stored is not None
    for value in (patched.confidence, stored.confidence):
        assert type(value) is float and value == confidence
