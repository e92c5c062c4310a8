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
        assert page.status_code == 200 and "Sign in to act" in page.text
        assert "hubstore_assign_jobs" in _get(f"http://127.0.0.1:{port}/metrics").text
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
