"""Looking at a hub: ``hubstore stats|agents|jobs|messages|reflexion``. Read-only."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.table import Table
from sqlalchemy.engine import URL

from hubstore import health
from hubstore.cli.common import json_option, main, out, print_json, reported, url_option, when
from hubstore.models import ASSIGN_STATUSES, Base
from hubstore.reflexion import lookup_solution
from hubstore.store import HubStore
from hubstore.uow import UnitOfWork

T = TypeVar("T")
#: A column of a table: its heading and how a row's dict gives its cell.
Column = tuple[str, Callable[[dict[str, Any]], object]]


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
        return
    table = Table(title=f"{title} ({len(dicts)})")
    for heading, _ in columns:
        table.add_column(heading, overflow="fold")
    for d in dicts:
        table.add_row(*(_cell(get(d)) for _, get in columns))
    out().print(table)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else str(value)


def _key(name: str) -> Callable[[dict[str, Any]], object]:
    return lambda d: d.get(name)


def _time(name: str) -> Callable[[dict[str, Any]], object]:
    return lambda d: when(d.get(name))


@main.command()
@json_option
@url_option
def stats(as_json: bool, url: URL) -> None:
    """The hub's figures (get_hub_stats and get_audit_stats together)."""
    with _reading("reading the figures", url) as uow:
        figures = {**uow.get_hub_stats(), **uow.get_audit_stats()}
    if as_json:
        print_json(figures)
        return
    table = Table(title="hub figures")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        table.add_row(name, str(value))
    out().print(table)


@main.command()
@json_option
@url_option
def agents(as_json: bool, url: URL) -> None:
    """Every agent, with its status and lease."""
    with _reading("listing the agents", url) as uow:
        rows = uow.list_all_agents()
    _show(rows, as_json, "agents", [
        ("agent", _key("agent_id")), ("cli", _key("cli")), ("status", _key("status")),
        ("topics", _key("topics")), ("last seen (UTC)", _time("last_seen_ms")),
        ("lease until (UTC)", _time("lease_expires_ms"))])


@main.command()
@click.option("--status", type=click.Choice(ASSIGN_STATUSES), default=None,
              help="Only jobs with this status.")
@click.option("--worker", default=None, metavar="AGENT", help="Only this worker's jobs.")
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True)
@json_option
@url_option
def jobs(status: Any, worker: str | None, limit: int, as_json: bool, url: URL) -> None:
    """Assign jobs, most recently updated first."""
    with _reading("listing the jobs", url) as uow:
        rows = uow.list_assigns(status=status, worker_agent=worker, limit=limit)
    _show(rows, as_json, "assign jobs", [
        ("job", _key("job_id")), ("status", _key("status")), ("worker", _key("worker_agent")),
        ("supervisor", _key("supervisor_agent")), ("task", _key("task")),
        ("attempt", _key("attempt")), ("updated (UTC)", _time("updated_at_ms"))])


@main.command()
@click.option("--agent", required=True, metavar="AGENT", help="Whose messages.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@json_option
@url_option
def messages(agent: str, limit: int, as_json: bool, url: URL) -> None:
    """The newest messages for AGENT (sent to it or to its topics), as it polls them."""
    with _reading("reading the messages", url) as uow:
        rows = uow.poll_for_agent(agent, limit)
    _show(rows, as_json, f"messages for {agent}", [
        ("id", _key("id")), ("type", _key("type")), ("from", _key("from_agent")),
        ("to", _key("to_agent")), ("topic", _key("topic")), ("priority", _key("priority")),
        ("status", _key("status")), ("created (UTC)", _time("created_at_ms")),
        ("payload", _key("payload"))])


@main.command()
@click.argument("error_text")
@json_option
@url_option
def reflexion(error_text: str, as_json: bool, url: URL) -> None:
    """What the hub learned about ERROR_TEXT (lookup_solution), best first."""
    with _reading("looking up the error", url) as uow:
        entries = lookup_solution(uow, error_text).entries
    _show(entries, as_json, "reflexion entries", [
        ("id", _key("id")), ("pattern", _key("error_pattern")),
        ("solution", _key("solution")), ("confidence", _key("confidence")),
        ("hits", _key("hit_count")), ("successes", _key("success_count"))])
