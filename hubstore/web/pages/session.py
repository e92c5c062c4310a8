"""Signing in with the operator token (posted, never in a URL) and out."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from hubstore.web.console import console_of, field, refused, render
from hubstore.web.security import CSRF_FIELD, SESSION_COOKIE, SESSION_MAX_AGE_S

log = logging.getLogger("hubstore.web")


async def login_page(request: Request) -> Response:
    return await render(request, "login.html", {"failed": False})


async def login(request: Request) -> Response:
    security = console_of(request).security
    form = await request.form()
    if not security.csrf_valid(request, field(form, CSRF_FIELD)):
        return await refused(request, "the form's CSRF check failed: reload the page")
    if not security.uses_login:
        return await refused(request, "this console takes no operator token")
    if not security.token_matches(field(form, "token")):
        log.warning("console: sign-in with a wrong token refused")
        return await render(request, "login.html", {"failed": True}, status_code=403)
    log.info("console: operator signed in")
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    security.set_cookie(request, response, SESSION_COOKIE, security.new_session(),
                        max_age=SESSION_MAX_AGE_S)
    return response


async def logout(request: Request) -> Response:
    security = console_of(request).security
    form = await request.form()
    if not security.csrf_valid(request, field(form, CSRF_FIELD)):
        return await refused(request, "the form's CSRF check failed: reload the page")
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    security.clear_cookie(request, response, SESSION_COOKIE)
    return response


routes = [
    Route("/login", login_page, methods=["GET"], name="login_page"),
    Route("/login", login, methods=["POST"], name="login"),
    Route("/logout", logout, methods=["POST"], name="logout"),
]
