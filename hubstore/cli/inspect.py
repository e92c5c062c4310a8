"""Looking at a hub: ``hubstore stats|agents|messages|reflexion`` (``jobs`` is
:mod:`hubstore.cli.jobs`). Read-only.

Rows go to stdout as a table in a terminal and as tab-separated lines in a pipe (see
:mod:`hubstore.cli.output`), or as one JSON document with ``--json``. ``messages`` pages
with ``--limit`` and ``--offset`` inside the rows the store lists (poll_for_agent returns
at most the newest 100, as the reference's does); a note on stderr says when more rows
follow, or when the store's 100 were reached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from sqlalchemy.engine import URL

from hubstore import health
from hubstore.cli.common import (
    UsageFailure,
    command_options,
    json_option,
    main,
    print_json,
    reported,
    when,
)
from hubstore.cli.output import Column, key, show
from hubstore.models import Base
from hubstore.reflexion import lookup_solution
from hubstore.store import HubStore
from hubstore.uow import UnitOfWork

T = TypeVar("T")
log = logging.getLogger("hubstore.cli")
#: The most rows list_assigns and poll_for_agent return: --offset and --limit page inside.
STORE_WINDOW = 100


@contextmanager
def reading(action: str, url: URL) -> Iterator[UnitOfWork]:
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


def time_column(heading: str, name: str) -> Column:
    return Column(heading, lambda d: when(d.get(name)), whole=True)


def limit_option(default: int, what: str) -> Callable[[Any], Any]:
    return click.option(
        "--limit", type=click.IntRange(1, STORE_WINDOW), default=default, show_default=True,
        help=f"Show at most this many {what} (1..{STORE_WINDOW}).")


def offset_option(what: str) -> Callable[[Any], Any]:
    return click.option(
        "--offset", type=click.IntRange(min=0), default=0, show_default=True,
        help=f"Skip this many {what} first (the next page: --offset plus --limit). The "
             f"store lists the first {STORE_WINDOW} only.")


def _page(fetch: Callable[[int], list[T]], offset: int, limit: int, command: str,
          listed: str, narrower: str) -> tuple[list[T], str | None]:
    """Rows ``offset+1 .. offset+limit`` of what the store lists (at most its first
    STORE_WINDOW), asking it for one row more when it can, to know whether more follow;
    with the note for stderr when more follow, or when the store's window was reached."""
    if offset >= STORE_WINDOW:
        raise UsageFailure(
            f"--offset {offset} is past what `hubstore {command}` can show: the store "
            f"lists only the {STORE_WINDOW} {listed}{narrower}")
    got = fetch(min(offset + limit + 1, STORE_WINDOW))
    rows = got[offset:offset + limit]
    log.info("%s: the store listed %d row(s); rows %d-%d shown", command, len(got),
             offset + 1, offset + len(rows))
    shown_rows = f"rows {offset + 1}-{offset + len(rows)} shown"
    if len(got) > offset + limit:
        return rows, (f"note: {shown_rows}; more follow: hubstore {command} ... --offset "
                      f"{offset + limit}")
    if len(got) == STORE_WINDOW:
        return rows, (f"note: {shown_rows}, the last the store lists: it returns only "
                      f"the {STORE_WINDOW} {listed}, and more may match{narrower}")
    return rows, None


def _note(note: str | None) -> None:
    if note is not None:
        click.echo(note, err=True)


@main.command()
@json_option
@command_options
def stats(as_json: bool, url: URL) -> None:
    """The hub's figures (get_hub_stats and get_audit_stats together), each assign
    limit's among them (``assign_limits.KEY.running``...).

    Lines in a pipe: figure, value.
    """
    with reading("reading the figures", url) as uow:
        figures = {**uow.get_hub_stats(), **uow.get_audit_stats()}
    if as_json:
        print_json(figures)
        return
    show("hub figures", [key("figure", "figure"), key("value", "value", right=True)],
         [{"figure": name, "value": value} for name, value in _flat(figures)])


def _flat(figures: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Figures as (name, value) lines, a nested one's names joined by dots
    (``assign_limits.codex.running``)."""
    for name, value in figures.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", "" if value is None else value


@main.command()
@json_option
@command_options
def agents(as_json: bool, url: URL) -> None:
    """Every agent, with its status and lease.

    Lines in a pipe: agent, cli, status, topics, last seen (UTC), lease until (UTC).
    """
    with reading("listing the agents", url) as uow:
        rows = uow.list_all_agents()
    _show(rows, as_json, "agents", [
        key("agent", "agent_id"), key("cli", "cli"), key("status", "status"),
        key("topics", "topics", whole=False), time_column("last seen (UTC)", "last_seen_ms"),
        time_column("lease until (UTC)", "lease_expires_ms")])


@main.command()
@click.option("--agent", required=True, metavar="AGENT", help="Whose messages.")
@limit_option(20, "messages")
@offset_option("messages")
@json_option
@command_options
def messages(agent: str, limit: int, offset: int, as_json: bool, url: URL) -> None:
    """The newest messages for AGENT (sent to it or to its topics), as it polls them.

    Lines in a pipe: id, type, from, to, topic, priority, status, created (UTC), payload
    (JSON).
    """
    with reading("reading the messages", url) as uow:
        rows, note = _page(lambda n: uow.poll_for_agent(agent, n), offset, limit,
                           "messages", f"newest messages for {agent}", "")
    _show(rows, as_json, f"messages for {agent}", [
        key("id", "id"), key("type", "type"), key("from", "from_agent"),
        key("to", "to_agent"), key("topic", "topic"),
        key("priority", "priority", right=True), key("status", "status"),
        time_column("created (UTC)", "created_at_ms"), key("payload", "payload", whole=False)])
    _note(note)


@main.command()
@click.argument("error_text")
@json_option
@command_options
def reflexion(error_text: str, as_json: bool, url: URL) -> None:
    """What the hub learned about ERROR_TEXT (lookup_solution), best first.

    Lines in a pipe: id, pattern, solution, confidence, hits, successes.
    """
    with reading("looking up the error", url) as uow:
        entries = lookup_solution(uow, error_text).entries
    _show(entries, as_json, "reflexion entries", [
        key("id", "id"), key("pattern", "error_pattern", whole=False),
        key("solution", "solution", whole=False), key("confidence", "confidence", right=True),
        key("hits", "hit_count", right=True), key("successes", "success_count", right=True)])
