"""Every store method, listed once: the facade that :class:`~hubstore.store.HubStore` and
:class:`~hubstore.uow.UnitOfWork` share.

A store method is a plain function of a service module whose first parameter is a
:class:`~hubstore.transaction.Scope` (where it opens the unit of work it runs in). Set
here as a class attribute, the function becomes a method with the store or the unit of
work as that scope: called on the store it opens a unit of work of its own (or joins the
one open in this thread); called on a unit of work it joins it. No wrappers to keep in
step, and mypy checks every call against the function's own signature.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from hubstore.database import Database
from hubstore.dialects import SqlDialect
from hubstore.services import (
    agents,
    assign_control,
    assign_hub,
    assign_listing,
    assigns,
    claims,
    dead_letters,
    human_requests,
    limits,
    messages,
    pipelines,
    reflexion,
    retention,
    schedules,
    stats,
    timeouts,
)
from hubstore.transaction import Transaction


class HubOperations:
    """The store methods (see the module's docstring)."""

    #: The store's shared state (set by the store and by the unit of work).
    db: Database

    def unit_of_work(self, write: bool = True) -> AbstractContextManager[Transaction]:
        """The unit of work a method runs in."""
        raise NotImplementedError

    def one_statement(self) -> AbstractContextManager[Transaction]:
        """The unit of work of a method of one writing statement."""
        raise NotImplementedError

    def one_read(self) -> AbstractContextManager[Transaction]:
        """The unit of work of a method of one SELECT."""
        raise NotImplementedError

    @property
    def sql(self) -> SqlDialect:
        """The dialect's SQL component (hubstore.dialects)."""
        raise NotImplementedError

    # Agents
    register_agent = agents.register_agent
    get_agent = agents.get_agent
    refresh_lease = agents.refresh_lease
    update_agent_topics = agents.update_agent_topics
    list_online_agents = agents.list_online_agents
    list_all_agents = agents.list_all_agents
    get_agents_by_topic = agents.get_agents_by_topic
    sweep_stale_agents = agents.sweep_stale_agents
    update_agent_status = agents.update_agent_status

    # Messages
    audit_log = messages.audit_log
    enqueue_message = messages.enqueue_message
    get_message = messages.get_message
    get_response_by_correlation = messages.get_response_by_correlation
    get_messages_by_trace = messages.get_messages_by_trace
    update_message_status = messages.update_message_status
    poll_for_agent = messages.poll_for_agent
    get_audit_messages_for_agent = messages.get_audit_messages_for_agent
    deliver_to_agent = messages.deliver_to_agent
    deliver_to_topic = messages.deliver_to_topic
    ack_messages = messages.ack_messages

    # Human requests
    insert_human_request = human_requests.insert_human_request
    get_human_request = human_requests.get_human_request
    update_human_request = human_requests.update_human_request
    answer_human_request = human_requests.answer_human_request
    get_pending_human_requests = human_requests.get_pending_human_requests
    expire_human_requests = human_requests.expire_human_requests

    # Dead letters
    move_to_dead_letter = dead_letters.move_to_dead_letter
    get_dead_letters = dead_letters.get_dead_letters
    requeue_dead_letter = dead_letters.requeue_dead_letter
    discard_dead_letter = dead_letters.discard_dead_letter

    # Assign jobs, store level
    create_assign = assigns.create_assign
    get_assign = assigns.get_assign
    update_assign_status = assigns.update_assign_status
    list_assigns = assign_listing.list_assigns
    page_assigns = assign_listing.page_assigns
    retry_assign = assigns.retry_assign

    # Assign jobs, hub rules
    assign_async = assign_hub.assign_async
    report_assign_result = assign_hub.report_assign_result
    schedule_assign_retry = assign_hub.schedule_assign_retry
    sweep_timed_out_assigns = timeouts.sweep_timed_out_assigns
    claim_next_assign = claims.claim_next_assign
    next_due_ms = claims.next_due_ms
    assign_many = assign_hub.assign_many
    claim_next_assigns = claims.claim_next_assigns
    report_assign_results = assign_hub.report_assign_results
    touch_assign = assign_control.touch_assign
    finish_assign = assign_control.finish_assign
    cancel_assign = assign_control.cancel_assign

    # Assign limits (provider quotas)
    set_assign_limit = limits.set_assign_limit
    get_assign_limits = limits.get_assign_limits
    remove_assign_limit = limits.remove_assign_limit

    # Periodic jobs
    set_assign_schedule = schedules.set_assign_schedule
    get_assign_schedules = schedules.get_assign_schedules
    remove_assign_schedule = schedules.remove_assign_schedule
    run_due_schedules = schedules.run_due_schedules

    # Reflexion
    add_reflexion = reflexion.add_reflexion
    get_reflexion = reflexion.get_reflexion
    find_reflexion = reflexion.find_reflexion
    find_reflexion_exact = reflexion.find_reflexion_exact
    update_reflexion_hit = reflexion.update_reflexion_hit
    prune_reflexion = reflexion.prune_reflexion
    list_reflexion = reflexion.list_reflexion
    page_reflexion = reflexion.page_reflexion
    patch_reflexion = reflexion.patch_reflexion
    delete_reflexion = reflexion.delete_reflexion

    # Pipeline state
    get_pipeline_state = pipelines.get_pipeline_state
    save_pipeline_state = pipelines.save_pipeline_state
    remove_pipeline_state = pipelines.remove_pipeline_state
    list_pipeline_states = pipelines.list_pipeline_states

    # Sweeps and figures
    sweep_expired = stats.sweep_expired
    get_queue_depths = stats.get_queue_depths
    get_delivery_stats = stats.get_delivery_stats
    get_hub_stats = stats.get_hub_stats
    get_audit_stats = stats.get_audit_stats

    # Operations
    prune_messages = retention.prune_messages
    count_messages_before = retention.count_messages_before
