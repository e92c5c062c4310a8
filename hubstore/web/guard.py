"""The console's gate: what every request passes before any page sees it.

In order: the ``Host`` header must name the console (against DNS rebinding: the bound
host, loopback names, and the hosts the application allows; no check when it gives
none); a guarded console (a token or a hook) answers only a signed-in or approved
sender, but for the sign-in page, the static files, and ``/metrics`` with the token
as a bearer; a request body is refused (413) past its bound before the rest is read:
:data:`MAX_BODY_BYTES` for a sender who may read a guarded console,
:data:`MAX_ANONYMOUS_BODY_BYTES` for anyone else (a sign-in form); no multipart body
(the console has no upload). Every response says ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hubstore.web.security import VERDICT, Security

#: A request body's bound for a sender who may read a guarded console.
MAX_BODY_BYTES = 1024 * 1024
#: A request body's bound for anyone else: a sign-in form is far smaller.
MAX_ANONYMOUS_BODY_BYTES = 16 * 1024
#: Host names that are always the console's own (it is reached on loopback).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: A stream of a guarded console asks again this often whether its sender may read (a
#: session signed out, or past its end, stops its streams at their next event).
STREAM_RECHECK_S = 10.0
#: Paths anyone may reach on a guarded console (the route's path, below the root path).
OPEN_PATHS = frozenset({"/login"})
OPEN_PREFIXES = ("/static/",)


class BodyTooLarge(Exception):
    """The request's body went past its bound while it was read."""


class NoLongerAllowed(Exception):
    """The sender of a stream may no longer read (signed out, session ended)."""


def host_name(host: str) -> str:
    """The name in a ``Host`` header value, without its port, in lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def route_path(scope: Scope) -> str:
    """The request's path below the application's root path."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "") or ""
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("", "/"):
        return path[len(root):] or "/"
    return path


class Guard:
    """ASGI middleware: the console's gate (see the module's docstring)."""

    def __init__(self, app: ASGIApp, security: Security,
                 allowed_hosts: Collection[str] | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.security = security
        self.hosts = (None if allowed_hosts is None else
                      LOOPBACK_HOSTS | {host_name(h) for h in allowed_hosts})
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_nosniff(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        refusal = await self._refusal(scope, receive)
        if refusal is not None:
            await refusal(scope, receive, send_nosniff)
            return
        if self.security.guarded and route_path(scope).startswith("/events"):
            try:
                await self.app(scope, receive, self._rechecking(scope, receive, send_nosniff))
            except NoLongerAllowed:  # the stream ends; the browser's retry is refused
                return
            return
        bound = await self._body_bound(scope, receive)
        total = 0

        async def bounded_receive() -> Message:
            nonlocal total
            message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > bound:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, bounded_receive, send_nosniff)
        except BodyTooLarge:
            if started:
                raise
            await _too_large(bound)(scope, receive, send_nosniff)

    def _rechecking(self, scope: Scope, receive: Receive, send: Send) -> Send:
        """``send``, asking again every :data:`STREAM_RECHECK_S` whether the stream's
        sender may still read (NoLongerAllowed when not)."""
        checked = time.monotonic()

        async def send_while_allowed(message: Message) -> None:
            nonlocal checked
            if (message["type"] == "http.response.body"
                    and time.monotonic() - checked >= STREAM_RECHECK_S):
                checked = time.monotonic()
                scope.pop(VERDICT, None)
                if not await self.security.may_read(Request(scope, receive)):
                    raise NoLongerAllowed
            await send(message)

        return send_while_allowed

    async def _refusal(self, scope: Scope, receive: Receive) -> Response | None:
        """The answer to send instead of the page, or None to serve it."""
        headers = Headers(scope=scope)
        if self.hosts is not None and host_name(headers.get("host", "")) not in self.hosts:
            return PlainTextResponse("400: this Host is not the console's (start it with "
                                     "--allowed-host for another name)", status_code=400)
        if scope["method"] == "POST":
            length = headers.get("content-length", "")
            bound = await self._body_bound(scope, receive)
            if length and (not length.isdigit() or int(length) > bound):
                return _too_large(bound)
            if headers.get("content-type", "").lower().startswith("multipart/"):
                return PlainTextResponse("415: the console takes no upload",
                                         status_code=415)
        path = route_path(scope)
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        request = Request(scope, receive)
        security = self.security
        if path == "/metrics" and security.bearer_matches(request):
            return None
        if await security.may_read(request):
            return None
        if path == "/metrics":
            return PlainTextResponse("401: /metrics needs the operator token as a bearer "
                                     "or a session", status_code=401,
                                     headers={"WWW-Authenticate": "Bearer"})
        if not security.uses_login:
            return PlainTextResponse("403: the application refused this request",
                                     status_code=403)
        page = (scope["method"] == "GET" and not path.startswith(("/live/", "/events"))
                and "hx-request" not in headers)
        if page:
            return RedirectResponse(str(request.url_for("login_page")), status_code=303)
        return PlainTextResponse("401: sign in first", status_code=401)

    async def _body_bound(self, scope: Scope, receive: Receive) -> int:
        security = self.security
        if security.guarded and await security.identified(Request(scope, receive)):
            return self.max_body_bytes
        return min(self.max_body_bytes, MAX_ANONYMOUS_BODY_BYTES)


def _too_large(bound: int) -> Response:
    return PlainTextResponse(f"413: the request's body is over {bound} bytes",
                             status_code=413, headers={"Connection": "close"})
