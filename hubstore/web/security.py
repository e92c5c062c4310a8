"""Who may act, and proof that an action came from the console's own page.

- Read-only unless the console has an operator token or an authentication hook. With a
  token, an operator signs in by posting it (never in a URL) and gets a session cookie:
  a random nonce with its HMAC under a key derived from the token, so any process
  holding the same token accepts it and nothing is kept on the server. With a hook
  (``auth(request) -> bool``, sync or async) the application decides per request.
- Every POST carries a CSRF token: the HMAC of a per-browser nonce (the ``csrf`` cookie,
  HttpOnly, SameSite=Strict) under a per-app key, and the ``Origin`` header, when the
  browser sends one, must be the console's own.
- Cookies are HttpOnly and SameSite=Strict, Secure over https, scoped to the console's
  path. No token or cookie value is ever logged or rendered.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["AuthHook", "Security"]

#: The application's authentication hook: may this request act?
AuthHook = Callable[[Request], bool | Awaitable[bool]]

SESSION_COOKIE = "hubstore_console"
CSRF_COOKIE = "hubstore_csrf"
CSRF_FIELD = "csrf"
SESSION_MAX_AGE_S = 12 * 3600


def _mac(key: bytes, value: str) -> str:
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


@dataclass
class Security:
    """The console's rules for acting (see the module's docstring)."""

    token: str | None
    auth: AuthHook | None
    read_only: bool

    def __post_init__(self) -> None:
        self._csrf_key = secrets.token_bytes(32)
        self._session_key = (None if self.token is None else
                             hmac.new(self.token.encode(), b"hubstore console session",
                                      hashlib.sha256).digest())

    @property
    def uses_login(self) -> bool:
        """True when operators sign in with the token (no hook decides)."""
        return not self.read_only and self.auth is None

    # -- the operator's session ------------------------------------------------------

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode(), self.token.encode())

    def new_session(self) -> str:
        assert self._session_key is not None
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{_mac(self._session_key, nonce)}"

    def _session_valid(self, request: Request) -> bool:
        if self._session_key is None:
            return False
        nonce, _, mac = request.cookies.get(SESSION_COOKIE, "").partition(".")
        return bool(nonce) and hmac.compare_digest(mac, _mac(self._session_key, nonce))

    async def may_act(self, request: Request) -> bool:
        """True when this request's sender may change the hub."""
        if self.read_only:
            return False
        if self.auth is not None:
            verdict = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return bool(verdict)
        return self._session_valid(request)

    # -- CSRF ------------------------------------------------------------------------

    def csrf_nonce(self, request: Request) -> tuple[str, bool]:
        """The browser's CSRF nonce, and whether it is new (then set the cookie)."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if 16 <= len(nonce) <= 64 and nonce.replace("-", "").replace("_", "").isalnum():
            return nonce, False
        return secrets.token_urlsafe(24), True

    def csrf_token(self, nonce: str) -> str:
        return _mac(self._csrf_key, nonce)

    def csrf_valid(self, request: Request, given: str) -> bool:
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if not nonce or not given:
            return False
        if not hmac.compare_digest(given, self.csrf_token(nonce)):
            return False
        origin = request.headers.get("origin")
        if origin is None:  # not a browser's cross-site POST (browsers send Origin)
            return True
        own = f"{request.url.scheme}://{request.url.netloc}"
        return origin == own

    # -- cookies ---------------------------------------------------------------------

    @staticmethod
    def set_cookie(request: Request, response: Response, name: str, value: str,
                   max_age: int | None = None) -> None:
        response.set_cookie(name, value, max_age=max_age, path=_cookie_path(request),
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")

    @staticmethod
    def clear_cookie(request: Request, response: Response, name: str) -> None:
        response.delete_cookie(name, path=_cookie_path(request), httponly=True,
                               samesite="strict", secure=request.url.scheme == "https")


def _cookie_path(request: Request) -> str:
    root = request.scope.get("root_path", "") or ""
    return root.rstrip("/") + "/" if root else "/"
