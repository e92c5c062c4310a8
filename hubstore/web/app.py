"""The console's ASGI application: :func:`create_app`."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from hubstore import telemetry
from hubstore.aio import AsyncHubStore
from hubstore.errors import ValidationError
from hubstore.store import HubStore
from hubstore.web.console import Console, make_templates, render
from hubstore.web.guard import MAX_BODY_BYTES, Guard
from hubstore.web.pages import (
    dead_letters,
    human_requests,
    jobs,
    live,
    messages,
    overview,
    reflexion,
    session,
)
from hubstore.web.security import AuthHook, Security
from hubstore.web.stream import Pulse

log = logging.getLogger("hubstore.web")
#: The shortest operator token accepted.
MIN_TOKEN_LENGTH = 8
STATIC = Path(__file__).parent / "static"


def create_app(store: HubStore | AsyncHubStore, token: str | None = None,
               read_only: bool | None = None, *, auth: AuthHook | None = None,
               allowed_hosts: Collection[str] | None = None,
               max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
    """The console for ``store``, an ASGI application (Starlette).

    Mount it inside an application (``Mount("/hub", app=create_app(store))``) or serve
    it alone (``hubstore web``). ``store`` may be a :class:`~hubstore.HubStore` (the
    console then runs its calls on an :class:`~hubstore.aio.AsyncHubStore` of its own,
    off the event loop) or an AsyncHubStore the application already uses.

    Who may read and act: with ``token`` (an operator token, never shown or logged)
    operators sign in by typing it, and every page, stream and ``/metrics`` needs the
    session (``/metrics`` also takes the token as a bearer); with ``auth`` (the
    application's hook: ``auth(request) -> bool``, sync or async) the application decides
    per request, for reading as for acting. Without either the console is read-only and
    open to whoever reaches it; ``read_only=True`` makes it read-only anyway. Every action
    also needs the page's CSRF token. ``allowed_hosts``: the ``Host`` names the console
    answers besides loopback ones (None: any, the application's concern); a request body
    over ``max_body_bytes`` is refused unread (413). When the ``otel`` extra is
    installed, the store's calls are traced (:func:`hubstore.telemetry.instrument`).
    """
    if isinstance(store, AsyncHubStore):
        astore = store
    elif isinstance(store, HubStore):
        astore = AsyncHubStore(store)
    else:
        raise ValidationError(
            f"store must be a HubStore or an AsyncHubStore, not {type(store).__name__}")
    if token is not None and (not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH):
        raise ValidationError(f"the operator token must be a string of at least "
                              f"{MIN_TOKEN_LENGTH} characters")
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or (
            max_body_bytes < 1024):
        raise ValidationError("max_body_bytes must be an int of at least 1024")
    if auth is not None and not callable(auth):
        raise ValidationError("auth must be a function of the request")
    if read_only is False and token is None and auth is None:
        raise ValidationError("read_only=False needs an operator token or an auth hook: "
                              "every action must be authenticated")
    if telemetry.available():
        telemetry.instrument(astore.sync)
    security = Security(token=token, auth=auth, store=astore,
                        read_only=bool(read_only) or (token is None and auth is None))
    console = Console(
        store=astore,
        security=security,
        templates=make_templates(),
        pulse=Pulse(astore),
    )
    routes: list[BaseRoute] = [
        *overview.routes, *jobs.routes, *dead_letters.routes, *human_requests.routes,
        *reflexion.routes, *messages.routes, *live.routes, *session.routes,
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    # A HubStore's AsyncHubStore ends its lanes' threads once the app is dropped; the
    # store itself is the caller's to close.
    app = Starlette(routes=routes, exception_handlers={ValidationError: _not_found,
                                                       Exception: _server_error},
                    middleware=[Middleware(Guard, security=security,
                                           allowed_hosts=allowed_hosts,
                                           max_body_bytes=max_body_bytes)])
    app.state.console = console
    return app


async def _server_error(request: Request, exc: Exception) -> Response:
    """A failure no page answers (500), said as plainly, nosniff as every response (it is
    sent outside the console's gate)."""
    log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return PlainTextResponse("500: the console failed (its log says why)", status_code=500,
                             headers={"X-Content-Type-Options": "nosniff"})


async def _not_found(request: Request, exc: Exception) -> Response:
    """A page asked with an id no row can have (a NUL in it, say): not found. (Actions
    answer their own store errors.)"""
    log.info("%s %s: %s", request.method, request.url.path, type(exc).__name__)
    return await render(request, "missing.html", {"what": "thing"}, status_code=404)
