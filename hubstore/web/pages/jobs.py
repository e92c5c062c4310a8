"""Jobs: a filtered list paged past any count, a job with its messages, retry, cancel."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.errors import HubStoreError
from hubstore.ids import now_ms
from hubstore.models import ASSIGN_STATUSES, AssignJob
from hubstore.web.console import back, checked_form, console_of, failed, field, render
from hubstore.web.queries import JobFilters, page_jobs

log = logging.getLogger("hubstore.web")
REQUESTED_BY = "console"


def _filters(request: Request) -> JobFilters:
    q = request.query_params
    status = q.get("status", "")
    return JobFilters(status=status if status in ASSIGN_STATUSES else "",
                      worker_agent=q.get("worker_agent", "").strip(),
                      supervisor_agent=q.get("supervisor_agent", "").strip(),
                      trace_id=q.get("trace_id", "").strip(),
                      correlation_id=q.get("correlation_id", "").strip())


async def _list_context(request: Request) -> dict[str, Any]:
    filters = _filters(request)
    cursor = request.query_params.get("after") or None
    page = await console_of(request).store.run_sync(
        lambda s: page_jobs(s, filters, cursor))
    query = filters.items()
    next_url = None
    if page.next_cursor is not None:
        next_url = request.url_for("jobs").include_query_params(
            **query, after=page.next_cursor)
    return {"page": page, "filters": filters, "statuses": ASSIGN_STATUSES,
            "next_url": next_url, "first_page": cursor is None,
            "first_url": request.url_for("jobs").include_query_params(**query),
            "live_url": request.url_for("jobs_live").include_query_params(
                **request.query_params), "now": now_ms()}


async def jobs(request: Request) -> Response:
    return await render(request, "jobs.html", await _list_context(request))


async def jobs_live(request: Request) -> Response:
    return await render(request, "jobs_live.html", await _list_context(request))


def why_waiting(job: AssignJob, now: int) -> str | None:
    """Why a queued job is not taken yet (None when it is not queued)."""
    if job.status != "queued":
        return None
    if job.not_before_ms is not None and job.not_before_ms > now:
        if job.retry_count and job.last_retry_at_ms is not None:
            return (f"back-off after retry {job.retry_count}: not taken before "
                    f"{job.not_before_ms} (ms since the epoch)")
        return f"due later: not taken before {job.not_before_ms} (ms since the epoch)"
    return f"due now: waiting for worker {job.worker_agent!r} to claim it"


async def _job_context(request: Request) -> dict[str, Any] | None:
    store = console_of(request).store
    job_id = request.query_params.get("id", "")
    job = await store.get_assign(job_id) if job_id else None
    if job is None:
        return None
    messages = await store.get_messages_by_trace(job.trace_id)
    now = now_ms()
    return {"job": job, "messages": messages, "waiting": why_waiting(job, now), "now": now,
            "can_retry": job.status in ("failed", "timed_out"),
            "can_cancel": job.status in ("queued", "running")}


async def job(request: Request) -> Response:
    context = await _job_context(request)
    if context is None:
        return await render(request, "missing.html", {"what": "job"}, status_code=404)
    return await render(request, "job.html", context)


async def job_live(request: Request) -> Response:
    context = await _job_context(request)
    if context is None:
        return await render(request, "missing.html", {"what": "job"}, status_code=404)
    return await render(request, "job_live.html", context)


async def retry(request: Request) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    job_id = field(form, "id")
    reason = field(form, "reason").strip() or "retried from the console"
    try:
        await console_of(request).store.schedule_assign_retry(job_id, reason, REQUESTED_BY)
    except HubStoreError as exc:
        return await failed(request, exc)
    log.info("console: job %s retried", job_id)
    return back(request, "job", "retry scheduled", id=job_id)


async def cancel(request: Request) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    job_id = field(form, "id")
    reason = field(form, "reason").strip() or "cancelled from the console"
    store = console_of(request).store
    try:
        done = await store.cancel_assign(job_id, reason)
    except HubStoreError as exc:
        return await failed(request, exc)
    if done is None:
        return await render(request, "missing.html", {"what": "job"}, status_code=404)
    log.info("console: job %s cancelled", job_id)
    return back(request, "job", "cancelled", id=job_id)


routes = [
    Route("/jobs", jobs, name="jobs"),
    Route("/live/jobs", jobs_live, name="jobs_live"),
    Route("/job", job, name="job"),
    Route("/live/job", job_live, name="job_live"),
    Route("/job/retry", retry, methods=["POST"], name="job_retry"),
    Route("/job/cancel", cancel, methods=["POST"], name="job_cancel"),
]
