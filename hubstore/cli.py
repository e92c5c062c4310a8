"""The command line: ``hubstore db upgrade|downgrade|current|history``."""

from __future__ import annotations

import sys

import click
from alembic.script import ScriptDirectory

from hubstore import migrations
from hubstore.engine import ENV_URL, default_url, resolve_url
from hubstore.errors import HubStoreError

URL_HELP = f"SQLAlchemy URL of the hub database [default: ${ENV_URL}, else {default_url()}]"
url_option = click.option("--url", envvar=ENV_URL, default=None, help=URL_HELP)


def _shown(url: str | None) -> str:
    return resolve_url(url).render_as_string(hide_password=True)


@click.group()
@click.version_option(package_name="hubstore")
def main() -> None:
    """hubstore: the triflux hub store on SQLite and PostgreSQL."""


@main.group()
def db() -> None:
    """Migrate the hub database (Alembic, with adoption of triflux databases)."""


def _run(action: str, url: str | None, fn: object, *args: str) -> None:
    try:
        fn(url, *args)  # type: ignore[operator]
    except HubStoreError as exc:
        raise click.ClickException(f"{action} failed: {exc}") from exc
    except Exception as exc:  # alembic and driver errors: say what and where, exit 1
        raise click.ClickException(
            f"{action} of {_shown(url)} failed: {type(exc).__name__}: {exc}") from exc


@db.command()
@click.argument("revision", default="head")
@url_option
def upgrade(revision: str, url: str | None) -> None:
    """Migrate up to REVISION (default: head), adopting a triflux database first."""
    _run("upgrade", url, migrations.upgrade, revision)
    click.echo(f"{_shown(url)} is at revision {migrations.current(url)}")


@db.command()
@click.argument("revision")
@url_option
def downgrade(revision: str, url: str | None) -> None:
    """Migrate down to REVISION ("base" removes every hub table)."""
    _run("downgrade", url, migrations.downgrade, revision)
    click.echo(f"{_shown(url)} is at revision {migrations.current(url) or 'base'}")


@db.command()
@url_option
def current(url: str | None) -> None:
    """Print the database's revision ("none" when it has no hubstore schema)."""
    try:
        revision = migrations.current(url)
    except Exception as exc:
        raise click.ClickException(f"cannot read {_shown(url)}: {exc}") from exc
    head = migrations.head()
    state = "(head)" if revision == head else f"(head is {head})"
    click.echo(f"{revision or 'none'} {state}")


@db.command()
def history() -> None:
    """List the revisions, oldest first."""
    script = ScriptDirectory.from_config(migrations.alembic_config())
    for rev in reversed(list(script.walk_revisions())):
        click.echo(f"{rev.revision}  {rev.doc.splitlines()[0] if rev.doc else ''}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
