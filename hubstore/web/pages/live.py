"""Server-sent events: the hub's pulse for every page, and an agent's message feed."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hubstore.errors import HubStoreError
from hubstore.services.console_reads import with_worker_depths
from hubstore.validation import require_id
from hubstore.web import stream as streams
from hubstore.web.console import console_of, failed
from hubstore.web.metrics import CONTENT_TYPE_LATEST, exposition, queue_ages

_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def sse(event: str, data: str) -> str:
    """One server-sent event (each line of ``data`` its own ``data:`` line)."""
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {event}\n{lines}\n"


async def events(request: Request) -> Response:
    """``hub`` events: each a new version of what the pages show (one at the start, so a
    page catches up with what changed while it connected), and a ``beat`` event after
    :data:`~hubstore.web.stream.KEEPALIVE_S` without one (a page that hears neither for
    longer says it is not live). The stream ends when the pulse stops (the server is stopping)."""
    pulse = console_of(request).pulse

    async def stream() -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        async with pulse.listen() as listener:
            yield sse("hub", str(listener.seen))
            while True:
                version = await pulse.unless_stopped(listener.next(streams.KEEPALIVE_S))
                if pulse.stopped:
                    return
                yield sse("beat", "") if version is None else sse("hub", str(version))

    return StreamingResponse(stream(), media_type="text/event-stream", headers=_HEADERS)


async def message_events(request: Request) -> Response:
    """``message`` events: rows of the agent's new messages, from its message feed."""
    console = console_of(request)
    agent = request.query_params.get("agent", "")
    try:
        require_id(agent, "agent")
        feed = await console.store.message_feed(agent)
    except HubStoreError as exc:
        return await failed(request, exc)
    row = console.templates.get_template("message_rows.html")

    pulse = console.pulse

    async def stream() -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        while True:
            messages = await pulse.unless_stopped(
                feed.next(timeout_s=streams.KEEPALIVE_S, max_messages=50))
            if messages is None:  # the server is stopping
                return
            if messages:
                yield sse("message", row.render(messages=list(reversed(messages)),
                                                  request=request))
            else:
                yield ": idle\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream", headers=_HEADERS)


async def metrics(request: Request) -> Response:
    console = console_of(request)
    store = console.store
    snap, workers = await store.run_sync(with_worker_depths)
    oldest = await store.run_sync(lambda s: queue_ages(s, workers))
    await store.run_sync(console.tally.read)
    return Response(exposition(snap, workers, oldest, console.tally),
                    media_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})


routes = [
    Route("/events", events, name="events"),
    Route("/events/messages", message_events, name="message_events"),
    Route("/metrics", metrics, name="metrics"),
]
