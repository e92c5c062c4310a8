"""What every command shares: the top group, ``--url`` and ``-v`` (before or after the
command), durations, and one-line errors."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn

import click
from alembic.util import CommandError
from rich.console import Console
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from hubstore.engine import ENV_URL, default_url, resolve_url
from hubstore.errors import HubStoreError, ValidationError
from hubstore.validation import require_cron

CONTEXT = {"help_option_names": ["-h", "--help"]}
URL_HELP = (f"SQLAlchemy URL of the hub database [default: --url before the command, else "
            f"${ENV_URL}, else {default_url()}]")
GROUP_URL_HELP = (f"SQLAlchemy URL of the hub database, for every command below (a --url "
                  f"after the command wins) [default: ${ENV_URL}, else {default_url()}]")
VERBOSE_HELP = ("Log what hubstore does on stderr: -v the steps (INFO), -vv also every SQL "
                "statement (DEBUG). Before or after the command; the counts add up.")
_DURATION = re.compile(r"^\s*(\d+)\s*([dhms])\s*$")
_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000}
#: ctx.meta keys (ctx.meta is shared by a command's context and its groups' contexts).
_URL_KEY = "hubstore.url"
_VERBOSE_KEY = "hubstore.verbosity"

log = logging.getLogger("hubstore.cli")


class UsageFailure(click.ClickException):
    """A failure that is the caller's to fix (exit status 2)."""

    exit_code = 2


class HubGroup(click.Group):
    """A group whose "no such option" names the command an option belongs to: ``hubstore
    --json stats`` is answered with ``hubstore stats --json``. Its subgroups are HubGroups."""

    group_class = type

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            hint = self._placement_hint(ctx, exc.option_name, args)
            if not hint:
                raise
            raise click.UsageError(f"{exc.message} {hint}", ctx) from None

    def _placement_hint(self, ctx: click.Context, option: str, args: list[str]) -> str:
        """Where ``option`` belongs, when a command named later in ``args`` takes it."""
        group: click.Command = self
        path = [ctx.command_path]
        for arg in args:
            sub = getattr(group, "commands", {}).get(arg)
            if sub is None:
                continue
            group = sub
            path.append(arg)
            if any(option in p.opts or option in p.secondary_opts
                   for p in sub.params if isinstance(p, click.Option)):
                where = " ".join(path)
                return (f"{option} is an option of `{where}`: write it after the command "
                        f"({where} {option} ...).")
        return ""


def _group_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """A group's --url: kept for the command below, which uses it unless it has its own."""
    if value is not None:
        ctx.meta[_URL_KEY] = _resolve(value)


def _command_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> URL:
    """A command's --url, else a group's, else $HUBSTORE_URL, else the embedded default."""
    if value is not None:
        return _resolve(value)
    given: URL | None = ctx.meta.get(_URL_KEY)
    if given is not None:
        return given
    return _resolve(None)


def given_url(ctx: click.Context) -> URL:
    """The URL a group was given (--url, before or on it), else $HUBSTORE_URL, else the
    embedded default: for a group that runs as a command of its own."""
    return _command_url(ctx, click.Option(["--url"]), None)


def _resolve(value: str | None) -> URL:
    try:
        return resolve_url(value or None)
    except (HubStoreError, ArgumentError) as exc:  # an unsupported or malformed URL
        origin = f"${ENV_URL}: " if value is None and os.environ.get(ENV_URL) else ""
        raise click.BadParameter(origin + str(exc) + _hint(value)) from exc


def _hint(value: str | None) -> str:
    """For a bare path (no scheme): the URL that was probably meant."""
    if value and "://" not in value and ":" not in value.split("/")[0]:
        return f" (did you mean sqlite:///{value}?)"
    return ""


def _verbosity(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    """-v counted wherever it is written (before or after the command), then applied."""
    if value:
        ctx.meta[_VERBOSE_KEY] = ctx.meta.get(_VERBOSE_KEY, 0) + value
        configure_logging(ctx.meta[_VERBOSE_KEY])


_LOG_HANDLER = logging.StreamHandler()
_LOG_HANDLER.setFormatter(logging.Formatter(
    "%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))


def configure_logging(verbosity: int) -> None:
    """-v: hubstore's and Alembic's steps at INFO on stderr; -vv: hubstore at DEBUG and
    SQLAlchemy's statements. Without -v nothing is configured (the library stays quiet)."""
    _LOG_HANDLER.setStream(sys.stderr)
    levels = {"hubstore": logging.INFO, "alembic": logging.INFO}
    if verbosity >= 2:
        levels |= {"hubstore": logging.DEBUG, "sqlalchemy.engine": logging.INFO}
    for name, level in levels.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if _LOG_HANDLER not in logger.handlers:
            logger.addHandler(_LOG_HANDLER)


def show_warnings(name: str) -> None:
    """The warnings of the logger ``name`` on stderr without -v too (a server's refusals,
    which its operator must see), unless -v configured logging already."""
    logger = logging.getLogger(name)
    if _LOG_HANDLER not in logger.handlers and _LOG_HANDLER not in logging.getLogger(
            "hubstore").handlers:
        _LOG_HANDLER.setStream(sys.stderr)
        logger.addHandler(_LOG_HANDLER)
        logger.setLevel(min(logger.getEffectiveLevel(), logging.WARNING))


def _verbose() -> Callable[[Any], Any]:
    return click.option("-v", "--verbose", count=True, expose_value=False, callback=_verbosity,
                        help=VERBOSE_HELP)


def group_options(function: Any) -> Any:
    """--url and -v on a group: they apply to the command named after them."""
    function = click.option("--url", default=None, metavar="URL", expose_value=False,
                            callback=_group_url, help=GROUP_URL_HELP)(function)
    return _verbose()(function)


@click.group(cls=HubGroup, context_settings=CONTEXT)
@click.version_option(package_name="hubstore")
@group_options
def main() -> None:
    """hubstore: the triflux hub store on SQLite and PostgreSQL.

    --url and -v may be written before the command (hubstore --url URL stats) or after
    it (hubstore stats --url URL).
    """


def command_options(function: Any) -> Any:
    """A command's --url (see :func:`_command_url`) and -v."""
    function = click.option("--url", default=None, metavar="URL", callback=_command_url,
                            help=URL_HELP)(function)
    return _verbose()(function)


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


class Seconds(Duration):
    """A duration in seconds, above 0: ``5m``, ``45s``, ``12h`` as elsewhere, or a bare
    number of seconds (``0.5``)."""

    name = "SECONDS"

    def convert(self, value: Any, param: click.Parameter | None,  # type: ignore[override]
                ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = super().convert(value, param, ctx) / 1000
        if not 0 < seconds < float("inf"):
            self.fail(f"{value!r} is not a duration above 0: write it as 5m, 45s or a "
                      "number of seconds", param, ctx)
        return seconds


class Cron(click.ParamType):  # type: ignore[type-arg]
    """A cron expression of five fields (the store's check: a bad one exits 2)."""

    name = "CRON"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        try:
            return require_cron(value, "the cron expression")
        except ValidationError as exc:
            self.fail(str(exc), param, ctx)


def shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


@contextmanager
def reported(action: str, url: URL) -> Iterator[None]:
    """Turn any failure inside into one line on stderr (``Error: ACTION of URL failed:
    reason``) and exit status 1: never a traceback. -v logs the action and its time."""
    log.info("%s (%s)", action, shown(url))
    started = time.perf_counter()
    try:
        yield
        log.info("%s: done in %.1f ms", action, (time.perf_counter() - started) * 1000)
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
