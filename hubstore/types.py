"""The value types of the public API: the enums as Literal types, and the keyword
arguments of the patching methods as TypedDicts.

A type checker then catches ``update_assign_status(job_id, "runing")``,
``create_assign(taks=...)`` or ``save_pipeline_state(team, phse=...)`` before the code runs;
at run time the same values are checked again (ValidationError). The runtime tuples in
``hubstore.models`` (``AGENT_CLIS``...) are derived from these with ``typing.get_args``.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

AgentCli = Literal["codex", "gemini", "claude", "other"]
AgentStatus = Literal["online", "stale", "offline"]
MessageType = Literal[
    "request", "response", "event", "handoff", "human_request", "human_response", "system",
]
MessageStatus = Literal["queued", "delivered", "acked", "expired", "dead_letter"]
HumanKind = Literal["captcha", "approval", "credential", "choice", "text"]
HumanState = Literal["pending", "accepted", "declined", "cancelled", "timed_out"]
HumanDefaultAction = Literal["decline", "cancel", "timeout_continue"]
AssignStatus = Literal["queued", "running", "succeeded", "failed", "timed_out", "cancelled"]
#: When an assign job's timeout starts: at its creation (the reference's) or at each claim.
TimeoutFrom = Literal["create", "claim"]
#: What a worker may report (report_assign_result also takes any case and spacing).
ReportedStatus = Literal[
    "running", "succeeded", "failed", "timed_out", "in_progress", "timeout", "error",
    "success", "completed",
]
ReflexionType = Literal["reflexion", "adaptive"]


class AssignPatch(TypedDict, total=False):
    """The fields ``update_assign_status`` and ``retry_assign`` may change.

    For the first group None keeps the current value (the reference's ``??``); for the
    second (deadline, message, result, error and the times) None clears the column.
    """

    supervisor_agent: str | None
    worker_agent: str | None
    topic: str | None
    task: str | None
    payload: Any
    attempt: int | None
    retry_count: int | None
    max_retries: int | None
    priority: int | None
    ttl_ms: int | None
    timeout_ms: int | None
    trace_id: str | None
    correlation_id: str | None
    deadline_ms: int | None
    last_message_id: str | None
    result: Any
    error: Any
    started_at_ms: int | None
    completed_at_ms: int | None
    not_before_ms: int | None
    retry_backoff_ms: int | None
    last_retry_at_ms: int | None


class NewAssign(TypedDict, total=False):
    """The fields of a new assign job: ``create_assign``'s keyword arguments, which
    ``assign_async``, each of ``assign_many``'s jobs and a schedule's job take too (what
    each defaults to, and means, is create_assign's signature and docstring)."""

    topic: str
    task: str
    payload: Any
    status: AssignStatus
    attempt: int
    retry_count: int
    max_retries: int
    priority: object
    ttl_ms: object
    timeout_ms: object
    deadline_ms: int | None
    trace_id: str | None
    correlation_id: str | None
    last_message_id: str | None
    result: Any
    error: Any
    job_id: str | None
    not_before_ms: int | None
    retry_backoff_ms: int
    limit_key: str | None
    unique_key: str | None
    timeout_from: TimeoutFrom


class PipelineFields(TypedDict, total=False):
    """The fields ``save_pipeline_state`` sets (the others keep their value or default)."""

    phase: str
    fix_attempt: int | None
    fix_max: int | None
    ralph_iteration: int | None
    ralph_max: int | None
    artifacts: Any
    phase_history: Any


class ReflexionPatch(TypedDict, total=False):
    """The fields ``patch_reflexion`` may set (10.17.4's patchReflexion)."""

    type: ReflexionType
    error_pattern: str
    error_message: str
    context: dict[str, Any] | None
    solution: str
    solution_code: str | None
    adaptive_state: dict[str, Any] | None
    confidence: float
    hit_count: int
    success_count: int
    last_hit_ms: int
    updated_at_ms: int | None


class AssignEvent(TypedDict):
    """What an assign status listener receives (the reference's callback event)."""

    job_id: str
    status: AssignStatus
    #: The job's result, else its error, else None.
    result: Any
    #: The job's updated_at_ms as JavaScript's toISOString().
    timestamp: str


__all__ = [
    "AgentCli",
    "AgentStatus",
    "AssignEvent",
    "AssignPatch",
    "AssignStatus",
    "HumanDefaultAction",
    "HumanKind",
    "HumanState",
    "MessageStatus",
    "MessageType",
    "PipelineFields",
    "ReflexionPatch",
    "ReflexionType",
    "ReportedStatus",
]
