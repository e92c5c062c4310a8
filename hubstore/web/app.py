"""The console's ASGI application: :func:`create_app`."""

from __future__ import annotations

import logging
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from hubstore import telemetry
from hubstore.aio import AsyncHubStore
from hubstore.errors import ValidationError
from hubstore.store import HubStore
from hubstore.web.console import Console, make_templates
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
STATIC = Path(__file__).parent / "static"


def create_app(store: HubStore | AsyncHubStore, token: str | None = None,
               read_only: bool | None = None, *, auth: AuthHook | None = None) -> Starlette:
    """The console for ``store``, an ASGI application (Starlette).

    Mount it inside an application (``Mount("/hub", app=create_app(store))``) or serve
    it alone (``hubstore web``). ``store`` may be a :class:`~hubstore.HubStore` (the
    console then runs its calls on an :class:`~hubstore.aio.AsyncHubStore` of its own,
    off the event loop) or an AsyncHubStore the application already uses.

    Who may act: with ``token`` (an operator token, never shown or logged) operators sign
    in by typing it; with ``auth`` (the application's hook: ``auth(request) -> bool``,
    sync or async) the application decides per request. Without either the console is
    read-only; ``read_only=True`` makes it read-only anyway. Every action also needs the
    page's CSRF token. When the ``otel`` extra is installed, the store's calls are traced
    (:func:`hubstore.telemetry.instrument`).
    """
    if isinstance(store, AsyncHubStore):
        astore = store
    elif isinstance(store, HubStore):
        astore = AsyncHubStore(store)
    else:
        raise ValidationError(
            f"store must be a HubStore or an AsyncHubStore, not {type(store).__name__}")
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise ValidationError("token must be a string of at least 8 characters")
    if auth is not None and not callable(auth):
        raise ValidationError("auth must be a function of the request")
    if read_only is False and token is None and auth is None:
        raise ValidationError("read_only=False needs an operator token or an auth hook: "
                              "every action must be authenticated")
    if telemetry.available():
        telemetry.instrument(astore.sync)
    console = Console(
        store=astore,
        security=Security(token=token, auth=auth,
                          read_only=bool(read_only) or (token is None and auth is None)),
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
    app = Starlette(routes=routes)
    app.state.console = console
    return app
