"""``hubstore db ...``: migrations, check, backup and prune."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from pathlib import Path

import alembic.command
import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.engine import URL

from hubstore import health, migrations
from hubstore.cli.common import (
    Duration,
    Seconds,
    UsageFailure,
    command_options,
    err,
    exit_with,
    group_options,
    json_option,
    main,
    print_json,
    reported,
    shown,
    writing,
)
from hubstore.engine import sqlite_path
from hubstore.maintenance import run_maintenance, sweep_once
from hubstore.store import HubStore
from hubstore.urls import folder_refusal

#: The reference's schema version for each revision that adopts one.
ADOPTED_SCHEMA = {rev: version for version, rev in migrations.LEGACY_REVISIONS.items()}


@main.group()
@group_options
def db() -> None:
    """Migrate, check, back up and prune the hub database."""


def _revision(url: URL) -> str:
    with reported("reading the revision", url):
        return migrations.current(url) or "base"


def _existing(url: URL) -> None:
    """A read-only command's database must exist (nothing is created)."""
    with reported("opening", url):
        health.require_file(url)


def _existing_revision(url: URL) -> str:
    """An existing database's revision ("base": none); a missing SQLite file is an error."""
    _existing(url)
    return _revision(url)


@db.command()
@click.argument("revision", default="head")
@click.option("--sql", is_flag=True,
              help="Print the SQL instead of running it (no database is opened).")
@command_options
def upgrade(revision: str, sql: bool, url: URL) -> None:
    """Migrate up to REVISION (default: head), adopting a triflux database first."""
    if sql:
        with reported("writing the SQL of the upgrade", url):
            alembic.command.upgrade(migrations.alembic_config(url), revision, sql=True)
        return
    _make_folders(url)
    with reported("upgrade", url):  # what it found under the migration lock
        report = migrations.upgrade_and_report(url, revision)
    before, adopted, after = (report.before or "base", report.adopted, report.after or "base")
    if adopted is not None:
        click.echo(f"{shown(url)}: adopted triflux schema {ADOPTED_SCHEMA[adopted]} as "
                   f"{adopted}, upgraded to {after}")
    elif after == before:
        at = f"head {after}" if after == migrations.head() else after
        click.echo(f"{shown(url)}: already at {at}, nothing to do")
    else:
        click.echo(f"{shown(url)}: upgraded from {before} to {after}")


def _make_folders(url: URL) -> None:
    """Create a new SQLite file's missing folders, under an existing, writable one only
    (:func:`hubstore.urls.folder_refusal`, the rule migrations.upgrade follows too)."""
    path = sqlite_path(url)
    if path is None or path.parent.exists():
        return
    refusal = folder_refusal(path)
    if refusal is not None:
        raise click.ClickException(f"upgrade of {shown(url)} failed: {refusal}")
    ancestor = next(p for p in path.absolute().parents if p.exists())
    path.parent.mkdir(mode=0o700, parents=True)
    click.echo(f"created the folder {path.parent} (in {ancestor})", err=True)


@db.command()
@click.argument("revision")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before removing every hub table.")
@command_options
def downgrade(revision: str, yes: bool, url: URL) -> None:
    """Migrate down to REVISION ("base" removes every hub table and its rows)."""
    before = _existing_revision(url)
    if revision == "base" and before != "base" and not yes and not click.confirm(
            f"Downgrading {shown(url)} to base removes every hub table and all their rows. "
            "Continue?", err=True):
        raise click.ClickException(f"downgrade of {shown(url)} cancelled: nothing was "
                                   f"changed (still at {before})")
    with reported("downgrade", url):
        migrations.downgrade(url, revision)
    after = _revision(url)
    if after == before:
        click.echo(f"{shown(url)}: already at {after}, nothing to do")
    else:
        click.echo(f"{shown(url)}: downgraded from {before} to {after}")


@db.command()
@click.argument("revision")
@command_options
def stamp(revision: str, url: URL) -> None:
    """Record REVISION as the database's revision without migrating anything."""
    before = _existing_revision(url)
    with reported("stamp", url):
        alembic.command.stamp(migrations.alembic_config(url), revision)
    after = _revision(url)
    if after == before:
        click.echo(f"{shown(url)}: already stamped {after}, nothing to do")
    else:
        click.echo(f"{shown(url)}: stamped {after} (was {before}); no migration ran")


def _heads() -> tuple[str, ...]:
    return tuple(migrations.script_directory().get_heads())


def _marks(revision: str, at: str | None) -> str:
    marks = [m for m, on in (("head", revision in _heads()), ("current", revision == at)) if on]
    return "".join(f" ({m})" for m in marks)


def _or_none(revision: str) -> str | None:
    """A revision for JSON: null for "base" (no revision), as migrations.current says."""
    return None if revision == "base" else revision


@db.command()
@json_option
@command_options
def current(as_json: bool, url: URL) -> None:
    """Print the database's revision ("base" when it has none).

    --json: {"url", "revision" (null when none), "head", "at_head"}.
    """
    revision, head = _existing_revision(url), migrations.head()
    if as_json:
        print_json({"url": shown(url), "revision": _or_none(revision), "head": head,
                    "at_head": revision == head})
        return
    click.echo(f"{revision} {'(head)' if revision == head else f'(head is {head})'}")


@db.command()
@json_option
@command_options
def heads(as_json: bool, url: URL) -> None:
    """Print the head revision(s) of this hubstore, marking the database's own.

    --json: an array of {"revision", "current"}.
    """
    at = _existing_revision(url)
    if as_json:
        print_json([{"revision": rev, "current": rev == at} for rev in _heads()])
        return
    for rev in _heads():
        click.echo(f"{rev}{_marks(rev, at)}")


@db.command()
@json_option
@command_options
def history(as_json: bool, url: URL) -> None:
    """List the revisions, oldest first, marking the database's own.

    --json: an array, oldest first, of {"revision", "down_revision", "title", "head",
    "current"}.
    """
    at = _existing_revision(url)
    script = migrations.script_directory()
    revisions = list(reversed(list(script.walk_revisions())))
    if as_json:
        print_json([{"revision": rev.revision, "down_revision": rev.down_revision,
                     "title": _title(rev.doc), "head": rev.revision in _heads(),
                     "current": rev.revision == at} for rev in revisions])
        return
    for rev in revisions:
        click.echo(f"{rev.revision}  {_title(rev.doc)}{_marks(rev.revision, at)}")
    if at == "base":
        click.echo(f"({shown(url)} has no revision yet)")


def _title(doc: str | None) -> str:
    return doc.splitlines()[0] if doc else ""


@db.command()
@json_option
@command_options
def check(as_json: bool, url: URL) -> None:
    """Check the database's health, reading only; exit 1 with one finding a line.

    SQLite: integrity_check and foreign_key_check. Both dialects: CHECK constraints,
    the revision at head, the models and the schema in agreement, the figures equal
    to counting the rows.

    --json: {"url", "healthy", "head", "findings" (one string each)}; exit 1 when not
    healthy, as without it.
    """
    _existing(url)
    with reported("check", url):
        findings = health.check(url)
    if as_json:
        print_json({"url": shown(url), "healthy": not findings, "head": migrations.head(),
                    "findings": findings})
    else:
        for finding in findings:
            click.echo(finding)
        if not findings:
            click.echo(f"{shown(url)}: healthy (revision {migrations.head()})")
    if findings:
        exit_with(1)


@db.command()
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace DEST if it exists.")
@command_options
def backup(dest: Path, force: bool, url: URL) -> None:
    """Copy the SQLite database to DEST (a file), consistently, while writers go on.

    PostgreSQL databases are backed up with pg_dump.
    """
    source = sqlite_path(url)
    if source is None:  # pg_dump takes libpq's URL: no +driver
        libpq = shown(url.set(drivername="postgresql"))
        raise UsageFailure(
            f"{shown(url)} is a PostgreSQL database: back it up with pg_dump, e.g. "
            f"`pg_dump --format=custom --file {dest} '{libpq}'`, and restore it with "
            f"`pg_restore --dbname '{libpq}' {dest}` (hubstore db backup copies SQLite "
            "files only)")
    _existing(url)
    if dest.exists() and not force:
        raise click.ClickException(f"backup of {shown(url)} failed: {dest} exists "
                                   "(pass --force to replace it)")
    with reported("backup", url):
        pages = _online_backup(source, dest)
    click.echo(f"{shown(url)}: backed up to {dest} ({pages} pages, "
               f"{dest.stat().st_size:,} bytes)")


def _online_backup(source: Path, dest: Path) -> int:
    """SQLite's online backup in one step: one read transaction, so the copy is one
    consistent state, and in WAL mode writers do not wait for it."""
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        src = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)
        try:
            copy = sqlite3.connect(tmp)
            try:
                src.backup(copy)
                pages = int(copy.execute("PRAGMA page_count").fetchone()[0])
            finally:
                copy.close()
        finally:
            src.close()
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return pages


@db.command()
@click.option("--older-than", "older_than", type=Duration(), required=True,
              help="Delete messages older than this: 30d, 12h, 15m or 45s.")
@click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Messages deleted per transaction.")
@command_options
def prune(older_than: int, batch_size: int, url: URL) -> None:
    """Delete old messages with their inbox rows and dead letters; print how many."""
    _existing(url)
    with reported("prune", url), HubStore.open(url) as store:
        total = store.count_messages_before(older_than)
        columns = (TextColumn("pruning messages"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=err(), transient=False) as bar:
            task = bar.add_task("prune", total=total)
            deleted = store.prune_messages(
                older_than, batch_size=batch_size,
                progress=lambda n: bar.update(task, advance=n))
    click.echo(deleted)


@db.command()
@click.option("--every", type=Seconds(), default=None, metavar="DURATION",
              help="Sweep every DURATION (5m, 45s, or seconds: 0.5) until stopped "
                   "(Ctrl-C, SIGTERM); else once.")
@command_options
def sweep(every: float | None, url: URL) -> None:
    """Run the hub's sweeps: assign jobs past their deadline timed out (and retried
    while retries remain), expired messages to dead letters, overdue human requests
    timed out, stale agents marked. Claims already take back stalled jobs; this serves
    hubs where nobody claims. Safe beside other sweepers.

    Prints what each round moved (name<TAB>count, for each count above 0); with
    --every, a round's lines only when it moved something.
    """
    with reported("sweeping", url):
        _existing(url)
        with HubStore.open(url) as store:
            if every is None:
                _print_moved(sweep_once(store), always=True)
                return
            stop = threading.Event()
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                run_maintenance(store, every, stop=stop, on_round=_print_moved)
            except KeyboardInterrupt:
                pass
            finally:
                signal.signal(signal.SIGTERM, previous)


def _print_moved(moved: dict[str, int], always: bool = False) -> None:
    lines = [f"{name}\t{count}" for name, count in moved.items() if count]
    if lines or always:
        with writing():
            click.echo("\n".join(lines) if lines else "nothing to sweep")
