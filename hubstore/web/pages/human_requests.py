"""Human requests: the pending ones, the nearest deadline first, each answered by its kind;
those past their deadline (expired: shown, never answerable, refused server-side too);
and the newest answered ones (the history).

The list is not replaced while a person may be typing an answer: the live part says how
many are pending and, when the set changed, links to the new list.

Answers (the request's ``response``): approval ``{"approved": true|false}``; choice
``{"choice": <one of the schema's options>}``; text and captcha ``{"text": ...}``;
credential ``{"credential": ...}``. Any kind may be declined (state ``declined``, no
response). A credential is typed into a masked field, and is never rendered back, logged
or put in a URL: after the answer the page shows only that it was answered. A text answer
is typed in a multi-line field. Requester, prompt and options show their invisible
characters (bidi controls, zero-width ones) as ``⟨U+202E⟩``. A choice shows its options'
labels and sends their values.

A request is answered once (``answer_human_request``, a guarded UPDATE): when two
operators answer at once, the second is told that someone else answered first, and
what the request's state now is.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.errors import HubStoreError
from hubstore.ids import now_ms
from hubstore.models import HumanRequest
from hubstore.services.human_requests import recent_answered
from hubstore.store import HubStore
from hubstore.types import HumanState
from hubstore.web.console import (
    back,
    checked_form,
    console_of,
    dom_id,
    failed,
    field,
    render,
    when,
)

log = logging.getLogger("hubstore.web")
#: The schema keys that may hold a choice's options, in the order they are looked at.
OPTION_KEYS = ("options", "choices", "enum")
#: Answered requests the history shows.
HISTORY = 50


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def labelled_options(request: HumanRequest) -> list[tuple[str, str]]:
    """A choice request's options as (value, label), as text (from its schema: an item
    ``{"value": ..., "label": ...}`` is shown by its label and answered with its value;
    a plain item is both)."""
    schema = request.schema
    found: Any = None
    if isinstance(schema, dict):
        found = next((schema[k] for k in OPTION_KEYS if isinstance(schema.get(k), list)), None)
    elif isinstance(schema, list):
        found = schema
    result: list[tuple[str, str]] = []
    for item in found or []:
        if isinstance(item, dict):
            value = item.get("value", item.get("label"))
            label = item.get("label", value)
        else:
            value = label = item
        if value is not None:
            result.append((_text(value), _text(label)))
    return result


def options(request: HumanRequest) -> list[str]:
    """A choice request's options' values, as text."""
    return [value for value, _ in labelled_options(request)]


def _history(store: HubStore) -> list[HumanRequest]:
    with store.transaction(write=False) as uow:
        return recent_answered(uow, HISTORY)


async def _context(request: Request) -> dict[str, Any]:
    store = console_of(request).store
    now = now_ms()
    every = await store.get_pending_human_requests()
    every.sort(key=lambda r: (r.deadline_ms, r.request_id))
    pending = [r for r in every if r.deadline_ms > now]
    expired = [r for r in every if r.deadline_ms <= now]
    digest = dom_id("\n".join(r.request_id for r in pending))
    return {"pending": pending, "expired": expired,
            "options": {r.request_id: labelled_options(r) for r in pending},
            "history": await store.run_sync(_history),
            "now": now, "digest": digest,
            "changed": request.query_params.get("shown", digest) != digest}


async def human_requests(request: Request) -> Response:
    return await render(request, "human_requests.html", await _context(request))


async def human_requests_live(request: Request) -> Response:
    return await render(request, "human_requests_status.html", await _context(request))


class _Refused(Exception):
    pass


def _answer(human: HumanRequest, decision: str, form: Any) -> tuple[HumanState, Any]:
    """(state, response) for the posted answer; _Refused with a reason people read."""
    if decision == "decline":
        return "declined", None
    if decision != "accept":
        raise _Refused("unknown decision")
    kind = human.kind
    if kind == "approval":
        return "accepted", {"approved": True}
    if kind == "choice":
        choice = field(form, "choice")
        if choice not in options(human):
            raise _Refused("choose one of the request's options")
        return "accepted", {"choice": choice}
    value = field(form, "value")
    if kind == "text":  # a multi-line field: the browser sends its line ends as CRLF
        value = value.replace("\r\n", "\n")
    if not value:
        raise _Refused("the answer is empty")
    key = "credential" if kind == "credential" else "text"
    return "accepted", {key: value}


async def answer(request: Request) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    store = console_of(request).store
    request_id = field(form, "id")
    human = await store.get_human_request(request_id) if request_id else None
    if human is None:
        return await render(request, "missing.html", {"what": "human request"},
                            status_code=404)
    if human.state == "pending" and human.deadline_ms <= now_ms():
        log.info("console: answer to %s refused: its deadline passed", request_id)
        return await render(request, "failed.html", {
            "error": f"the request's deadline passed at {when(human.deadline_ms)} UTC: it "
                     f"expired (then: {human.default_action}) and cannot be answered",
            "code": "EXPIRED"}, status_code=409)
    try:
        state, response = _answer(human, field(form, "decision"), form)
        answered = await store.answer_human_request(request_id, state, response)
    except _Refused as exc:
        return await render(request, "failed.html", {"error": str(exc), "code": "VALIDATION"},
                            status_code=400)
    except HubStoreError as exc:
        if human.kind == "credential":  # its message could quote the value
            log.info("console: answer to %s refused (%s)", request_id, exc.code)
            return await render(request, "failed.html", {
                "error": "the store refused the credential (it is not kept)",
                "code": exc.code}, status_code=400)
        return await failed(request, exc)
    if answered is None:  # answered elsewhere (or timed out) since the page was shown
        now = await store.get_human_request(request_id)
        log.info("console: human request %s was answered elsewhere first", request_id)
        return back(request, "human_requests", "someone else answered it first (it is "
                    f"{now.state if now is not None else 'gone'}): yours was not kept")
    log.info("console: human request %s (%s) %s", request_id, human.kind, state)
    return back(request, "human_requests", f"answered: {state}")


routes = [
    Route("/human-requests", human_requests, name="human_requests"),
    Route("/live/human-requests", human_requests_live, name="human_requests_live"),
    Route("/human-requests/answer", answer, methods=["POST"], name="human_request_answer"),
]
