"""``hubstore web`` stops promptly on SIGTERM and Ctrl-C while pages hold streams open
(issue 38, point 10): the streams end on shutdown, with no traceback."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest
from sqlalchemy.engine import URL

from tests.console.browser import free_port
from tests.console.test_web_cli import _get, _serve

STOPPED_WITHIN_S = 5.0


def _hold(url: str, opened: threading.Event, lines: list[str]) -> None:
    """Read the stream at ``url`` until the server ends it."""
    try:
        with httpx.stream("GET", url, timeout=httpx.Timeout(5, read=60)) as response:
            for line in response.iter_lines():
                lines.append(line)
                opened.set()
    except httpx.HTTPError:
        pass
    opened.set()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_hubstore_web_stops_while_streams_are_open(db_url: URL, sig: int) -> None:
    port = free_port()
    server = _serve(db_url, port, {"HUBSTORE_WEB_TOKEN": ""})
    base = f"http://127.0.0.1:{port}"
    try:
        assert _get(f"{base}/").status_code == 200
        readers = []
        for path in ("/events", "/events", "/events/messages?agent=w1"):
            opened, lines = threading.Event(), list[str]()
            reader = threading.Thread(target=_hold, args=(base + path, opened, lines),
                                      daemon=True)
            reader.start()
            assert opened.wait(10), path
            readers.append((reader, lines))
        assert any("event: hub" in line for line in readers[0][1])
        asked = time.monotonic()
        server.send_signal(sig)
        _, err = server.communicate(timeout=30)
        took = time.monotonic() - asked
    finally:
        server.kill()
    assert took < STOPPED_WITHIN_S, (took, err)
    assert "Traceback" not in err and "CancelledError" not in err, err
    for reader, _ in readers:
        reader.join(5)
        assert not reader.is_alive()  # its stream was ended
