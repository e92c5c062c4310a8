"""Assign jobs from the command line: ``hubstore jobs`` lists them (page after page, by
a cursor), ``hubstore jobs retry JOB_ID`` and ``hubstore jobs cancel JOB_ID`` act on one.

A listed queued job that is not due yet says when it is and why (scheduled, back-off
after a retry), so an operator sees why nobody has taken it.
"""

from __future__ import annotations

import logging
from typing import Any

import click
from sqlalchemy import inspect
from sqlalchemy.engine import URL

from hubstore.cli.common import (
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
from hubstore.cli.inspect import reading, time_column
from hubstore.cli.output import Column, key, show
from hubstore.errors import ValidationError
from hubstore.ids import now_ms
from hubstore.models import ASSIGN_STATUSES, AssignJob, AssignLimit
from hubstore.services.assigns.listing import MAX_PAGE, job_waiting_reason, waiting_text
from hubstore.store import HubStore

log = logging.getLogger("hubstore.cli")


def _rows(jobs: list[AssignJob], limits: dict[str, AssignLimit]) -> list[dict[str, Any]]:
    """Each job's every column (hubstore's own too: ``limit_key``, ``unique_key``, ...),
    with ``due_ms`` (when a queued job that is not due yet becomes due) and ``why`` (the
    console's words for why a queued job is not running yet)."""
    now = now_ms()
    rows = []
    for job in jobs:
        row = job.to_dict() | {attr.key: getattr(job, attr.key)
                               for attr in inspect(AssignJob).column_attrs}
        row["due_ms"], _ = job_waiting_reason(job, limits, now)
        row["why"] = waiting_text(job, limits, now)
        rows.append(row)
    return rows


@main.group(invoke_without_command=True)
@click.option("--status", type=click.Choice(ASSIGN_STATUSES), default=None,
              help="Only jobs with this status.")
@click.option("--worker", default=None, metavar="AGENT", help="Only this worker's jobs.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE), default=50, show_default=True,
              help=f"Show at most this many jobs (1..{MAX_PAGE}).")
@click.option("--after", default=None, metavar="CURSOR",
              help="Start after this cursor: the one the note of the page before gave.")
@json_option
@group_options
@click.pass_context
def jobs(ctx: click.Context, status: Any, worker: str | None, limit: int, after: str | None,
         as_json: bool) -> None:
    """Assign jobs, most recently updated first, a page at a time; or, with a command
    below, retry or cancel one.

    Lines in a pipe: job, status, worker, supervisor, claimed by (the latest claim's
    claimer: the id its worker gave, else host:pid), task, attempt, updated (UTC), due
    (UTC), why (a queued job not taken yet: scheduled, back-off after a retry, or the
    assign limit that holds it, or that it waits for its worker to claim it: the
    console's words). A narrow terminal leaves out the supervisor, the claimer, the update
    time, the attempt and the due time, in that order. With --json, every column of each job
    (to_dict()'s keys, hubstore's own columns, due_ms and why).
    """
    if ctx.invoked_subcommand is not None:
        return
    url = given_url(ctx)
    with reading("listing the jobs", url) as uow:
        try:
            page = uow.page_assigns(status=status, worker_agent=worker, limit=limit,
                                    after=after)
            limits = uow.get_assign_limits()
        except ValidationError as exc:
            raise UsageFailure(f"--after: {exc}") from exc
    log.info("jobs: %d listed, %s", len(page.jobs),
             "the last page" if page.next is None else "more follow")
    rows = _rows(page.jobs, limits)
    if as_json:
        print_json(rows)
    else:
        show("assign jobs", [
            key("job", "job_id"), key("status", "status"), key("worker", "worker_agent"),
            key("supervisor", "supervisor_agent"), key("claimed by", "claimed_by"),
            key("task", "task", whole=False),
            key("attempt", "attempt", right=True), time_column("updated (UTC)",
                                                              "updated_at_ms"),
            Column("due (UTC)", lambda d: when(d["due_ms"]), whole=True),
            Column("why", lambda d: d["why"])], rows,
            optional=("supervisor", "claimed by", "updated (UTC)", "attempt", "due (UTC)"))
    if page.next is not None:
        click.echo(f"note: {len(page.jobs)} shown; more follow: hubstore jobs ... --after "
                   f"{page.next}", err=True)


@jobs.command()
@click.argument("job_id")
@click.option("--reason", default="manual", show_default=True,
              help="Why (the retry_scheduled event says it).")
@click.option("--force", is_flag=True,
              help="Retry a job whose retries are spent (it gets one attempt more).")
@command_options
def retry(job_id: str, reason: str, force: bool, url: URL) -> None:
    """Queue a failed or timed-out JOB_ID again, for its next attempt.

    Prints the job's id, status and attempt.
    """
    with reported(f"retrying job {job_id}", url), HubStore.open(url) as store:
        job = store.schedule_assign_retry(job_id, reason=reason, requested_by="cli",
                                          force=force)
    click.echo(f"{job.job_id}\t{job.status}\t{job.attempt}")


@jobs.command()
@click.argument("job_id")
@click.option("--reason", default=None, help="Why (stored in the job's error).")
@command_options
def cancel(job_id: str, reason: str | None, url: URL) -> None:
    """Cancel JOB_ID (queued or running): it is never run again; its worker hears of it
    at its next touch or report.

    Prints the job's id and status; exit 1 when there is no such job.
    """
    with reported(f"cancelling job {job_id}", url), HubStore.open(url) as store:
        job = store.cancel_assign(job_id, reason=reason)
        if job is None:
            raise click.ClickException(f"there is no assign job {job_id}")
    click.echo(f"{job.job_id}\t{job.status}")
