"""Every store method, listed once: the facade that :class:`~hubstore.store.HubStore` and
:class:`~hubstore.uow.UnitOfWork` are built from.

A store method is a plain function of a service module whose first parameter is a
:class:`~hubstore.transaction.Scope` (where it opens the transaction it runs in). Set
here as a class attribute, the function becomes a method with the store or the unit of
work as that scope: called on the store it opens a transaction of its own (or joins the
unit of work open in this thread); called on a unit of work it joins that unit of work's
transaction. No wrappers to keep in step, and mypy checks every call against the
function's own signature.

These two classes are the only place the store methods are named: the store and the
unit of work get them from :class:`HubOperations`, the store alone the waits of
:class:`StoreOperations` (neither inherits a transaction or a mixin with logic: each holds
what it runs on), and the generated async methods (:mod:`hubstore.aio_codegen`), the
traced methods (:mod:`hubstore.telemetry`), the API page's members (tools/docs_build.py)
and the tests' lists of methods are all read from :func:`store_methods`.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from hubstore.database import Database
from hubstore.dialects import SqlDialect
from hubstore.services import (
    agents,
    dead_letters,
    human_requests,
    messages,
    pipelines,
    reflexion,
    retention,
    stats,
    waiting,
)
from hubstore.services.assigns import (
    claims,
    creating,
    limits,
    listing,
    moves,
    reports,
    rescue,
    schedules,
    worker,
)
from hubstore.transaction import Transaction


class HubOperations:
    """The store methods (see the module's docstring), and the scope they run in: what
    the store and the unit of work each provide."""

    #: The store's shared state.
    db: Database
    #: The dialect's SQL component (hubstore.dialects).
    sql: SqlDialect

    def transaction(self, write: bool = True) -> AbstractContextManager[Transaction]:
        """The transaction a method runs in (see Scope)."""
        raise NotImplementedError

    def one_statement(self) -> AbstractContextManager[Transaction]:
        """The transaction of a method of one writing statement."""
        raise NotImplementedError

    def one_read(self) -> AbstractContextManager[Transaction]:
        """The transaction of a method of one SELECT."""
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
    page_messages_by_trace = messages.page_messages_by_trace
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
    create_assign = creating.create_assign
    get_assign = creating.get_assign
    update_assign_status = moves.update_assign_status
    list_assigns = listing.list_assigns
    page_assigns = listing.page_assigns
    retry_assign = moves.retry_assign

    # Assign jobs, hub rules
    assign_async = creating.assign_async
    report_assign_result = reports.report_assign_result
    schedule_assign_retry = reports.schedule_assign_retry
    sweep_timed_out_assigns = rescue.sweep_timed_out_assigns
    claim_next_assign = claims.claim_next_assign
    next_due_ms = claims.next_due_ms
    assign_many = creating.assign_many
    claim_next_assigns = claims.claim_next_assigns
    report_assign_results = reports.report_assign_results
    touch_assign = worker.touch_assign
    finish_assign = worker.finish_assign
    cancel_assign = worker.cancel_assign

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


class StoreOperations(HubOperations):
    """The store methods of the store only (API.md: "these wait, so they are store
    methods only", not unit-of-work methods): waiting for other processes' commits.
    Called on the store inside a unit of work of its thread, the waits refuse to run
    (services/waiting.py); hubstore.aio writes its own, on the event loop."""

    wait_for_assign = waiting.wait_for_assign
    wait_for_assigns = waiting.wait_for_assigns
    wait_for_result = waiting.wait_for_result
    message_feed = waiting.message_feed


def as_method(function: Callable[..., Any]) -> Callable[..., Any]:
    """The service function ``function`` as a store method: a copy of it (the same code
    and globals, so a call costs exactly what the function's does) whose signature shows
    ``self`` where the function takes its scope. ``help(HubStore.set_assign_limit)`` and
    ``inspect.signature`` then show the method's own parameters, as for any method (a
    bound method's signature leaves ``self`` out); the service function itself is not
    changed. (The API page is static: tools/docs_build.py does the same there.)"""
    code = getattr(function, "__code__", None)
    if code is None:  # (not a plain function: left as it is)
        return function
    method = types.FunctionType(code, function.__globals__, function.__name__,
                                function.__defaults__, function.__closure__)
    method.__kwdefaults__ = function.__kwdefaults__
    method.__dict__.update(function.__dict__)
    method.__doc__ = function.__doc__
    method.__module__ = function.__module__
    method.__qualname__ = function.__qualname__
    method.__annotations__ = dict(function.__annotations__)
    signature = inspect.signature(function)
    scope, *parameters = signature.parameters.values()
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[scope.replace(name="self", annotation=inspect.Parameter.empty),
                    *parameters])
    return method


def _scopes_as_self(*owners: type) -> None:
    """Each store method of ``owners`` (the service functions they list) made a method
    by :func:`as_method`."""
    for owner in owners:
        for name, value in list(vars(owner).items()):
            if inspect.isfunction(value) and not name.startswith("_") \
                    and value.__module__ != __name__:
                setattr(owner, name, as_method(value))


_scopes_as_self(HubOperations, StoreOperations)


def store_methods() -> dict[str, Callable[..., Any]]:
    """Every store method, by name, in the facade's order: the service functions that
    :class:`HubOperations` lists (not its scope methods), then the store's own waits
    (:class:`StoreOperations`)."""
    return {name: value for owner in (HubOperations, StoreOperations)
            for name, value in vars(owner).items()
            if inspect.isfunction(value) and not name.startswith("_")
            and value.__module__ != __name__}
