"""Pipeline state (both dialects)."""

from __future__ import annotations

import pytest

from hubstore import HubStore, ValidationError


def test_save_inserts_with_defaults_then_updates_named_fields(store: HubStore) -> None:
    state = store.save_pipeline_state("team-a", artifacts={"plan": "p.md"})
    assert state.to_dict() | {"created_at": 0, "updated_at": 0} == {
        "team_name": "team-a", "phase": "plan", "fix_attempt": 0, "fix_max": 3,
        "ralph_iteration": 0, "ralph_max": 10, "artifacts": {"plan": "p.md"},
        "phase_history": [], "created_at": 0, "updated_at": 0,
    }
    created = state.created_at
    assert created is not None
    updated = store.save_pipeline_state("team-a", phase="exec", phase_history=["plan", "exec"],
                                        fix_attempt=1)
    assert (updated.phase, updated.fix_attempt, updated.artifacts, updated.phase_history) == (
        "exec", 1, {"plan": "p.md"}, ["plan", "exec"])
    assert updated.updated_at is not None
    assert updated.created_at == created and updated.updated_at >= created


def test_list_and_remove(store: HubStore) -> None:
    store.save_pipeline_state("b")
    store.save_pipeline_state("a")
    assert [s.team_name for s in store.list_pipeline_states()] == ["a", "b"]
    assert store.remove_pipeline_state("a") is True
    assert store.remove_pipeline_state("a") is False
    assert store.get_pipeline_state("a") is None
    kept = store.get_pipeline_state("b")
    assert kept is not None and kept.phase == "plan"


def test_unknown_field_is_refused(store: HubStore) -> None:
    with pytest.raises(ValidationError, match=r"save_pipeline_state got unknown field.*phaze"):
        store.save_pipeline_state("t", phaze="x")  # type: ignore[call-arg]
    assert store.list_pipeline_states() == []
