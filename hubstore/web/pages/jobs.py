"""Jobs: a filtered list paged past any count (``page_assigns``), a job with its messages,
why a queued one is not taken yet (``waiting_reason``, as ``hubstore jobs`` says it),
retry (or, once its retries are spent, retry anyway), cancel."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore import assign_rules as rules
from hubstore.errors import HubStoreError, RetryExhausted, ValidationError
from hubstore.ids import now_ms
from hubstore.models import ASSIGN_STATUSES
from hubstore.services.assigns.listing import waiting_text
from hubstore.services.console_reads import JobFilters
from hubstore.web.console import (
    back,
    checked_form,
    console_of,
    failed,
    field,
    kept_query,
    render,
)

log = logging.getLogger("hubstore.web")
REQUESTED_BY = "console"
#: Jobs a page shows.
PAGE = 50
#: Messages of the job's trace a job page shows (page_messages_by_trace: one bounded
#: read, however long the trace).
TRACE_PAGE = 100


def _filters(request: Request) -> JobFilters:
    q = request.query_params
    status = q.get("status", "")
    return JobFilters(status=status if status in ASSIGN_STATUSES else "",
                      worker_agent=q.get("worker_agent", "").strip(),
                      supervisor_agent=q.get("supervisor_agent", "").strip(),
                      trace_id=q.get("trace_id", "").strip(),
                      correlation_id=q.get("correlation_id", "").strip())


async def _list_context(request: Request) -> dict[str, Any]:
    """A page of jobs (``page_assigns``: a keyset cursor, past any count), each queued one
    with why it is not taken yet."""
    filters = _filters(request)
    cursor = request.query_params.get("after") or None
    store = console_of(request).store
    page = await store.page_assigns(**filters.arguments(), limit=PAGE, after=cursor)
    limits = await store.get_assign_limits()
    now = now_ms()
    query = filters.items()
    next_url = None
    if page.next is not None:
        next_url = request.url_for("jobs").include_query_params(**query, after=page.next)
    return {"page": page, "filters": filters, "statuses": ASSIGN_STATUSES,
            "waiting": {job.job_id: waiting_text(job, limits, now) for job in page.jobs},
            "next_url": next_url, "first_page": cursor is None,
            "first_url": request.url_for("jobs").include_query_params(**query),
            "live_url": request.url_for("jobs_live").include_query_params(
                **kept_query(request)), "now": now}


async def _page(request: Request, template: str) -> Response:
    try:
        context = await _list_context(request)
    except ValidationError as exc:  # a filter or cursor no page gave
        return await failed(request, exc)
    return await render(request, template, context)


async def jobs(request: Request) -> Response:
    return await _page(request, "jobs.html")


async def jobs_live(request: Request) -> Response:
    return await _page(request, "jobs_live.html")


async def _job_context(request: Request) -> dict[str, Any] | None:
    store = console_of(request).store
    job_id = request.query_params.get("id", "")
    try:
        job = await store.get_assign(job_id) if job_id else None
    except ValidationError:  # an id no job can have (a NUL, too long): none such
        job = None
    if job is None:
        return None
    cursor = request.query_params.get("after") or None
    trace = await store.page_messages_by_trace(job.trace_id, after=cursor, limit=TRACE_PAGE)
    here = request.url_for("job").include_query_params(id=job.job_id)
    limits = await store.get_assign_limits()
    now = now_ms()
    held = limits.get(job.limit_key) if job.limit_key is not None else None
    retryable = job.status in rules.RETRYABLE
    return {"job": job, "messages": trace.messages, "waiting": waiting_text(job, limits, now),
            "now": now,
            "limit": held.to_dict() if held is not None else None,
            "can_retry": retryable and job.retry_count < job.max_retries,
            "can_force": retryable and job.retry_count >= job.max_retries,
            "can_cancel": job.status in rules.ACTIVE,
            "trace_next_url": None if trace.next is None else here.include_query_params(
                after=trace.next),
            "trace_first_url": None if cursor is None else here,
            "live_url": request.url_for("job_live").include_query_params(
                **kept_query(request))}


async def _job_page(request: Request, template: str) -> Response:
    try:
        context = await _job_context(request)
    except ValidationError as exc:  # a cursor no page gave
        return await failed(request, exc)
    if context is None:
        return await render(request, "missing.html", {"what": "job"}, status_code=404)
    return await render(request, template, context)


async def job(request: Request) -> Response:
    return await _job_page(request, "job.html")


async def job_live(request: Request) -> Response:
    return await _job_page(request, "job_live.html")


async def retry(request: Request) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    job_id = field(form, "id")
    reason = field(form, "reason").strip() or "retried from the console"
    force = field(form, "force") == "1"
    try:
        await console_of(request).store.schedule_assign_retry(job_id, reason, REQUESTED_BY,
                                                              force=force)
    except RetryExhausted as exc:  # the page was older than the job's last retry
        return await render(request, "failed.html", {
            "error": f"{exc}: the job's page now offers to retry it anyway",
            "code": exc.code, "retry_url": request.url_for("job").include_query_params(
                id=job_id)}, status_code=409)
    except HubStoreError as exc:
        return await failed(request, exc)
    log.info("console: job %s retried%s", job_id, " anyway (its retries were spent)"
             if force else "")
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
