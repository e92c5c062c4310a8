"""Provider quotas and periodic jobs from the command line: ``hubstore limits`` and
``hubstore schedules`` list them; ``set`` and ``remove`` change them.

Durations are written as elsewhere (``30d``, ``12h``, ``15m``, ``45s``).
"""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy.engine import URL

from hubstore.assign_rules import duration_text
from hubstore.cli.common import (
    Cron,
    Duration,
    UsageFailure,
    command_options,
    given_url,
    group_options,
    json_option,
    main,
    print_json,
    reported,
    when,
)
from hubstore.cli.inspect import reading
from hubstore.cli.output import Column, key, show
from hubstore.ids import now_ms
from hubstore.store import HubStore


def _duration(ms: int | None) -> str:
    return "" if ms is None else duration_text(ms)


@main.group(invoke_without_command=True)
@json_option
@group_options
@click.pass_context
def limits(ctx: click.Context, as_json: bool) -> None:
    """Assign limits (provider quotas): each key's bounds, and its jobs running now and
    started in the last window; or, with a command below, set or remove one.

    Lines in a pipe: key, running, max running, recent starts, max starts, per.
    """
    if ctx.invoked_subcommand is not None:
        return
    with reading("listing the limits", given_url(ctx)) as uow:
        rows = [limit.to_dict() for limit in uow.get_assign_limits().values()]
    if as_json:
        print_json(rows)
        return
    show("assign limits", [
        key("key", "key"), key("running", "running", right=True),
        Column("max running", lambda d: "" if d["max_running"] is None
               else str(d["max_running"]), whole=True),
        key("recent starts", "recent_starts", right=True),
        Column("max starts", lambda d: "" if d["max_starts"] is None
               else str(d["max_starts"]), whole=True),
        Column("per", lambda d: _duration(d["per_ms"]), whole=True)], rows)


@limits.command("set")
@click.argument("limit_key")
@click.option("--max-running", type=click.IntRange(min=1), default=None,
              help="At most this many of the key's jobs running at once.")
@click.option("--max-starts", type=click.IntRange(min=1), default=None,
              help="At most this many started in any --per window.")
@click.option("--per", "per_ms", type=Duration(), default=None,
              help="The window of --max-starts (1m, 1h, ...).")
@command_options
def set_limit(limit_key: str, max_running: int | None, max_starts: int | None,
              per_ms: int | None, url: URL) -> None:
    """Set (or replace) the limit of LIMIT_KEY: jobs queued with limit_key=LIMIT_KEY
    start only when it has room.

    Prints the limit as --json would show it in `hubstore limits --json`.
    """
    with reported(f"setting the limit {limit_key}", url), HubStore.open(url) as store:
        limit = store.set_assign_limit(limit_key, max_running=max_running,
                                       max_starts=max_starts, per_ms=per_ms)
    print_json(limit.to_dict())


@limits.command("remove")
@click.argument("limit_key")
@command_options
def remove_limit(limit_key: str, url: URL) -> None:
    """Remove the limit of LIMIT_KEY (its jobs start unbounded); exit 1 when none."""
    with reported(f"removing the limit {limit_key}", url), HubStore.open(url) as store:
        if not store.remove_assign_limit(limit_key):
            raise click.ClickException(f"there is no limit {limit_key}")
    click.echo(f"removed {limit_key}")


@main.group(invoke_without_command=True)
@json_option
@group_options
@click.pass_context
def schedules(ctx: click.Context, as_json: bool) -> None:
    """Periodic jobs: each schedule's rule, next tick and last job; or, with a command
    below, set or remove one. The hub's maintenance queues them (`hubstore db sweep`).

    Lines in a pipe: name, rule, supervisor, worker, task, next (UTC), last job.
    """
    if ctx.invoked_subcommand is not None:
        return
    with reading("listing the schedules", given_url(ctx)) as uow:
        rows = [schedule.to_dict() for schedule in uow.get_assign_schedules().values()]
    if as_json:
        print_json(rows)
        return
    show("schedules", [
        key("name", "name"),
        Column("rule", lambda d: d["cron"] or f"every {_duration(d['every_ms'])}",
               whole=True),
        key("supervisor", "supervisor_agent"), key("worker", "worker_agent"),
        Column("task", lambda d: str(d["job"].get("task", "")), whole=False),
        Column("next (UTC)", lambda d: when(d["next_due_ms"]), whole=True),
        Column("last job", lambda d: d["last_job_id"] or "", whole=True)], rows)
    _hint_when_overdue(rows)


def _hint_when_overdue(rows: list[dict[str, Any]]) -> None:
    """A "next" tick in the past means nothing runs the hub's maintenance, which queues
    the schedules' jobs: say so on stderr, and what to run."""
    overdue = [d["name"] for d in rows if d["next_due_ms"] < now_ms()]
    if overdue:
        click.echo(f"note: the next tick of {', '.join(overdue)} is in the past: nothing "
                   "runs the hub's maintenance, which queues the schedules' jobs. Run "
                   "`hubstore db sweep --every 1m` beside the hub (or run_maintenance in "
                   "a hub process).", err=True)


@schedules.command("set")
@click.argument("name")
@click.option("--cron", type=Cron(), default=None,
              help="A cron expression of five fields, UTC ('*/5 * * * *').")
@click.option("--every", "every_ms", type=Duration(), default=None,
              help="Or an interval (30s, 5m, 1h).")
@click.option("--supervisor", required=True, metavar="AGENT", help="Who assigns the jobs.")
@click.option("--worker", required=True, metavar="AGENT", help="Who runs them.")
@click.option("--task", default="", help="Each job's task.")
@click.option("--payload", default=None, metavar="JSON", help="Each job's payload (JSON).")
@click.option("--priority", type=click.IntRange(1, 9), default=None)
@click.option("--max-retries", type=click.IntRange(min=0), default=None)
@click.option("--timeout", "timeout_ms", type=Duration(), default=None,
              help="Each job's timeout (10m, 1h).")
@click.option("--limit-key", default=None, help="The assign limit each job counts against.")
@click.option("--unique-key", default=None,
              help="While one job of the schedule is queued or running, no other is queued.")
@command_options
def set_schedule(name: str, cron: str | None, every_ms: int | None, supervisor: str,
                 worker: str, task: str, payload: str | None, priority: int | None,
                 max_retries: int | None, timeout_ms: int | None, limit_key: str | None,
                 unique_key: str | None, url: URL) -> None:
    """Queue an assign job at every tick of --cron or --every (one of the two).

    Prints the schedule as `hubstore schedules --json` shows it.
    """
    job: dict[str, Any] = {"task": task}
    if payload is not None:
        try:
            job["payload"] = json.loads(payload)
        except ValueError as exc:
            raise UsageFailure(f"--payload is not JSON: {exc}") from exc
    for name_, value in (("priority", priority), ("max_retries", max_retries),
                         ("timeout_ms", timeout_ms), ("limit_key", limit_key),
                         ("unique_key", unique_key)):
        if value is not None:
            job[name_] = value
    with reported(f"setting the schedule {name}", url), HubStore.open(url) as store:
        schedule = store.set_assign_schedule(name, supervisor, worker, cron=cron,
                                             every_ms=every_ms, **job)
    print_json(schedule.to_dict())


@schedules.command("remove")
@click.argument("name")
@command_options
def remove_schedule(name: str, url: URL) -> None:
    """Remove the schedule NAME (the jobs it queued stay); exit 1 when none."""
    with reported(f"removing the schedule {name}", url), HubStore.open(url) as store:
        if not store.remove_assign_schedule(name):
            raise click.ClickException(f"there is no schedule {name}")
    click.echo(f"removed {name}")
