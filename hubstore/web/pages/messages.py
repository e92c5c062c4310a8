"""Messages: those of one trace (get_messages_by_trace), and an agent's new messages as
they arrive (its message feed, over server-sent events)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.web.console import console_of, render

#: Messages a trace shows at most.
SHOWN = 500


async def messages(request: Request) -> Response:
    trace_id = request.query_params.get("trace_id", "").strip()
    agent = request.query_params.get("agent", "").strip()
    found = await console_of(request).store.get_messages_by_trace(trace_id) if trace_id else []
    return await render(request, "messages.html", {
        "trace_id": trace_id, "agent": agent, "messages": found[:SHOWN],
        "total": len(found), "shown": SHOWN})


routes = [Route("/messages", messages, name="messages")]
