"""Human-in-the-loop requests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from hubstore.errors import ValidationError
from hubstore.execution import add, execute, from_row, get, load
from hubstore.ids import now_ms, uuidv7
from hubstore.models import HUMAN_DEFAULT_ACTIONS, HUMAN_KINDS, HUMAN_STATES, HumanRequest, table_of
from hubstore.services.base import const, insert_once, resolve_now, update_row
from hubstore.transaction import Scope, Transaction
from hubstore.types import HumanDefaultAction, HumanKind, HumanState
from hubstore.validation import (
    json_value,
    lookup_key,
    optional_id,
    require_duration,
    require_enum,
    require_id,
    require_text,
)

_requests = table_of(HumanRequest)

#: What a retried insert_human_request(request_id=...) must repeat to count as the same.
SAME_REQUEST = ("requester_agent", "kind", "prompt", "schema_json")


def insert_human_request(scope: Scope, requester_agent: str, kind: HumanKind, prompt: str,
                         requested_schema: Any = None, deadline_ms: int = 300_000,
                         default_action: HumanDefaultAction = "decline",
                         correlation_id: str | None = None,
                         trace_id: str | None = None, *, request_id: str | None = None
                         ) -> HumanRequest:
    """A pending request; ``deadline_ms`` is a duration, stored as now + duration.

    ``request_id`` (hubstore's own): the request's id, chosen by the caller so that a
    call retried after an unknown outcome records it once. When a request with that id
    is recorded already, with the same requester, kind, prompt and schema, nothing is
    written and that request is returned, its ``deduplicated`` True; a different one
    raises DuplicateKey."""
    require_id(requester_agent, "requester_agent")
    require_enum(kind, HUMAN_KINDS, "kind")
    require_text(prompt, "prompt")
    schema = json_value(requested_schema, "requested_schema", default={})
    duration = require_duration(deadline_ms, "deadline_ms")
    require_enum(default_action, HUMAN_DEFAULT_ACTIONS, "default_action")
    optional_id(correlation_id, "correlation_id")
    optional_id(trace_id, "trace_id")
    optional_id(request_id, "request_id")
    if request_id is not None:
        with scope.transaction() as tx:
            return insert_once(tx, HumanRequest, {
                "request_id": request_id, "requester_agent": requester_agent,
                "kind": kind, "prompt": prompt, "schema_json": schema, "state": "pending",
                "deadline_ms": now_ms() + duration, "default_action": default_action,
                "correlation_id": correlation_id or uuidv7(),
                "trace_id": trace_id or uuidv7(), "response_json": None,
            }, SAME_REQUEST, "request_id")
    with scope.transaction() as tx:
        request = HumanRequest(
            request_id=uuidv7(), requester_agent=requester_agent, kind=kind, prompt=prompt,
            schema=schema, state="pending", deadline_ms=now_ms() + duration,
            default_action=default_action, correlation_id=correlation_id or uuidv7(),
            trace_id=trace_id or uuidv7(), response=None,
        )
        add(tx, request)
        return request


def get_human_request(scope: Scope, request_id: str) -> HumanRequest | None:
    """The request, or None."""
    lookup_key(request_id, "request_id")
    with scope.transaction(write=False) as tx:
        return get(tx, HumanRequest, request_id)


def update_human_request(scope: Scope, request_id: str, state: HumanState,
                         response: Any = None) -> bool:
    """Set the state and the response (None stores SQL NULL); True when it exists."""
    require_id(request_id, "request_id")
    require_enum(state, HUMAN_STATES, "state")
    json_value(response, "response")
    with scope.transaction() as tx:
        return update_row(tx, _requests, request_id, state=state, response_json=response)


def answer_human_request(scope: Scope, request_id: str, state: HumanState,
                         response: Any = None) -> HumanRequest | None:
    """Answer a pending request, once: its state (any but pending) and response are set
    only while it is still pending, in one guarded UPDATE. The request as answered, or
    None when it was not pending any more (another answer, a cancel or its deadline
    came first) or does not exist: of two answers at once, exactly one is kept.

    ``update_human_request`` keeps the reference's meaning (it sets any request)."""
    require_id(request_id, "request_id")
    require_enum(state, HUMAN_STATES, "state")
    if state == "pending":
        raise ValidationError("an answer's state must be one of "
                              f"{', '.join(s for s in HUMAN_STATES if s != 'pending')}, "
                              "not 'pending'")
    json_value(response, "response")
    with scope.one_statement() as tx:
        row = execute(tx, update(_requests)
                      .where(_requests.c.request_id == request_id,
                             _requests.c.state == const("pending"))
                      .values(state=state, response_json=response)
                      .returning(*_requests.c)).mappings().first()
    return None if row is None else from_row(HumanRequest, row)


def get_pending_human_requests(scope: Scope) -> list[HumanRequest]:
    """Every pending request."""
    with scope.transaction(write=False) as tx:
        return load(tx, HumanRequest,
                    select(HumanRequest).where(HumanRequest.state == "pending")
            .order_by(*tx.sql.natural_order(_requests)))


def recent_answered(uow: Transaction, limit: int) -> list[HumanRequest]:
    """The ``limit`` newest requests that are not pending any more (answered, declined,
    cancelled, timed out), the newest first by id (hubstore's ids are UUIDv7, in time
    order): the primary key walked backwards, past the few pending ones only."""
    return load(uow, HumanRequest, select(HumanRequest)
                .where(HumanRequest.state != const("pending"))
                .order_by(HumanRequest.request_id.desc()).limit(limit))


def expire_human_requests(scope: Scope, now_ms: int | None = None) -> int:
    """Pending requests past their deadline become timed_out; returns how many."""
    now = resolve_now(now_ms)
    with scope.transaction() as tx:
        result = execute(tx,
            update(_requests).where(_requests.c.state == "pending",
                                    _requests.c.deadline_ms < now)
            .values(state="timed_out"))
        return int(result.rowcount)

