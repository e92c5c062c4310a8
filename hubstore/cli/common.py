"""What every command shares: the top group, ``--url``, durations, and one-line errors."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn

import click
from alembic.util import CommandError
from rich.console import Console
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from hubstore.engine import ENV_URL, default_url, resolve_url
from hubstore.errors import HubStoreError

CONTEXT = {"help_option_names": ["-h", "--help"]}
URL_HELP = f"SQLAlchemy URL of the hub database [default: ${ENV_URL}, else {default_url()}]"
_DURATION = re.compile(r"^\s*(\d+)\s*([dhms])\s*$")
_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000}


class UsageFailure(click.ClickException):
    """A failure that is the caller's to fix (exit status 2)."""

    exit_code = 2


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="hubstore")
def main() -> None:
    """hubstore: the triflux hub store on SQLite and PostgreSQL."""


def _resolve(_ctx: click.Context, _param: click.Parameter, value: str | None) -> URL:
    try:
        url = resolve_url(value or None)
    except (HubStoreError, ArgumentError) as exc:  # an unsupported or malformed URL
        raise click.BadParameter(str(exc) + _hint(value)) from exc
    return url


def _hint(value: str | None) -> str:
    """For a bare path (no scheme): the URL that was probably meant."""
    if value and "://" not in value and ":" not in value.split("/")[0]:
        return f" (did you mean sqlite:///{value}?)"
    return ""


url_option = click.option("--url", envvar=ENV_URL, default=None, metavar="URL",
                          callback=_resolve, help=URL_HELP)
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document instead of a table.")


class Duration(click.ParamType):  # type: ignore[type-arg]
    """``30d``, ``12h``, ``15m`` or ``45s``, as milliseconds."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = _DURATION.match(str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration: write it as 30d, 12h, 15m or 45s",
                      param, ctx)
        return int(match.group(1)) * _UNIT_MS[match.group(2)]


def shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


@contextmanager
def reported(action: str, url: URL) -> Iterator[None]:
    """Turn any failure inside into one line on stderr (``Error: ACTION of URL failed:
    reason``) and exit status 1: never a traceback."""
    try:
        yield
    except click.ClickException:
        raise
    except BrokenPipeError:  # `hubstore ... | head`: the reader has all it wanted
        closed_stdout()
    except (HubStoreError, CommandError, OSError) as exc:
        fail(action, url, str(exc))
    except DBAPIError as exc:  # the driver's own message, without SQLAlchemy's trailer
        fail(action, url, str(exc.orig).strip())
    except SQLAlchemyError as exc:
        fail(action, url, str(exc).split("\n(Background")[0])
    except Exception as exc:  # anything else still gets a message, not a traceback
        fail(action, url, f"{type(exc).__name__}: {exc}")


def closed_stdout() -> NoReturn:
    """Exit quietly (status 141, as a shell's SIGPIPE) when stdout's reader went away."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
    sys.exit(141)


def fail(action: str, url: URL, reason: str) -> NoReturn:
    raise click.ClickException(f"{action} of {shown(url)} failed: {reason}")


def err() -> Console:
    """The console for progress (stderr)."""
    return Console(stderr=True)


@contextmanager
def writing() -> Iterator[None]:
    """Printing to stdout: a reader that went away (``| head``) ends the command quietly."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        closed_stdout()


def print_json(document: Any) -> None:
    with writing():
        click.echo(json.dumps(document, ensure_ascii=False, allow_nan=False))


def when(ms: int | None) -> str:
    """A millisecond timestamp for people (UTC)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def exit_with(code: int) -> NoReturn:
    sys.exit(code)
