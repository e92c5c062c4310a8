"""What every page shares: the console's state, rendering, and the guard of actions."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jinja2
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from hubstore.aio import AsyncHubStore
from hubstore.assign_rules import duration_text
from hubstore.errors import HubStoreError
from hubstore.models import HUMAN_STATES
from hubstore.web.metrics import Tally
from hubstore.web.security import CSRF_COOKIE, CSRF_FIELD, Security
from hubstore.web.stream import Pulse, stall_ms
from hubstore.web.visible import visible

log = logging.getLogger("hubstore.web")

Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class Console:
    """One console app's state: the store, who may act, the templates, the pulse, the
    tally of finished jobs /metrics counts."""

    store: AsyncHubStore
    security: Security
    templates: Jinja2Templates
    pulse: Pulse
    tally: Tally = dataclasses.field(default_factory=Tally)


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def when(ms: object) -> str:
    """A time in ms since the epoch as UTC text ('' for none)."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return str(ms)


def duration(ms: object) -> str:
    """A duration in ms for people (30d, 12h, 15m, 45s, 250ms; '' for none)."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return ""
    return duration_text(ms)


def as_json(value: Any) -> str:
    """A stored JSON value as indented text (escaped by the template, as everything)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def dom_id(value: object) -> str:
    """A stable HTML id for a stored key (which may hold any character)."""
    return hashlib.sha256(str(value).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def make_templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.PackageLoader("hubstore.web", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["when"] = when
    env.filters["as_json"] = as_json
    env.filters["dom_id"] = dom_id
    env.filters["duration"] = duration
    env.filters["visible"] = visible
    return Jinja2Templates(env=env)


async def render(request: Request, template: str, context: dict[str, Any],
                 status_code: int = 200) -> HTMLResponse:
    """``template`` with ``context`` and what every page needs (may the viewer act, the
    CSRF token); sets the CSRF cookie the first time."""
    console = console_of(request)
    security = console.security
    nonce, new = security.csrf_nonce(request)
    page = {
        "request": request,
        "can_act": await security.may_act(request),
        "read_only": security.read_only,
        "uses_login": security.uses_login,
        "csrf_field": CSRF_FIELD,
        "csrf": await security.csrf_token(nonce),
        "notice": NOTICES.get(request.query_params.get("notice", ""), ""),
        "stall_ms": stall_ms(),
        **context,
    }
    response = console.templates.TemplateResponse(request, template, page,
                                                  status_code=status_code)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
    if new:
        security.set_cookie(request, response, CSRF_COOKIE, nonce)
    return response


async def refused(request: Request, why: str) -> HTMLResponse:
    """The page saying an action was refused (403)."""
    log.warning("refused %s %s: %s", request.method, request.url.path, why)
    return await render(request, "refused.html", {"why": why}, status_code=403)


async def checked_form(request: Request) -> FormData | Response:
    """The posted form when the sender may act and its CSRF token is good, else the
    refusal to send back."""
    security = console_of(request).security
    form = await request.form()
    given = form.get(CSRF_FIELD)
    if not await security.csrf_valid(request, given if isinstance(given, str) else ""):
        return await refused(request, "the form's CSRF check failed: reload the page "
                             "and try again")
    if not await security.may_act(request):
        why = ("this console is read-only" if security.read_only
               else "sign in with the operator token first")
        return await refused(request, why)
    return form


def field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def notice_code(text: str) -> str:
    """The code in a URL of a notice's text (``answered: accepted`` -> answered-accepted)."""
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _notices() -> dict[str, str]:
    states = [*HUMAN_STATES, "gone"]
    texts = ["requeued", "discarded", "already gone", "retry scheduled", "cancelled",
             "saved", "deleted", *(f"answered: {state}" for state in HUMAN_STATES),
             *(f"someone else answered it first (it is {state}): yours was not kept"
               for state in states)]
    return {notice_code(text): text for text in texts}


#: The notices a page shows after an action, by their code in ``?notice=``: only these
#: (a link cannot put its own text in the page's success banner).
NOTICES = _notices()


def kept_query(request: Request, *dropped: str) -> dict[str, str]:
    """The page's query for its own live part or first page: without ``notice`` (a
    one-time banner, never carried into another URL) and without ``dropped``."""
    return {k: v for k, v in request.query_params.items()
            if k != "notice" and k not in dropped}


def back(request: Request, name: str, notice: str, **query: str) -> RedirectResponse:
    """303 to a page (Post/Redirect/Get) with a short notice (one of :data:`NOTICES`,
    passed as its code; another shows none)."""
    code = notice_code(notice)
    if code not in NOTICES:
        log.warning("console: the notice %r is not one of NOTICES; none shown", notice)
    url = request.url_for(name).include_query_params(**query, notice=code)
    return RedirectResponse(str(url), status_code=303)


async def failed(request: Request, exc: HubStoreError) -> HTMLResponse:
    """The page saying a store call failed (400 for bad input, 409 otherwise)."""
    status = 400 if exc.code == "VALIDATION" else 409
    log.info("%s %s failed: %s", request.method, request.url.path, exc.code)
    return await render(request, "failed.html", {"error": str(exc), "code": exc.code},
                        status_code=status)
