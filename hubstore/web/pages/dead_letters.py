"""Dead letters: newest first, each with its message; requeue or discard."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.errors import HubStoreError
from hubstore.services.console_reads import messages_by_id
from hubstore.web.console import back, checked_form, console_of, failed, field, render

log = logging.getLogger("hubstore.web")
SHOWN = 100


async def _context(request: Request) -> dict[str, Any]:
    store = console_of(request).store
    letters = await store.get_dead_letters(limit=SHOWN)
    messages = await store.run_sync(
        lambda s: messages_by_id(s, [d.message_id for d in letters]))
    return {"letters": letters, "messages": messages, "shown": SHOWN}


async def dead_letters(request: Request) -> Response:
    return await render(request, "dead_letters.html", await _context(request))


async def dead_letters_live(request: Request) -> Response:
    return await render(request, "dead_letters_live.html", await _context(request))


async def _act(request: Request, verb: str) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    message_id = field(form, "id")
    store = console_of(request).store
    try:
        if verb == "requeue":
            done = await store.requeue_dead_letter(message_id)
        else:
            done = await store.discard_dead_letter(message_id)
    except HubStoreError as exc:
        return await failed(request, exc)
    log.info("console: dead letter %s %s", message_id, verb if done else f"not found ({verb})")
    notice = {"requeue": "requeued", "discard": "discarded"}[verb] if done else "already gone"
    return back(request, "dead_letters", notice)


async def requeue(request: Request) -> Response:
    return await _act(request, "requeue")


async def discard(request: Request) -> Response:
    return await _act(request, "discard")


routes = [
    Route("/dead-letters", dead_letters, name="dead_letters"),
    Route("/live/dead-letters", dead_letters_live, name="dead_letters_live"),
    Route("/dead-letters/requeue", requeue, methods=["POST"], name="dead_letter_requeue"),
    Route("/dead-letters/discard", discard, methods=["POST"], name="dead_letter_discard"),
]
