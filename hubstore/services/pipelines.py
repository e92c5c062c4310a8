"""Pipeline state: one row per team."""

from __future__ import annotations

from typing import Unpack

from sqlalchemy import delete, select

from hubstore.execution import execute, get, load
from hubstore.ids import now_ms
from hubstore.models import PipelineState, table_of
from hubstore.transaction import Scope
from hubstore.types import PipelineFields
from hubstore.validation import (
    json_value,
    lookup_key,
    optional_int,
    refuse_unknown,
    require_id,
    require_text,
)

_pipelines = table_of(PipelineState)
_INT_FIELDS = ("fix_attempt", "fix_max", "ralph_iteration", "ralph_max")
_FIELDS = ("phase", *_INT_FIELDS, "artifacts", "phase_history")


def get_pipeline_state(scope: Scope, team_name: str) -> PipelineState | None:
    """The team's state, or None."""
    lookup_key(team_name, "team_name")
    with scope.transaction(write=False) as tx:
        return get(tx, PipelineState, team_name)


def save_pipeline_state(scope: Scope, team_name: str,
                        **changes: Unpack[PipelineFields]) -> PipelineState:
    """Insert the team's state, or update the named fields of it."""
    require_id(team_name, "team_name")
    fields = dict(changes)
    refuse_unknown(fields, _FIELDS, "save_pipeline_state")
    if "phase" in fields:
        require_text(fields["phase"], "phase")
    for name in _INT_FIELDS:
        if name in fields:
            optional_int(fields[name], name)
    for name in ("artifacts", "phase_history"):
        if name in fields:
            json_value(fields[name], name)
    with scope.transaction() as tx:
        now = now_ms()
        values = {"team_name": team_name, "created_at": now, "updated_at": now, **fields}
        stmt = tx.sql.insert(_pipelines).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[_pipelines.c.team_name],
            set_={k: stmt.excluded[k] for k in (*fields, "updated_at")})
        execute(tx, stmt)
        state = get(tx, PipelineState, team_name, fresh=True)
        assert state is not None
        return state


def remove_pipeline_state(scope: Scope, team_name: str) -> bool:
    """Delete the team's state; True when there was one."""
    lookup_key(team_name, "team_name")
    with scope.transaction() as tx:
        result = execute(tx,
            delete(_pipelines).where(_pipelines.c.team_name == team_name))
        return bool(result.rowcount)


def list_pipeline_states(scope: Scope) -> list[PipelineState]:
    """Every team's state, by team name."""
    with scope.transaction(write=False) as tx:
        return load(tx, PipelineState,
                    select(PipelineState).order_by(PipelineState.team_name))
