"""Who may read and act, and proof that an action came from the console's own page.

- Without an operator token or an authentication hook the console is read-only and
  open to whoever reaches it (``hubstore web`` keeps it on loopback then).
- With a token, every page, stream and ``/metrics`` needs a session (``/metrics`` also
  takes ``Authorization: Bearer <token>``). An operator signs in by posting the token
  (never in a URL) and gets a session cookie: a random value whose HMAC (under a key
  derived from the token) the database keeps with its end (:mod:`hubstore.web.sessions`),
  so that signing out ends it in every console process, and it ends on the server after
  :data:`SESSION_MAX_AGE_S`.
  Failed sign-ins are logged (never what was typed) and slowed per client
  (:class:`SignInThrottle`).
- With a hook (``auth(request) -> bool``, sync or async) the application decides per
  request, for reading as for acting.
- Every POST carries a CSRF token: the HMAC of a per-browser nonce (the ``csrf`` cookie,
  HttpOnly, SameSite=Strict) under the console's key, and the ``Origin`` header, when the
  browser sends one, must be the console's own (its scheme as a trusted proxy forwards
  it). The key is derived from the token, or with a hook kept in the database
  (``console_keys``): a page rendered before a restart still submits.
- Cookies are HttpOnly and SameSite=Strict, Secure over https, scoped to the console's
  path. No token or cookie value is ever logged or rendered.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from hubstore.aio import AsyncHubStore
from hubstore.web import sessions

__all__ = ["AuthHook", "Security"]

log = logging.getLogger("hubstore.web")

#: The application's authentication hook: may this request read and act?
AuthHook = Callable[[Request], bool | Awaitable[bool]]

SESSION_COOKIE = "hubstore_console"
CSRF_COOKIE = "hubstore_csrf"
CSRF_FIELD = "csrf"
SESSION_MAX_AGE_S = 12 * 3600
#: The database's name of the CSRF key of a console with a hook (no token to derive it).
CSRF_KEY_NAME = "csrf"
#: Where a request's scope keeps whether its sender is identified (asked once).
VERDICT = "hubstore.console.identified"


def _mac(key: bytes, value: str) -> str:
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


@dataclass
class SignInThrottle:
    """Failed sign-ins per client: after :attr:`free` failures a client waits, twice as
    long after each further one (up to :attr:`max_wait_s`), and a sign-in it sends while
    it waits is refused unread. A success forgets the client. At most :attr:`clients`
    are remembered (the oldest forgotten first)."""

    free: int = 5
    first_wait_s: float = 1.0
    max_wait_s: float = 300.0
    clients: int = 10_000
    _failures: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)

    def wait_s(self, client: str) -> float:
        """How long ``client`` must still wait before its next sign-in (0: none)."""
        count, last = self._failures.get(client, (0, 0.0))
        if count < self.free:
            return 0.0
        wait = min(self.first_wait_s * 2.0 ** (count - self.free), self.max_wait_s)
        return max(0.0, last + wait - time.monotonic())

    def failed(self, client: str) -> int:
        """Count a failure of ``client``; its failures so far."""
        count = self._failures.pop(client, (0, 0.0))[0] + 1
        self._failures[client] = (count, time.monotonic())
        while len(self._failures) > self.clients:
            self._failures.popitem(last=False)
        return count

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)


@dataclass
class Security:
    """The console's rules for reading and acting (see the module's docstring)."""

    token: str | None
    auth: AuthHook | None
    read_only: bool
    store: AsyncHubStore
    throttle: SignInThrottle = field(default_factory=SignInThrottle)

    def __post_init__(self) -> None:
        self._session_key = None if self.token is None else hmac.new(
            self.token.encode(), b"hubstore console session", hashlib.sha256).digest()
        self._csrf_key: bytes | None = (
            secrets.token_bytes(32) if not self.guarded else None if self.token is None
            else hmac.new(self.token.encode(), b"hubstore console csrf",
                          hashlib.sha256).digest())

    @property
    def guarded(self) -> bool:
        """True when reading needs a session (or the hook's yes) too."""
        return self.token is not None or self.auth is not None

    @property
    def uses_login(self) -> bool:
        """True when operators sign in with the token (no hook decides)."""
        return self.token is not None and self.auth is None

    # -- who is asking ---------------------------------------------------------------

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode("utf-8", "surrogatepass"), self.token.encode())

    def bearer_matches(self, request: Request) -> bool:
        """True when the request carries ``Authorization: Bearer <the token>``."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given.strip())

    async def identified(self, request: Request) -> bool:
        """True when the hook says yes, or the request has an open session (asked once
        per request)."""
        cached = request.scope.get(VERDICT)
        if cached is not None:
            return bool(cached)
        if self.auth is not None:
            verdict = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            found = bool(verdict)
        elif self.token is not None:
            value = request.cookies.get(SESSION_COOKIE, "")
            found = 0 < len(value) <= 128 and await self.store.run_sync(
                lambda store: sessions.session_open(store, self._digest(value)))
        else:
            found = False
        request.scope[VERDICT] = found
        return found

    async def may_read(self, request: Request) -> bool:
        """True when this request's sender may see the hub."""
        return not self.guarded or await self.identified(request)

    async def may_act(self, request: Request) -> bool:
        """True when this request's sender may change the hub."""
        return not self.read_only and await self.identified(request)

    # -- the operator's session ------------------------------------------------------

    def _digest(self, value: str) -> str:
        """What the database keeps of a session's cookie value: its HMAC under the
        token's session key (a session of another token is none here)."""
        assert self._session_key is not None
        return _mac(self._session_key, value)

    async def open_session(self) -> str:
        """A new session's cookie value (the database keeps its digest only)."""
        value = secrets.token_urlsafe(32)
        digest = self._digest(value)
        await self.store.run_sync(
            lambda store: sessions.add_session(store, digest, SESSION_MAX_AGE_S * 1000))
        return value

    async def close_session(self, request: Request) -> None:
        """End the request's session (if it has one), in every console process."""
        value = request.cookies.get(SESSION_COOKIE, "")
        if value and self._session_key is not None:
            digest = self._digest(value)
            await self.store.run_sync(lambda store: sessions.close_session(store, digest))
        request.scope[VERDICT] = False

    # -- CSRF ------------------------------------------------------------------------

    async def _key(self) -> bytes:
        if self._csrf_key is None:
            self._csrf_key = await self.store.run_sync(
                lambda store: sessions.signing_key(store, CSRF_KEY_NAME))
        return self._csrf_key

    def csrf_nonce(self, request: Request) -> tuple[str, bool]:
        """The browser's CSRF nonce, and whether it is new (then set the cookie)."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if 16 <= len(nonce) <= 64 and nonce.replace("-", "").replace("_", "").isalnum():
            return nonce, False
        return secrets.token_urlsafe(24), True

    async def csrf_token(self, nonce: str) -> str:
        return _mac(await self._key(), nonce)

    async def csrf_valid(self, request: Request, given: str) -> bool:
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if not nonce or not given:
            return False
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                   (await self.csrf_token(nonce)).encode()):
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


def client_of(request: Request) -> str:
    """The client's address as the server sees it (a trusted proxy's forwarded one)."""
    return request.client.host if request.client is not None else "unknown"


def _cookie_path(request: Request) -> str:
    root = request.scope.get("root_path", "") or ""
    return root.rstrip("/") + "/" if root else "/"
