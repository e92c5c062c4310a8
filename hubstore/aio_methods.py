"""Generated from HubOperations by ``python -m hubstore.aio_codegen``.

Do not edit: run it again instead.

Every store method as a coroutine with the sync method's signature; ``_call`` runs the
sync method off the event loop (see :mod:`hubstore.aio`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, Unpack

from hubstore.models import (
    Agent,
    AssignJob,
    AssignLimit,
    AssignSchedule,
    DeadLetter,
    HumanRequest,
    Message,
    PipelineState,
    ReflexionEntry,
)
from hubstore.results import AssignOutcome, AssignPage, Lease, MessagePage, ReflexionPage
from hubstore.services.messages import DEFAULT_POLL
from hubstore.services.reflexion import THIRTY_DAYS_MS
from hubstore.services.retention import Progress
from hubstore.types import (
    AgentCli,
    AgentStatus,
    AssignPatch,
    AssignStatus,
    HumanDefaultAction,
    HumanKind,
    HumanState,
    MessageStatus,
    MessageType,
    NewAssign,
    PipelineFields,
    ReflexionPatch,
    ReflexionType,
    TimeoutFrom,
)

if TYPE_CHECKING:
    from hubstore.operations import HubOperations


_P = ParamSpec("_P")
_T = TypeVar("_T")


class AsyncOperations:
    """The store methods as coroutines (:class:`~hubstore.aio.AsyncHubStore` and
    :class:`~hubstore.aio.AsyncUnitOfWork`)."""

    def _sync_ops(self) -> HubOperations:
        """The sync object whose methods these await."""
        raise NotImplementedError

    async def _call(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``fn(*args, **kwargs)`` off the event loop."""
        raise NotImplementedError

    async def register_agent(
        self,
        agent_id: str,
        cli: AgentCli,
        pid: int | None = None,
        capabilities: Iterable[Any] = (),
        topics: Iterable[str] = (),
        heartbeat_ttl_ms: int = 30000,
        metadata: dict[str, Any] | None = None,
    ) -> Lease:
        """Await :meth:`HubStore.register_agent`: Insert or update the agent as online with
        a fresh lease.
        """
        return await self._call(
            self._sync_ops().register_agent,
            agent_id,
            cli,
            pid,
            capabilities,
            topics,
            heartbeat_ttl_ms,
            metadata,
        )

    async def get_agent(self, agent_id: str) -> Agent | None:
        """Await :meth:`HubStore.get_agent`: The agent, or None."""
        return await self._call(self._sync_ops().get_agent, agent_id)

    async def refresh_lease(self, agent_id: str, ttl_ms: int = 30000) -> Lease:
        """Await :meth:`HubStore.refresh_lease`: Heartbeat: last seen now, lease now + ttl,
        status online.
        """
        return await self._call(self._sync_ops().refresh_lease, agent_id, ttl_ms)

    async def update_agent_topics(self, agent_id: str, topics: Iterable[str]) -> bool:
        """Await :meth:`HubStore.update_agent_topics`: Replace the agent's topics; True when
        the agent exists.
        """
        return await self._call(self._sync_ops().update_agent_topics, agent_id, topics)

    async def list_online_agents(self) -> list[Agent]:
        """Await :meth:`HubStore.list_online_agents`: Agents that are not offline (stale
        ones count).
        """
        return await self._call(self._sync_ops().list_online_agents)

    async def list_all_agents(self) -> list[Agent]:
        """Await :meth:`HubStore.list_all_agents`: Every agent."""
        return await self._call(self._sync_ops().list_all_agents)

    async def get_agents_by_topic(self, topic: str) -> list[Agent]:
        """Await :meth:`HubStore.get_agents_by_topic`: Non-offline agents subscribed to
        ``topic``.
        """
        return await self._call(self._sync_ops().get_agents_by_topic, topic)

    async def sweep_stale_agents(self, now_ms: int | None = None) -> dict[str, int]:
        """Await :meth:`HubStore.sweep_stale_agents`: Online agents past their lease become
        stale; long-stale ones go offline.
        """
        return await self._call(self._sync_ops().sweep_stale_agents, now_ms)

    async def update_agent_status(self, agent_id: str, status: AgentStatus) -> bool:
        """Await :meth:`HubStore.update_agent_status`: Set the agent's status; True when the
        agent exists.
        """
        return await self._call(self._sync_ops().update_agent_status, agent_id, status)

    async def audit_log(
        self,
        type: MessageType,
        from_agent: str,
        to_agent: str,
        topic: str,
        priority: int = 5,
        ttl_ms: int = 300000,
        payload: Any = None,
        trace_id: str | None = None,
        correlation_id: str | None = None,
        status: MessageStatus = "queued",
        *,
        id: str | None = None,
    ) -> Message:
        """Await :meth:`HubStore.audit_log`: Record a message; ids default to fresh UUIDv7s
        and the payload to {}.
        """
        return await self._call(
            self._sync_ops().audit_log,
            type,
            from_agent,
            to_agent,
            topic,
            priority,
            ttl_ms,
            payload,
            trace_id,
            correlation_id,
            status,
            id=id,
        )

    async def enqueue_message(
        self,
        type: MessageType,
        from_agent: str,
        to_agent: str,
        topic: str,
        priority: int = 5,
        ttl_ms: int = 300000,
        payload: Any = None,
        trace_id: str | None = None,
        correlation_id: str | None = None,
        status: MessageStatus = "queued",
        *,
        id: str | None = None,
    ) -> Message:
        """Await :meth:`HubStore.enqueue_message`: The same as audit_log (kept for
        compatibility).
        """
        return await self._call(
            self._sync_ops().enqueue_message,
            type,
            from_agent,
            to_agent,
            topic,
            priority,
            ttl_ms,
            payload,
            trace_id,
            correlation_id,
            status,
            id=id,
        )

    async def get_message(self, id: str) -> Message | None:
        """Await :meth:`HubStore.get_message`: The message, or None."""
        return await self._call(self._sync_ops().get_message, id)

    async def get_response_by_correlation(self, correlation_id: str) -> Message | None:
        """Await :meth:`HubStore.get_response_by_correlation`: The newest response with that
        correlation id.
        """
        return await self._call(self._sync_ops().get_response_by_correlation, correlation_id)

    async def get_messages_by_trace(self, trace_id: str) -> list[Message]:
        """Await :meth:`HubStore.get_messages_by_trace`: Every message of a trace, oldest
        first.
        """
        return await self._call(self._sync_ops().get_messages_by_trace, trace_id)

    async def page_messages_by_trace(
        self, trace_id: str, after: str | None = None, limit: int = 100
    ) -> MessagePage:
        """Await :meth:`HubStore.page_messages_by_trace`: A page of a trace's messages,
        oldest first (``get_messages_by_trace``' order): ``limit`` messages
        (1..MAX_TRACE_PAGE) after the cursor ``after`` (None: from the first), and the
        cursor of the next page (None after the last). One bounded read, however long the
        trace.
        """
        return await self._call(self._sync_ops().page_messages_by_trace, trace_id, after, limit)

    async def update_message_status(self, id: str, status: MessageStatus) -> bool:
        """Await :meth:`HubStore.update_message_status`: Set a message's status; True when
        it exists.
        """
        return await self._call(self._sync_ops().update_message_status, id, status)

    async def poll_for_agent(
        self,
        agent_id: str,
        max_messages: object = DEFAULT_POLL,
        include_topics: Iterable[str] | None = None,
    ) -> list[Message]:
        """Await :meth:`HubStore.poll_for_agent`: The newest messages for an agent: sent to
        it, or to a topic it follows.
        """
        return await self._call(
            self._sync_ops().poll_for_agent, agent_id, max_messages, include_topics
        )

    async def get_audit_messages_for_agent(
        self,
        agent_id: str,
        max_messages: object = DEFAULT_POLL,
        include_topics: Iterable[str] | None = None,
    ) -> list[Message]:
        """Await :meth:`HubStore.get_audit_messages_for_agent`: The same as poll_for_agent."""
        return await self._call(
            self._sync_ops().get_audit_messages_for_agent, agent_id, max_messages, include_topics
        )

    async def deliver_to_agent(self, message_id: str, agent_id: str) -> bool:
        """Await :meth:`HubStore.deliver_to_agent`: True when the message exists and an
        agent id was given (nothing is written).
        """
        return await self._call(self._sync_ops().deliver_to_agent, message_id, agent_id)

    async def deliver_to_topic(self, message_id: str, topic: str) -> int:
        """Await :meth:`HubStore.deliver_to_topic`: How many non-offline agents follow the
        topic (nothing is written).
        """
        return await self._call(self._sync_ops().deliver_to_topic, message_id, topic)

    async def ack_messages(self, *args: Any, **kwargs: Any) -> int:
        """Await :meth:`HubStore.ack_messages`: Kept for compatibility with the reference:
        acknowledges nothing, returns 0 (StoreClosed on a closed store, as every call).
        """
        return await self._call(self._sync_ops().ack_messages, *args, **kwargs)

    async def insert_human_request(
        self,
        requester_agent: str,
        kind: HumanKind,
        prompt: str,
        requested_schema: Any = None,
        deadline_ms: int = 300000,
        default_action: HumanDefaultAction = "decline",
        correlation_id: str | None = None,
        trace_id: str | None = None,
        *,
        request_id: str | None = None,
    ) -> HumanRequest:
        """Await :meth:`HubStore.insert_human_request`: A pending request; ``deadline_ms``
        is a duration, stored as now + duration.
        """
        return await self._call(
            self._sync_ops().insert_human_request,
            requester_agent,
            kind,
            prompt,
            requested_schema,
            deadline_ms,
            default_action,
            correlation_id,
            trace_id,
            request_id=request_id,
        )

    async def get_human_request(self, request_id: str) -> HumanRequest | None:
        """Await :meth:`HubStore.get_human_request`: The request, or None."""
        return await self._call(self._sync_ops().get_human_request, request_id)

    async def update_human_request(
        self, request_id: str, state: HumanState, response: Any = None
    ) -> bool:
        """Await :meth:`HubStore.update_human_request`: Set the state and the response (None
        stores SQL NULL); True when it exists.
        """
        return await self._call(self._sync_ops().update_human_request, request_id, state, response)

    async def answer_human_request(
        self, request_id: str, state: HumanState, response: Any = None
    ) -> HumanRequest | None:
        """Await :meth:`HubStore.answer_human_request`: Answer a pending request, once: its
        state (any but pending) and response are set only while it is still pending, in one
        guarded UPDATE. The request as answered, or None when it was not pending any more
        (another answer, a cancel or its deadline came first) or does not exist: of two
        answers at once, exactly one is kept.
        """
        return await self._call(self._sync_ops().answer_human_request, request_id, state, response)

    async def get_pending_human_requests(self) -> list[HumanRequest]:
        """Await :meth:`HubStore.get_pending_human_requests`: Every pending request."""
        return await self._call(self._sync_ops().get_pending_human_requests)

    async def expire_human_requests(self, now_ms: int | None = None) -> int:
        """Await :meth:`HubStore.expire_human_requests`: Pending requests past their
        deadline become timed_out; returns how many.
        """
        return await self._call(self._sync_ops().expire_human_requests, now_ms)

    async def move_to_dead_letter(
        self, message_id: str, reason: str, last_error: str | None = None
    ) -> bool:
        """Await :meth:`HubStore.move_to_dead_letter`: Mark the message dead_letter and
        record (or replace) its dead letter.
        """
        return await self._call(
            self._sync_ops().move_to_dead_letter, message_id, reason, last_error
        )

    async def get_dead_letters(self, limit: int = 50) -> list[DeadLetter]:
        """Await :meth:`HubStore.get_dead_letters`: Dead letters, newest first."""
        return await self._call(self._sync_ops().get_dead_letters, limit)

    async def requeue_dead_letter(self, message_id: str) -> bool:
        """Await :meth:`HubStore.requeue_dead_letter`: Put a dead letter's message back to
        queued, with a fresh expiry (now plus its ``ttl_ms``, so the next expiry sweep does
        not take it straight back), and remove the dead letter. True when there was a dead
        letter; a message without one is untouched.
        """
        return await self._call(self._sync_ops().requeue_dead_letter, message_id)

    async def discard_dead_letter(self, message_id: str) -> bool:
        """Await :meth:`HubStore.discard_dead_letter`: Remove a dead letter; its message
        stays, with status dead_letter (until pruned). True when there was one.
        """
        return await self._call(self._sync_ops().discard_dead_letter, message_id)

    async def create_assign(
        self,
        supervisor_agent: str,
        worker_agent: str,
        topic: str = "assign.job",
        task: str = "",
        payload: Any = None,
        status: AssignStatus = "queued",
        attempt: int = 1,
        retry_count: int = 0,
        max_retries: int = 0,
        priority: object = 5,
        ttl_ms: object = 600000,
        timeout_ms: object = 600000,
        deadline_ms: int | None = None,
        trace_id: str | None = None,
        correlation_id: str | None = None,
        last_message_id: str | None = None,
        result: Any = None,
        error: Any = None,
        job_id: str | None = None,
        not_before_ms: int | None = None,
        retry_backoff_ms: int = 0,
        limit_key: str | None = None,
        unique_key: str | None = None,
        timeout_from: TimeoutFrom = "create",
    ) -> AssignJob:
        """Await :meth:`HubStore.create_assign`: A new job. Priority, timeout and ttl are
        clamped, as in the reference (JavaScript's Number() reads them: a non-number falls
        back to the default).
        """
        return await self._call(
            self._sync_ops().create_assign,
            supervisor_agent,
            worker_agent,
            topic,
            task,
            payload,
            status,
            attempt,
            retry_count,
            max_retries,
            priority,
            ttl_ms,
            timeout_ms,
            deadline_ms,
            trace_id,
            correlation_id,
            last_message_id,
            result,
            error,
            job_id,
            not_before_ms,
            retry_backoff_ms,
            limit_key,
            unique_key,
            timeout_from,
        )

    async def get_assign(self, job_id: str) -> AssignJob | None:
        """Await :meth:`HubStore.get_assign`: The job, or None."""
        return await self._call(self._sync_ops().get_assign, job_id)

    async def update_assign_status(
        self, job_id: str, status: AssignStatus, **patch: Unpack[AssignPatch]
    ) -> AssignJob | None:
        """Await :meth:`HubStore.update_assign_status`: Move the job to ``status`` (the
        transition table applies), changing the named fields; a field named with None clears
        it. None when there is no job.
        """
        return await self._call(self._sync_ops().update_assign_status, job_id, status, **patch)

    async def list_assigns(
        self,
        supervisor_agent: str | None = None,
        worker_agent: str | None = None,
        status: AssignStatus | None = None,
        statuses: Sequence[AssignStatus] | None = None,
        trace_id: str | None = None,
        correlation_id: str | None = None,
        active_before_ms: object = None,
        limit: object = 50,
    ) -> list[AssignJob]:
        """Await :meth:`HubStore.list_assigns`: Jobs matching every given filter, most
        recently updated first (1..100).
        """
        return await self._call(
            self._sync_ops().list_assigns,
            supervisor_agent,
            worker_agent,
            status,
            statuses,
            trace_id,
            correlation_id,
            active_before_ms,
            limit,
        )

    async def page_assigns(
        self,
        supervisor_agent: str | None = None,
        worker_agent: str | None = None,
        status: AssignStatus | None = None,
        statuses: Sequence[AssignStatus] | None = None,
        trace_id: str | None = None,
        correlation_id: str | None = None,
        active_before_ms: int | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> AssignPage:
        """Await :meth:`HubStore.page_assigns`: A page of the jobs matching every given
        filter (``list_assigns``'), most recently updated first: ``limit`` jobs
        (1..MAX_PAGE) after the cursor ``after`` (None: from the newest), and the cursor of
        the next page (None after the last).
        """
        return await self._call(
            self._sync_ops().page_assigns,
            supervisor_agent,
            worker_agent,
            status,
            statuses,
            trace_id,
            correlation_id,
            active_before_ms,
            limit,
            after,
        )

    async def retry_assign(self, job_id: str, **patch: Unpack[AssignPatch]) -> AssignJob | None:
        """Await :meth:`HubStore.retry_assign`: Re-queue a failed or timed-out job for its
        next attempt (no retry budget check).
        """
        return await self._call(self._sync_ops().retry_assign, job_id, **patch)

    async def assign_async(
        self, supervisor_agent: str, worker_agent: str, **fields: Unpack[NewAssign]
    ) -> AssignJob:
        """Await :meth:`HubStore.assign_async`: Create a job and record its dispatch to the
        worker, in one transaction.
        """
        return await self._call(
            self._sync_ops().assign_async, supervisor_agent, worker_agent, **fields
        )

    async def report_assign_result(
        self,
        job_id: str,
        status: str,
        worker_agent: str | None = None,
        attempt: int | None = None,
        result: Any = None,
        error: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> AssignOutcome:
        """Await :meth:`HubStore.report_assign_result`: A worker's report: progress, a final
        result, or a failure that may be retried.
        """
        return await self._call(
            self._sync_ops().report_assign_result,
            job_id,
            status,
            worker_agent,
            attempt,
            result,
            error,
            metadata,
        )

    async def schedule_assign_retry(
        self,
        job_id: str,
        reason: str = "manual",
        requested_by: str = "manual",
        *,
        force: bool = False,
    ) -> AssignJob:
        """Await :meth:`HubStore.schedule_assign_retry`: Re-queue a failed or timed-out job
        and dispatch it again.
        """
        return await self._call(
            self._sync_ops().schedule_assign_retry, job_id, reason, requested_by, force=force
        )

    async def sweep_timed_out_assigns(self, now_ms: int | None = None) -> dict[str, int]:
        """Await :meth:`HubStore.sweep_timed_out_assigns`: Queued or running jobs whose
        deadline is at or before ``now_ms`` time out, and are retried while retries remain
        (the retry's back-off and deadline counted from ``now_ms``). As in the reference,
        one call takes at most SWEEP_BATCH (100) due jobs, the most recently updated first;
        a job retried here is not swept again by the same call (the due jobs are chosen
        once, up front).
        """
        return await self._call(self._sync_ops().sweep_timed_out_assigns, now_ms)

    async def claim_next_assign(
        self, worker_agent: str, claimed_by: str | None = None
    ) -> AssignJob | None:
        """Await :meth:`HubStore.claim_next_assign`: The worker's highest-priority, then
        oldest, queued job that is due (its not_before_ms passed, if it has one), now
        running.
        """
        return await self._call(self._sync_ops().claim_next_assign, worker_agent, claimed_by)

    async def next_due_ms(self, worker_agent: str) -> int | None:
        """Await :meth:`HubStore.next_due_ms`: When the worker's next queued job that is not
        due yet becomes due (the time its not_before_ms, or its retry's back-off, ends), or
        None when it has none: how long a waiter may sleep without missing it.
        """
        return await self._call(self._sync_ops().next_due_ms, worker_agent)

    async def assign_many(
        self, supervisor_agent: str, worker_agent: str, jobs: Sequence[Mapping[str, Any]]
    ) -> list[AssignJob]:
        """Await :meth:`HubStore.assign_many`: ``assign_async`` for each of ``jobs`` (each a
        mapping of its keyword arguments: task, payload, priority, ...), all in one
        transaction: every job and its dispatch message, or none of them (a bad one is
        refused before anything is written).
        """
        return await self._call(self._sync_ops().assign_many, supervisor_agent, worker_agent, jobs)

    async def claim_next_assigns(
        self, worker_agent: str, limit: int = 10, claimed_by: str | None = None
    ) -> list[AssignJob]:
        """Await :meth:`HubStore.claim_next_assigns`: Up to ``limit`` of the worker's due
        queued jobs, now running, in one statement, in claim order (as ``claim_next_assign``
        would take them one by one). Two claimers never get the same job. An empty list when
        none is queued. Stalled jobs are taken back first, as in ``claim_next_assign``, and
        each records its claimer as there.
        """
        return await self._call(
            self._sync_ops().claim_next_assigns, worker_agent, limit, claimed_by
        )

    async def report_assign_results(
        self, reports: Sequence[Mapping[str, Any]], worker_agent: str | None = None
    ) -> list[AssignOutcome]:
        """Await :meth:`HubStore.report_assign_results`: ``report_assign_result`` for each
        of ``reports`` (each a mapping of its keyword arguments: job_id, status, attempt,
        result, error, metadata; ``worker_agent`` for all of them unless a report names its
        own), in one transaction: every report, or (when one raises) none of them.
        """
        return await self._call(self._sync_ops().report_assign_results, reports, worker_agent)

    async def touch_assign(
        self, job_id: str, worker_agent: str, attempt: int, extend_ms: int | None = None
    ) -> AssignJob:
        """Await :meth:`HubStore.touch_assign`: The worker's heartbeat for a long job: its
        deadline moved to now + ``extend_ms`` (default: the job's timeout_ms), so that it is
        not timed out and taken back while its worker lives. Returns the job.
        """
        return await self._call(
            self._sync_ops().touch_assign, job_id, worker_agent, attempt, extend_ms
        )

    async def finish_assign(
        self,
        job: AssignJob,
        status: str,
        result: Any = None,
        error: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> AssignOutcome:
        """Await :meth:`HubStore.finish_assign`: A worker's report on the job it claimed
        (``report_assign_result`` with the job's own worker and attempt, so both are always
        checked): progress, a final result, or a failure that may be retried. A report on an
        attempt that was since timed out and retried raises StaleAttempt; on a cancelled
        job, AssignCancelled.
        """
        return await self._call(
            self._sync_ops().finish_assign, job, status, result, error, metadata
        )

    async def cancel_assign(self, job_id: str, reason: str | None = None) -> AssignJob | None:
        """Await :meth:`HubStore.cancel_assign`: Cancel a queued or running job: it becomes
        ``cancelled`` (terminal: never claimed, retried or reported again; its worker's next
        touch or report raises AssignCancelled), its error says so (with ``reason``), and
        the supervisor gets the job's 'completed' event with status 'cancelled'. None for an
        unknown job; a job cancelled already is returned as it is; IllegalTransition from
        another end.
        """
        return await self._call(self._sync_ops().cancel_assign, job_id, reason)

    async def set_assign_limit(
        self,
        key: str,
        max_running: int | None = None,
        max_starts: int | None = None,
        per_ms: int | None = None,
    ) -> AssignLimit:
        """Await :meth:`HubStore.set_assign_limit`: Set (or replace) the limit of ``key``:
        at most ``max_running`` of its jobs running at once, at most ``max_starts`` started
        in any ``per_ms`` milliseconds (None: no such bound; a limit has at least one). Jobs
        name their key when queued (``limit_key=``). Returns the limit, with its key's
        running count and recent starts counted anew. Waiting claimers whose jobs it held
        look again.
        """
        return await self._call(
            self._sync_ops().set_assign_limit, key, max_running, max_starts, per_ms
        )

    async def get_assign_limits(self) -> dict[str, AssignLimit]:
        """Await :meth:`HubStore.get_assign_limits`: Every limit by its key (in key order),
        each with its key's running count and start times as they are now
        (``limit.recent_starts(now)``, ``limit.to_dict()``).
        """
        return await self._call(self._sync_ops().get_assign_limits)

    async def remove_assign_limit(self, key: str) -> bool:
        """Await :meth:`HubStore.remove_assign_limit`: Remove the limit of ``key`` (its jobs
        run unbounded from now on); True when there was one. Waiting claimers whose jobs it
        held look again.
        """
        return await self._call(self._sync_ops().remove_assign_limit, key)

    async def set_assign_schedule(
        self,
        name: str,
        supervisor_agent: str,
        worker_agent: str,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        **job: Unpack[NewAssign],
    ) -> AssignSchedule:
        """Await :meth:`HubStore.set_assign_schedule`: Queue an assign from
        ``supervisor_agent`` to ``worker_agent`` at every tick of ``cron`` (a cron
        expression, UTC) or every ``every_ms`` milliseconds (exactly one of the two);
        ``job`` holds assign_async's keyword arguments for each job (task, payload,
        priority, max_retries, timeout_ms, limit_key, unique_key, ...). Replaces the
        schedule of that name; its next tick is the first after now.
        """
        return await self._call(
            self._sync_ops().set_assign_schedule,
            name,
            supervisor_agent,
            worker_agent,
            cron=cron,
            every_ms=every_ms,
            **job,
        )

    async def get_assign_schedules(self) -> dict[str, AssignSchedule]:
        """Await :meth:`HubStore.get_assign_schedules`: Every schedule by its name (in name
        order).
        """
        return await self._call(self._sync_ops().get_assign_schedules)

    async def remove_assign_schedule(self, name: str) -> bool:
        """Await :meth:`HubStore.remove_assign_schedule`: Remove the schedule ``name`` (jobs
        it queued stay); True when there was one.
        """
        return await self._call(self._sync_ops().remove_assign_schedule, name)

    async def run_due_schedules(self, now_ms: int | None = None) -> list[AssignJob]:
        """Await :meth:`HubStore.run_due_schedules`: Queue the job of every schedule whose
        tick has come (at most RUN_BATCH), once per tick whatever the number of processes
        doing it; the jobs queued. Ticks missed while nothing ran are one job, for the
        latest of them. A tick whose job's ``unique_key`` is held by a live job queues
        nothing and is not in the list.
        """
        return await self._call(self._sync_ops().run_due_schedules, now_ms)

    async def add_reflexion(
        self,
        error_pattern: str,
        error_message: str,
        solution: str,
        context: dict[str, Any] | None = None,
        solution_code: str | None = None,
        type: ReflexionType = "reflexion",
        adaptive_state: dict[str, Any] | None = None,
    ) -> ReflexionEntry:
        """Await :meth:`HubStore.add_reflexion`: A new entry with confidence 0.5 and one
        hit.
        """
        return await self._call(
            self._sync_ops().add_reflexion,
            error_pattern,
            error_message,
            solution,
            context,
            solution_code,
            type,
            adaptive_state,
        )

    async def get_reflexion(self, id: str) -> ReflexionEntry | None:
        """Await :meth:`HubStore.get_reflexion`: The entry, or None."""
        return await self._call(self._sync_ops().get_reflexion, id)

    async def find_reflexion(
        self, error_pattern: str, context: dict[str, Any] | None = None
    ) -> list[ReflexionEntry]:
        """Await :meth:`HubStore.find_reflexion`: Entries with exactly this pattern; failing
        that, up to 10 that contain it.
        """
        return await self._call(self._sync_ops().find_reflexion, error_pattern, context)

    async def find_reflexion_exact(
        self, error_pattern: str, context: dict[str, Any] | None = None
    ) -> list[ReflexionEntry]:
        """Await :meth:`HubStore.find_reflexion_exact`: find_reflexion without the substring
        fallback: the entries with exactly this pattern (learn_from_error's lookup: no
        substring match is the entry it wants, and on SQLite the trigram search costs more
        than the rest of a learn).
        """
        return await self._call(self._sync_ops().find_reflexion_exact, error_pattern, context)

    async def update_reflexion_hit(self, id: str, success: bool = False) -> ReflexionEntry | None:
        """Await :meth:`HubStore.update_reflexion_hit`: One more hit (and success):
        confidence is recalculated.
        """
        return await self._call(self._sync_ops().update_reflexion_hit, id, success)

    async def prune_reflexion(
        self,
        max_age_ms: int = THIRTY_DAYS_MS,
        min_confidence: float = 0.2,
        now_ms: int | None = None,
    ) -> int:
        """Await :meth:`HubStore.prune_reflexion`: Delete entries both older than max_age
        and below min_confidence.
        """
        return await self._call(
            self._sync_ops().prune_reflexion, max_age_ms, min_confidence, now_ms
        )

    async def list_reflexion(
        self,
        type: str | None = None,
        min_confidence: float | None = None,
        project_slug: str | None = None,
    ) -> list[ReflexionEntry]:
        """Await :meth:`HubStore.list_reflexion`: Every entry, filtered, as 10.17.4's
        ``listReflexion``.
        """
        return await self._call(self._sync_ops().list_reflexion, type, min_confidence, project_slug)

    async def page_reflexion(
        self,
        type: str | None = None,
        min_confidence: float | None = None,
        project_slug: str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> ReflexionPage:
        """Await :meth:`HubStore.page_reflexion`: A page of ``list_reflexion``'s entries
        (the same filters, the same order): ``limit`` entries (1..MAX_PAGE) after the cursor
        ``after`` (None: from the first), and the cursor of the next page (None after the
        last). A page reads ``limit`` entries past the cursor, however many match: a list of
        any length, a page at a time.
        """
        return await self._call(
            self._sync_ops().page_reflexion, type, min_confidence, project_slug, limit, after
        )

    async def patch_reflexion(
        self, id: str, **patch: Unpack[ReflexionPatch]
    ) -> ReflexionEntry | None:
        """Await :meth:`HubStore.patch_reflexion`: Set the given fields of an entry, as
        10.17.4's ``patchReflexion``; None if missing.
        """
        return await self._call(self._sync_ops().patch_reflexion, id, **patch)

    async def delete_reflexion(self, id: str) -> bool:
        """Await :meth:`HubStore.delete_reflexion`: Delete an entry; True when there was one
        (10.17.4's ``deleteReflexion``).
        """
        return await self._call(self._sync_ops().delete_reflexion, id)

    async def get_pipeline_state(self, team_name: str) -> PipelineState | None:
        """Await :meth:`HubStore.get_pipeline_state`: The team's state, or None."""
        return await self._call(self._sync_ops().get_pipeline_state, team_name)

    async def save_pipeline_state(
        self, team_name: str, **changes: Unpack[PipelineFields]
    ) -> PipelineState:
        """Await :meth:`HubStore.save_pipeline_state`: Insert the team's state, or update
        the named fields of it.
        """
        return await self._call(self._sync_ops().save_pipeline_state, team_name, **changes)

    async def remove_pipeline_state(self, team_name: str) -> bool:
        """Await :meth:`HubStore.remove_pipeline_state`: Delete the team's state; True when
        there was one.
        """
        return await self._call(self._sync_ops().remove_pipeline_state, team_name)

    async def list_pipeline_states(self) -> list[PipelineState]:
        """Await :meth:`HubStore.list_pipeline_states`: Every team's state, by team name."""
        return await self._call(self._sync_ops().list_pipeline_states)

    async def sweep_expired(self, now_ms: int | None = None) -> dict[str, int]:
        """Await :meth:`HubStore.sweep_expired`: Queued messages past expiry become dead
        letters; overdue human requests time out.
        """
        return await self._call(self._sync_ops().sweep_expired, now_ms)

    async def get_queue_depths(self) -> dict[str, int]:
        """Await :meth:`HubStore.get_queue_depths`: Queued messages by urgency, and the
        dead-letter count.
        """
        return await self._call(self._sync_ops().get_queue_depths)

    async def get_delivery_stats(self, now_ms: int | None = None) -> dict[str, Any]:
        """Await :meth:`HubStore.get_delivery_stats`: Acked messages created in the last
        five minutes.
        """
        return await self._call(self._sync_ops().get_delivery_stats, now_ms)

    async def get_hub_stats(self) -> dict[str, Any]:
        """Await :meth:`HubStore.get_hub_stats`: Online agents, messages, active assign jobs
        and the queue depths (the reference's figures); where assign limits exist, also
        ``assign_limits``: each key's limit, its running jobs and its starts in the last
        window (``AssignLimit.to_dict()`` but the key).
        """
        return await self._call(self._sync_ops().get_hub_stats)

    async def get_audit_stats(self) -> dict[str, int]:
        """Await :meth:`HubStore.get_audit_stats`: The audit figures."""
        return await self._call(self._sync_ops().get_audit_stats)

    async def prune_messages(
        self,
        older_than_ms: int,
        now_ms: int | None = None,
        batch_size: int = 1000,
        *,
        progress: Progress | None = None,
    ) -> int:
        """Await :meth:`HubStore.prune_messages`: Delete the messages created strictly
        before ``now - older_than_ms``, with their inbox rows and dead letters,
        ``batch_size`` messages per unit of work. Returns how many messages were deleted.
        ``progress(n)`` is called after each batch with the number of messages it deleted
        (the command line's progress bar).
        """
        return await self._call(
            self._sync_ops().prune_messages, older_than_ms, now_ms, batch_size, progress=progress
        )

    async def count_messages_before(self, older_than_ms: int, now_ms: int | None = None) -> int:
        """Await :meth:`HubStore.count_messages_before`: How many messages
        ``prune_messages`` would delete now (index-backed count).
        """
        return await self._call(self._sync_ops().count_messages_before, older_than_ms, now_ms)
