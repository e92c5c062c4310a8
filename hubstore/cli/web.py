"""``hubstore web``: serve the console (``hubstore[web]``) with uvicorn.

The operator token is read from ``$HUBSTORE_WEB_TOKEN`` or from ``--token-file``, never
from the command line (where ``ps`` would show it). Without one the console is
read-only and open to whoever reaches it, so it stays on loopback unless
``--allow-open-read`` says otherwise. The ``Host`` header must name the console (the
bound host, loopback names, ``--allowed-host``); behind a reverse proxy,
``--forwarded-allow-ips`` trusts its forwarded scheme and client address and
``--root-path`` is the path it serves the console under.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from sqlalchemy.engine import URL

from hubstore import health
from hubstore.cli.common import UsageFailure, command_options, main, reported, show_warnings
from hubstore.store import HubStore

if TYPE_CHECKING:
    from hubstore.web.stream import Pulse

TOKEN_VARIABLE = "HUBSTORE_WEB_TOKEN"
DEFAULT_PORT = 8420
#: Addresses that keep the console on this machine.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: Addresses that listen on every interface (the machine's names are then allowed too).
EVERY_INTERFACE = frozenset({"0.0.0.0", "::", ""})
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
@click.option("--allow-open-read", is_flag=True,
              help="Serve a console without a token on another address than loopback "
                   "(anyone who reaches it reads the hub).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Another name the Host header may give (the proxy's or DNS name); "
                   "repeat for more. The bound host and loopback names always are.")
@click.option("--forwarded-allow-ips", default=None, metavar="IPS",
              help="Proxies (comma-separated addresses, or *) whose X-Forwarded-Proto and "
                   "X-Forwarded-For are trusted [default: $FORWARDED_ALLOW_IPS or "
                   "127.0.0.1].")
@click.option("--root-path", default="", metavar="PATH",
              help="The path a reverse proxy serves the console under (/hub).")
@command_options
def web(host: str, port: int, token_file: Path | None, read_only: bool,
        allow_open_read: bool, allowed_hosts: tuple[str, ...],
        forwarded_allow_ips: str | None, root_path: str, url: URL) -> None:
    """Serve the console: the hub's pages, live updates and /metrics.

    Needs the web extra: pip install "hubstore[web]".
    """
    try:
        import uvicorn

        from hubstore.web import create_app
        from hubstore.web.app import MIN_TOKEN_LENGTH
    except ImportError as exc:
        raise click.ClickException(str(exc) if "hubstore[web]" in str(exc) else
                                   f'hubstore web needs the web extra: '
                                   f'pip install "hubstore[web]" ({exc})') from None
    token = _token(token_file)
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise UsageFailure(f"the operator token is {len(token)} characters long; it must "
                           f"have at least {MIN_TOKEN_LENGTH} (a long random one: "
                           "python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise UsageFailure(f"--root-path {root_path!r} must start with / and not end "
                           "with one (/hub)")
    exposed = host not in LOOPBACK
    if exposed and token is None and not allow_open_read:
        raise UsageFailure(f"--host {host} exposes the console, and without an operator "
                           f"token anyone who reaches it reads the hub: set "
                           f"${TOKEN_VARIABLE} or --token-file, or say --allow-open-read")
    if exposed and token is not None:
        click.echo("warning: the operator token and the session cookie travel in clear "
                   "over http: serve the console behind a TLS proxy (see docs/console.md)",
                   err=True)
    show_warnings("hubstore.web")
    with reported("opening the hub", url):
        health.require_file(url)
        store = HubStore.open(url)
    try:
        app = create_app(store, token=token, read_only=True if read_only else None,
                         allowed_hosts=_hosts(host, allowed_hosts))
        where = f"http://{host}:{port}{root_path}/"
        mode = ("read-only, open to all" if token is None else "read-only, signed in"
                if read_only else "operators sign in with the token")
        click.echo(f"hubstore console on {where} ({mode}); Ctrl-C stops it", err=True)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                server_header=False, timeout_graceful_shutdown=STOP_S,
                                proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips,
                                root_path=root_path)
        _server_class()(config, app.state.console.pulse).run()
    finally:
        store.close()


def _hosts(host: str, allowed: tuple[str, ...]) -> list[str]:
    """The names the Host header may give: the bound host (on every interface, the
    machine's names), and ``--allowed-host``'s (loopback names are always allowed)."""
    own = [socket.gethostname(), socket.getfqdn()] if host in EVERY_INTERFACE else [host]
    return [*own, *allowed]

