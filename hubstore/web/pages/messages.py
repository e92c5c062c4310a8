"""Messages: those of one trace, a page at a time (page_messages_by_trace), and an
agent's new messages as they arrive (its message feed, over server-sent events)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.errors import HubStoreError
from hubstore.web.console import console_of, failed, render

#: Messages a page of a trace shows.
SHOWN = 100


async def messages(request: Request) -> Response:
    trace_id = request.query_params.get("trace_id", "").strip()
    agent = request.query_params.get("agent", "").strip()
    cursor = request.query_params.get("after") or None
    found, next_url = [], None
    if trace_id:
        try:
            page = await console_of(request).store.page_messages_by_trace(
                trace_id, after=cursor, limit=SHOWN)
        except HubStoreError as exc:
            return await failed(request, exc)
        found = page.messages
        if page.next is not None:
            next_url = request.url_for("messages").include_query_params(
                trace_id=trace_id, after=page.next)
    return await render(request, "messages.html", {
        "trace_id": trace_id, "agent": agent, "messages": found, "next_url": next_url,
        "first_url": None if cursor is None else request.url_for(
            "messages").include_query_params(trace_id=trace_id)})


routes = [Route("/messages", messages, name="messages")]
