"""``hubstore web``: serve the console (``hubstore[web]``) with uvicorn.

The operator token is read from ``$HUBSTORE_WEB_TOKEN`` or from ``--token-file``, never
from the command line (where ``ps`` would show it). Without one the console is
read-only.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from sqlalchemy.engine import URL

from hubstore import health
from hubstore.cli.common import UsageFailure, command_options, main, reported
from hubstore.store import HubStore

if TYPE_CHECKING:
    from hubstore.web.stream import Pulse

TOKEN_VARIABLE = "HUBSTORE_WEB_TOKEN"
DEFAULT_PORT = 8420
#: How long a stop waits for requests still running (streams end at once).
STOP_S = 3


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, whose Ctrl-C and SIGTERM also end the console's streams
        (uvicorn waits for open responses, and a stream never ends by itself)."""

        def __init__(self, config: uvicorn.Config, pulse: Pulse) -> None:
            super().__init__(config)
            self.pulse = pulse

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            self.pulse.stop_threadsafe()
            super().handle_exit(sig, frame)

    return Server


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageFailure(f"cannot read the token file {token_file}: "
                               f"{exc.strerror}") from None
        if not token:
            raise UsageFailure(f"the token file {token_file} is empty")
        return token
    return os.environ.get(TOKEN_VARIABLE) or None


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (another than loopback exposes the console).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"File holding the operator token [default: ${TOKEN_VARIABLE}]; "
                   "without a token the console is read-only.")
@click.option("--read-only", is_flag=True, help="Read-only even with a token.")
@command_options
def web(host: str, port: int, token_file: Path | None, read_only: bool, url: URL) -> None:
    """Serve the console: the hub's pages, live updates and /metrics.

    Needs the web extra: pip install "hubstore[web]".
    """
    try:
        import uvicorn

        from hubstore.web import create_app
    except ImportError as exc:
        raise click.ClickException(str(exc) if "hubstore[web]" in str(exc) else
                                   f'hubstore web needs the web extra: '
                                   f'pip install "hubstore[web]" ({exc})') from None
    token = _token(token_file)
    with reported("opening the hub", url):
        health.require_file(url)
        store = HubStore.open(url)
    try:
        app = create_app(store, token=token, read_only=True if read_only else None)
        where = f"http://{host}:{port}/"
        mode = "read-only" if read_only or token is None else "operators sign in with the token"
        click.echo(f"hubstore console on {where} ({mode}); Ctrl-C stops it", err=True)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                server_header=False, timeout_graceful_shutdown=STOP_S)
        _server_class()(config, app.state.console.pulse).run()
    finally:
        store.close()
