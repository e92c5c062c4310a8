"""``hubstore web``: serves the console on loopback, the token from the environment or
a file (never the command line), read-only without one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from hubstore.cli import main
from tests.console.browser import free_port

TOKEN = "cli-operator-token"


def _serve(db_url: URL, port: int, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hubstore", "web", "--url",
         db_url.render_as_string(hide_password=False), "--port", str(port), *args],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _get(url: str) -> httpx.Response:
    deadline = time.monotonic() + 20
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.slow
def test_hubstore_web_serves_the_console(db_url: URL, tmp_path: Path) -> None:
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = _serve(db_url, port, {}, "--token-file", str(token_file))
    try:
        page = _get(f"http://127.0.0.1:{port}/")
        assert page.status_code == 303 and page.headers["location"].endswith("/login")
        assert "Operator token" in _get(f"http://127.0.0.1:{port}/login").text
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 401
        assert "hubstore_assign_jobs" in httpx.get(f"http://127.0.0.1:{port}/metrics", headers={
            "Authorization": f"Bearer {TOKEN}"}).text
    finally:
        server.terminate()
        _, err = server.communicate(timeout=20)
    assert f"http://127.0.0.1:{port}/" in err and TOKEN not in err


@pytest.mark.slow
def test_without_a_token_hubstore_web_is_read_only(db_url: URL) -> None:
    port = free_port()
    server = _serve(db_url, port, {"HUBSTORE_WEB_TOKEN": ""})
    try:
        page = _get(f"http://127.0.0.1:{port}/")
        assert "read-only" in page.text and "Sign in" not in page.text
    finally:
        server.terminate()
        _, err = server.communicate(timeout=20)
    assert "read-only" in err


def test_a_missing_token_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["web", "--url", f"sqlite:///{tmp_path}/x.db",
                                       "--token-file", str(tmp_path / "none")])
    assert result.exit_code == 2 and "cannot read the token file" in result.output


def test_a_short_token_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["web", "--url", f"sqlite:///{tmp_path}/x.db"],
                                env={"HUBSTORE_WEB_TOKEN": "short"})
    assert result.exit_code == 2, result.output
    assert "at least 8" in result.output and "Traceback" not in result.output
    assert "short" not in result.output.replace("shortest", "")


def test_another_address_than_loopback_needs_a_token(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "192.0.2.7", "hub.example.com"):
        result = CliRunner().invoke(main, ["web", "--url", f"sqlite:///{tmp_path}/x.db",
                                           "--host", host], env={"HUBSTORE_WEB_TOKEN": ""})
        assert result.exit_code == 2, result.output
        assert "--allow-open-read" in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_hubstore_web_behind_a_proxy(db_url: URL, tmp_path: Path) -> None:
    """Bound to another address than loopback (127.0.0.2 here) with a token: a warning
    that the token travels in clear; --allowed-host, --root-path and a failed sign-in
    logged without -v. The proxy strips /hub: the console gets /login and links
    /hub/...."""
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = _serve(db_url, port, {}, "--token-file", str(token_file), "--host", "127.0.0.2",
                    "--allowed-host", "hub.example.com", "--root-path", "/hub",
                    "--forwarded-allow-ips", "127.0.0.1")
    base = f"http://127.0.0.2:{port}"
    try:
        login = _get(f"{base}/login")
        assert login.status_code == 200 and f'src="{base}/hub/static/' in login.text
        assert "Path=/hub/" in login.headers["set-cookie"]
        named = httpx.get(f"{base}/login", headers={"Host": "hub.example.com"})
        assert named.status_code == 200
        assert httpx.get(f"{base}/login", headers={"Host": "evil.example"}).status_code == 400
        assert httpx.get(f"{base}/metrics").status_code == 401
        assert httpx.get(f"{base}/metrics", headers={
            "Authorization": f"Bearer {TOKEN}"}).status_code == 200
        csrf = login.text.split('name="hubstore-csrf" content="', 1)[1].split('"', 1)[0]
        wrong = httpx.post(f"{base}/login", data={"csrf": csrf, "token": "not-it-at-all"},
                           headers={"Cookie": "; ".join(f"{k}={v}" for k, v
                                                        in login.cookies.items())})
        assert wrong.status_code == 403
    finally:
        server.terminate()
        _, err = server.communicate(timeout=20)
    assert "travel in clear" in err and "wrong token refused" in err
    assert TOKEN not in err and "not-it-at-all" not in err
