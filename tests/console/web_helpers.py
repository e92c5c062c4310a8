"""What the console's tests share: a signed-in client, the CSRF token of a page."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

TOKEN = "operator-token-for-tests"
_CSRF = re.compile(r'name="hubstore-csrf" content="([0-9a-f]+)"')
#: Stored text meant to break a page (from tests/faults/test_hostile_inputs.py's kinds, and the
#: usual HTML ones): each must show as text.
HOSTILE = ["<script>window.__pwned = 1</script>", "\"'><img src=x onerror=\"window.__pwned=2\">",
           "{{ 7*7 }}", "</textarea><b>bold</b>", "javascript:alert(1)", "é" * 600,
           "\U0001f600" * 25, "a\tb\nc", "%_\\", "<!--", "]]>"]


def csrf(client: TestClient, path: str = "/") -> str:
    """The CSRF token of the page at ``path`` (the client keeps the cookie)."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None, "the page has no CSRF field"
    return found.group(1)


def sign_in(client: TestClient, token: str = TOKEN, root: str = "") -> None:
    """Sign in on the console at ``root`` (its mount path)."""
    response = client.post(f"{root}/login", data={"csrf": csrf(client, f"{root}/login"),
                                                  "token": token}, follow_redirects=False)
    assert response.status_code == 303, response.text


def post(client: TestClient, path: str, data: dict[str, str], page: str = "/") -> int:
    """POST a form with the page's CSRF token; the status (redirects not followed)."""
    response = client.post(path, data={"csrf": csrf(client, page), **data},
                           follow_redirects=False)
    return int(response.status_code)
