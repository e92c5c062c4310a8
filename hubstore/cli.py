"""The command line: ``hubstore db upgrade|downgrade|current|history``.

Every command takes ``--url`` (default: $HUBSTORE_URL, else the embedded default). A
failure prints one line saying what failed and why, and exits with status 1; a bad
argument or URL exits with status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click
from alembic.util import CommandError
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError

from hubstore import migrations
from hubstore.engine import ENV_URL, default_url, resolve_url
from hubstore.errors import HubStoreError

T = TypeVar("T")
URL_HELP = f"SQLAlchemy URL of the hub database [default: ${ENV_URL}, else {default_url()}]"


def _resolve(_ctx: click.Context, _param: click.Parameter, value: str | None) -> URL:
    try:
        return resolve_url(value or None)
    except (HubStoreError, ArgumentError) as exc:  # an unsupported or malformed URL
        raise click.BadParameter(str(exc)) from exc


url_option = click.option("--url", envvar=ENV_URL, default=None, metavar="URL",
                          callback=_resolve, help=URL_HELP)


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _run(action: str, url: URL, fn: Callable[..., T], *args: str) -> T:
    """Call ``fn(url, *args)``; turn a failure into one clear line and exit status 1."""
    try:
        return fn(url, *args)
    except (HubStoreError, CommandError, OSError) as exc:
        reason = str(exc)
    except DBAPIError as exc:  # the driver's own message, without SQLAlchemy's trailer
        reason = str(exc.orig).strip()
    except Exception as exc:  # anything else still gets a message, not a traceback
        reason = f"{type(exc).__name__}: {exc}"
    raise click.ClickException(f"{action} of {_shown(url)} failed: {reason}")


def _revision(url: URL) -> str:
    return _run("reading the revision", url, migrations.current) or "base"


@click.group()
@click.version_option(package_name="hubstore")
def main() -> None:
    """hubstore: the triflux hub store on SQLite and PostgreSQL."""


@main.group()
def db() -> None:
    """Migrate the hub database (Alembic, with adoption of triflux databases)."""


@db.command()
@click.argument("revision", default="head")
@url_option
def upgrade(revision: str, url: URL) -> None:
    """Migrate up to REVISION (default: head), adopting a triflux database first."""
    _migrate("upgrade", migrations.upgrade, url, revision)


@db.command()
@click.argument("revision")
@url_option
def downgrade(revision: str, url: URL) -> None:
    """Migrate down to REVISION ("base" removes every hub table)."""
    _migrate("downgrade", migrations.downgrade, url, revision)


def _migrate(action: str, step: Callable[..., None], url: URL, revision: str) -> None:
    """Run one migration command and say where it left the database."""
    before = _revision(url)
    _run(action, url, step, revision)
    click.echo(f"{_shown(url)}: {action}d from {before} to {_revision(url)}")


@db.command()
@url_option
def current(url: URL) -> None:
    """Print the database's revision ("base" when it has none)."""
    revision, head = _revision(url), migrations.head()
    click.echo(f"{revision} {'(head)' if revision == head else f'(head is {head})'}")


@db.command()
@url_option
def history(url: URL) -> None:
    """List the revisions, oldest first, marking the database's own."""
    at = _revision(url)
    script = migrations.script_directory()
    for rev in reversed(list(script.walk_revisions())):
        title = rev.doc.splitlines()[0] if rev.doc else ""
        marks = [m for m, on in (("head", rev.is_head), ("current", rev.revision == at)) if on]
        click.echo(" ".join([f"{rev.revision}  {title}", *(f"({m})" for m in marks)]))
    if at == "base":
        click.echo(f"({_shown(url)} has no revision yet)")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
