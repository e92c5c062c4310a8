"""Reflexion: find with context filters, substring fallback, hits, prune, learn/lookup
(a new pattern learnt without a substring search); the helpers raise only
HubStoreErrors."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from hubstore import HubStore, LookupResult, ValidationError
from hubstore.models import ReflexionEntry
from hubstore.reflexion import learn_from_error, lookup_solution, report_outcome
from tests.factories import ReflexionEntryFactory


def ids(entries: Iterable[ReflexionEntry]) -> list[str]:
    return [e.id for e in entries]


def test_add_and_get(store: HubStore) -> None:
    entry = store.add_reflexion("p", "P!", "fix", context={"cli": "codex"},
                                solution_code="x()", type="adaptive",
                                adaptive_state={"rule": 1})
    stored = store.get_reflexion(entry.id)
    assert stored is not None
    assert stored.to_dict() == entry.to_dict()
    assert (stored.confidence, stored.hit_count, stored.success_count) == (0.5, 1, 0)
    assert stored.type == "adaptive" and stored.adaptive_state == {"rule": 1}
    assert stored.last_hit_ms == stored.created_at_ms == stored.updated_at_ms


def test_exact_match_by_confidence_without_limit(store: HubStore) -> None:
    made = [ReflexionEntryFactory.create(error_pattern="same", confidence=c / 20)
            for c in range(12)]
    ReflexionEntryFactory.create(error_pattern="same but longer")
    found = store.find_reflexion("same")
    assert ids(found) == ids(sorted(made, key=lambda e: -e.confidence))
    assert len(found) == 12


def test_substring_fallback_limit_case_and_wildcards(store: HubStore) -> None:
    for i in range(12):
        ReflexionEntryFactory.create(error_pattern=f"prefix CANNOT READ x of undefined {i}",
                              confidence=i / 20)
    literal = ReflexionEntryFactory.create(error_pattern="100%_done\\ok")
    ReflexionEntryFactory.create(error_pattern="100xxdone\\ok")
    found = store.find_reflexion("cannot read x")
    assert len(found) == 10  # the reference's LIKE ignores ASCII case, at most 10
    assert [e.confidence for e in found] == sorted((e.confidence for e in found), reverse=True)
    assert ids(store.find_reflexion("0%_done\\")) == [literal.id]


def test_substring_ignores_case_for_ascii_letters_only(store: HubStore) -> None:
    entry = ReflexionEntryFactory.create(error_pattern="ÉCHEC total")
    assert store.find_reflexion("échec") == []  # SQLite's LIKE folds ASCII only
    assert ids(store.find_reflexion("TOTAL")) == [entry.id]
    assert ids(store.find_reflexion("ÉCHEC T")) == [entry.id]


def test_short_needles_and_long_needles(store: HubStore) -> None:
    entry = ReflexionEntryFactory.create(error_pattern="ab" + "z" * 150)
    assert ids(store.find_reflexion("b")) == [entry.id]       # under trigram size
    assert ids(store.find_reflexion("ab" + "z" * 200)) == [entry.id]  # first 100 units only


def test_context_filters_are_typed_equalities(store: HubStore) -> None:
    a = ReflexionEntryFactory.create(error_pattern="p",
                                     context={"cli": "codex", "n": 1, "flag": True})
    b = ReflexionEntryFactory.create(error_pattern="p",
                                     context={"cli": "gemini", "n": "1", "flag": 1})
    c = ReflexionEntryFactory.create(error_pattern="p", context={"cli": "codex", "n": 1.0,
                                                          "flag": False})
    assert set(ids(store.find_reflexion("p", {"cli": "codex"}))) == {a.id, c.id}
    assert set(ids(store.find_reflexion("p", {"n": 1}))) == {a.id, c.id}
    assert ids(store.find_reflexion("p", {"n": "1"})) == [b.id]
    assert ids(store.find_reflexion("p", {"flag": True})) == [a.id]   # True is not 1
    assert ids(store.find_reflexion("p", {"flag": False})) == [c.id]
    assert set(ids(store.find_reflexion("p", {"cli": None}))) == {a.id, b.id, c.id}
    assert store.find_reflexion("p", {"missing": "x"}) == []


@pytest.mark.parametrize("key", ["a.b", "ключ", 'quo"te', "sp ace", "$.x", "[0]", "a'b"])
def test_odd_context_keys_work(store: HubStore, key: str) -> None:
    hit = ReflexionEntryFactory.create(error_pattern="p", context={key: "v"})
    ReflexionEntryFactory.create(error_pattern="p", context={key: "w"})
    assert ids(store.find_reflexion("p", {key: "v"})) == [hit.id]


def test_an_injected_key_finds_nothing(store: HubStore) -> None:
    ReflexionEntryFactory.create(error_pattern="p", context={"cli": "x"})
    ReflexionEntryFactory.create(error_pattern="p", context={"cli": "codex"})
    assert store.find_reflexion("p", {"cli') = 'x' OR 1=1 --": "x"}) == []
    assert store.find_reflexion("p", {"cli\") = 'x' OR 1=1 --": "x"}) == []
    assert len(store.find_reflexion("p")) == 2


@pytest.mark.parametrize("context", [{1: "x"}, {"k": [1]}, {"k": {"a": 1}}, "cli=codex"])
def test_bad_context_filters_are_refused(store: HubStore, context: object) -> None:
    with pytest.raises(ValidationError):
        # Deliberately ill-typed: the filter is checked at run time.
        store.find_reflexion("p", context)  # type: ignore[arg-type]


def test_hit_updates_counts_and_confidence(store: HubStore) -> None:
    entry = ReflexionEntryFactory.create(hit_count=9, success_count=9)
    hit = store.update_reflexion_hit(entry.id, success=True)
    assert hit is not None
    assert (hit.hit_count, hit.success_count, hit.confidence) == (10, 10, 1.0)
    miss = store.update_reflexion_hit(entry.id)
    assert miss is not None
    assert (miss.hit_count, miss.success_count) == (11, 10)
    assert miss.confidence == pytest.approx(10 / 11)
    assert store.update_reflexion_hit("missing") is None


def test_prune_needs_both_age_and_low_confidence(store: HubStore) -> None:
    now = 10 ** 12
    day = 86_400_000
    old_low = ReflexionEntryFactory.create(updated_at_ms=now - 31 * day, confidence=0.1)
    ReflexionEntryFactory.create(updated_at_ms=now - 31 * day, confidence=0.2)
    ReflexionEntryFactory.create(updated_at_ms=now - 29 * day, confidence=0.1)
    assert store.prune_reflexion(now_ms=now) == 1
    assert store.get_reflexion(old_low.id) is None
    assert store.prune_reflexion(max_age_ms=0, min_confidence=0.5, now_ms=now) == 2


def test_learn_lookup_and_report(store: HubStore) -> None:
    first = learn_from_error(store, "TypeError: x is undefined at /src/a.js:10:3", "guard x",
                             context={"cli": "codex"}, success=True)
    assert first is not None
    assert first.error_pattern == "typeerror: x is undefined at <file>:<line>"
    assert (first.hit_count, first.success_count) == (2, 1)
    again = learn_from_error(store, "TypeError: x is undefined at /lib/b.js:99:1", "other",
                             context={"cli": "codex"})
    assert again is not None
    assert again.id == first.id and again.hit_count == 3
    other_ctx = learn_from_error(store, "TypeError: x is undefined at /a/b.js:1:1", "fix",
                                 context={"cli": "gemini"})
    assert other_ctx is not None
    assert other_ctx.id != first.id
    found = lookup_solution(store, "TypeError: x is undefined at /q/r.js:5:5", {"cli": "codex"})
    assert isinstance(found, LookupResult)
    assert found.best_match is not None
    assert found.found and found.best_match.id == first.id and ids(found.entries) == [first.id]
    assert lookup_solution(store, "", None) == LookupResult(False, [], None)
    assert learn_from_error(store, "some error", "") is None
    outcome = report_outcome(store, first.id, True)
    assert outcome is not None
    assert outcome.success_count == 2


def test_learn_inside_a_unit_of_work_is_rolled_back_with_it(store: HubStore) -> None:
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        learn_from_error(uow, "Boom at /x/y.z:1", "fix")
        assert len(uow.find_reflexion("boom at <file>:<line>")) == 1
        raise RuntimeError("abort")
    assert store.find_reflexion("boom at <file>:<line>") == []


def test_reflexion_helpers_raise_only_hubstore_errors(store: HubStore) -> None:
    assert lookup_solution(store, 5).found is False  # no pattern: nothing to look up
    assert learn_from_error(store, ["not", "text"], "fix") is None  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        lookup_solution(store, "TypeError: x", context=5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        learn_from_error(store, "TypeError: x", ["fix"])  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        report_outcome(store, 5, True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="surrogate"):
        learn_from_error(store, "TypeError: \ud800", "fix")
    assert store.list_reflexion() == []


def test_learning_a_new_pattern_runs_no_substring_search(store: HubStore) -> None:
    from sqlalchemy import event

    from hubstore.reflexion import learn_from_error

    first = learn_from_error(store, "TypeError: x is undefined at /src/a.js:1:2", "guard x")
    assert first is not None
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_: seen.append(statement))
    # "x is undefined" contains the first pattern's text: a substring search would hit it
    other = learn_from_error(store, "TypeError: x is undefined at /src/a.js:1:2 in f",
                             "guard f")
    assert other is not None and other.id != first.id and other.hit_count == 1
    assert not [s for s in seen if " LIKE " in s or "MATCH" in s or "ILIKE" in s]
    again = learn_from_error(store, "TypeError: x is undefined at /src/a.js:9:9", "guard x")
    assert again is not None and again.id == first.id and again.hit_count == 2
    assert [e.id for e in store.find_reflexion(first.error_pattern)] == [first.id]
