"""Looking at a hub: ``hubstore stats|agents|jobs|messages|reflexion``. Read-only.

Rows go to stdout as a table in a terminal and as tab-separated lines in a pipe (see
:mod:`hubstore.cli.output`), or as one JSON document with ``--json``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from sqlalchemy.engine import URL

from hubstore import health
from hubstore.cli.common import (
    json_option,
    main,
    print_json,
    reported,
    url_option,
    when,
)
from hubstore.cli.output import Column, key, show
from hubstore.models import ASSIGN_STATUSES, Base
from hubstore.reflexion import lookup_solution
from hubstore.store import HubStore
from hubstore.uow import UnitOfWork

T = TypeVar("T")


@contextmanager
def _reading(action: str, url: URL) -> Iterator[UnitOfWork]:
    """A read-only unit of work on an existing database; failures become one line."""
    with reported(action, url):
        health.require_file(url)
        with HubStore.open(url) as store, store.unit_of_work(write=False) as uow:
            yield uow


def _show(rows: Sequence[Base], as_json: bool, title: str, columns: list[Column]) -> None:
    dicts = [row.to_dict() for row in rows]
    if as_json:
        print_json(dicts)
    else:
        show(title, columns, dicts)


def _time(heading: str, name: str) -> Column:
    return Column(heading, lambda d: when(d.get(name)), whole=True)


@main.command()
@json_option
@url_option
def stats(as_json: bool, url: URL) -> None:
    """The hub's figures (get_hub_stats and get_audit_stats together).

    Lines in a pipe: figure, value.
    """
    with _reading("reading the figures", url) as uow:
        figures = {**uow.get_hub_stats(), **uow.get_audit_stats()}
    if as_json:
        print_json(figures)
        return
    show("hub figures", [key("figure", "figure"), key("value", "value", right=True)],
         [{"figure": name, "value": value} for name, value in figures.items()])


@main.command()
@json_option
@url_option
def agents(as_json: bool, url: URL) -> None:
    """Every agent, with its status and lease.

    Lines in a pipe: agent, cli, status, topics, last seen (UTC), lease until (UTC).
    """
    with _reading("listing the agents", url) as uow:
        rows = uow.list_all_agents()
    _show(rows, as_json, "agents", [
        key("agent", "agent_id"), key("cli", "cli"), key("status", "status"),
        key("topics", "topics", whole=False), _time("last seen (UTC)", "last_seen_ms"),
        _time("lease until (UTC)", "lease_expires_ms")])


@main.command()
@click.option("--status", type=click.Choice(ASSIGN_STATUSES), default=None,
              help="Only jobs with this status.")
@click.option("--worker", default=None, metavar="AGENT", help="Only this worker's jobs.")
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True)
@json_option
@url_option
def jobs(status: Any, worker: str | None, limit: int, as_json: bool, url: URL) -> None:
    """Assign jobs, most recently updated first.

    Lines in a pipe: job, status, worker, supervisor, task, attempt, updated (UTC).
    """
    with _reading("listing the jobs", url) as uow:
        rows = uow.list_assigns(status=status, worker_agent=worker, limit=limit)
    _show(rows, as_json, "assign jobs", [
        key("job", "job_id"), key("status", "status"), key("worker", "worker_agent"),
        key("supervisor", "supervisor_agent"), key("task", "task", whole=False),
        key("attempt", "attempt", right=True), _time("updated (UTC)", "updated_at_ms")])


@main.command()
@click.option("--agent", required=True, metavar="AGENT", help="Whose messages.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@json_option
@url_option
def messages(agent: str, limit: int, as_json: bool, url: URL) -> None:
    """The newest messages for AGENT (sent to it or to its topics), as it polls them.

    Lines in a pipe: id, type, from, to, topic, priority, status, created (UTC), payload
    (JSON).
    """
    with _reading("reading the messages", url) as uow:
        rows = uow.poll_for_agent(agent, limit)
    _show(rows, as_json, f"messages for {agent}", [
        key("id", "id"), key("type", "type"), key("from", "from_agent"),
        key("to", "to_agent"), key("topic", "topic"),
        key("priority", "priority", right=True), key("status", "status"),
        _time("created (UTC)", "created_at_ms"), key("payload", "payload", whole=False)])


@main.command()
@click.argument("error_text")
@json_option
@url_option
def reflexion(error_text: str, as_json: bool, url: URL) -> None:
    """What the hub learned about ERROR_TEXT (lookup_solution), best first.

    Lines in a pipe: id, pattern, solution, confidence, hits, successes.
    """
    with _reading("looking up the error", url) as uow:
        entries = lookup_solution(uow, error_text).entries
    _show(entries, as_json, "reflexion entries", [
        key("id", "id"), key("pattern", "error_pattern", whole=False),
        key("solution", "solution", whole=False), key("confidence", "confidence", right=True),
        key("hits", "hit_count", right=True), key("successes", "success_count", right=True)])
