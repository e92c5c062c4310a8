"""Signing in with the operator token (posted, never in a URL) and out."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from hubstore.web.console import console_of, field, refused, render
from hubstore.web.security import CSRF_FIELD, SESSION_COOKIE, SESSION_MAX_AGE_S, client_of

log = logging.getLogger("hubstore.web")


async def login_page(request: Request) -> Response:
    return await render(request, "login.html", {"failed": False})


async def login(request: Request) -> Response:
    security = console_of(request).security
    form = await request.form()
    if not await security.csrf_valid(request, field(form, CSRF_FIELD)):
        return await refused(request, "the form's CSRF check failed: reload the page")
    if not security.uses_login:
        return await refused(request, "this console takes no operator token")
    client = client_of(request)
    throttle = security.throttle
    wait = throttle.wait_s(client)
    if wait > 0:
        log.warning("console: sign-in from %s refused unread: %.0f s to wait after "
                    "failed ones", client, wait)
        slowed = await refused(request, f"too many failed sign-ins: wait {wait:.0f} s")
        slowed.status_code = 429
        slowed.headers["Retry-After"] = str(max(1, round(wait)))
        return slowed
    if not security.token_matches(field(form, "token")):
        failures = throttle.failed(client)
        log.warning("console: sign-in from %s with a wrong token refused (%d in a row)",
                    client, failures)
        return await render(request, "login.html", {"failed": True}, status_code=403)
    throttle.succeeded(client)
    log.info("console: operator signed in from %s", client)
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    security.set_cookie(request, response, SESSION_COOKIE, await security.open_session(),
                        max_age=SESSION_MAX_AGE_S)
    return response


async def logout(request: Request) -> Response:
    security = console_of(request).security
    form = await request.form()
    if not await security.csrf_valid(request, field(form, CSRF_FIELD)):
        return await refused(request, "the form's CSRF check failed: reload the page")
    await security.close_session(request)
    log.info("console: operator signed out")
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    security.clear_cookie(request, response, SESSION_COOKIE)
    return response


routes = [
    Route("/login", login_page, methods=["GET"], name="login_page"),
    Route("/login", login, methods=["POST"], name="login"),
    Route("/logout", logout, methods=["POST"], name="logout"),
]
