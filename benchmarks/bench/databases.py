"""Where the benchmark writes: the target database, emptied or fresh, and its copies.

Honest repeats: every repeat runs on a fresh copy of a preloaded template (SQLite: a copy
of the file; PostgreSQL: ``CREATE DATABASE ... TEMPLATE``), made and dropped here.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, make_url, text
from sqlalchemy.engine import URL


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def _sqlite_tables(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        con.close()
    return [row[0] for row in rows]


def remove_sqlite_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _pg_tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        return inspect(engine).get_table_names(schema="public")
    finally:
        engine.dispose()


def pg_reset(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    finally:
        engine.dispose()


def pg_fresh_hub(url: str, change: str | None = None) -> None:
    """Empty the PostgreSQL database, migrate it to head, then apply ``change`` (DDL,
    a layout variant to measure) to it."""
    from hubstore import HubStore

    pg_reset(url)
    with HubStore.open(url, auto_migrate=True):
        pass
    if change is not None:
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(text(change))
        finally:
            engine.dispose()


def _describe_tables(tables: Sequence[str], shown: int = 5) -> str:
    names = sorted(tables)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class NonEmptyDatabase(RuntimeError):
    """The target database holds tables and --reset was not given."""


@dataclass
class Target:
    """Where the benchmark writes: a temp SQLite file, or a URL the user gave."""

    url: str | None
    reset: bool
    keep: bool = False
    _tmpdir: Path | None = field(default=None, init=False)
    _owned: bool = field(default=False, init=False)  # once emptied, the data in it is ours
    _count: int = field(default=0, init=False)
    _last_temp: Path | None = field(default=None, init=False, repr=False)
    #: The URL fresh() gave last (the template of the current measurement).
    last_url: str = field(default="", init=False)

    def fresh(self) -> str:
        """The URL of an empty database (a new file, or the user's database emptied)."""
        self._count += 1
        if self.url is None:
            self.last_url = self._fresh_temp_sqlite()
            return self.last_url
        if is_sqlite(self.url):
            self._empty_sqlite(self.url)
        else:
            self._empty_pg(self.url)
        self._owned = True
        self.last_url = self.url
        return self.url

    def _fresh_temp_sqlite(self) -> str:
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="hubstore-bench-"))
        if self._last_temp is not None and not self.keep:
            remove_sqlite_files(self._last_temp)
        self._last_temp = self._tmpdir / f"hub-{self._count}.db"
        return f"sqlite:///{self._last_temp}"

    def _empty_sqlite(self, url: str) -> None:
        path = sqlite_path(url)
        if path is None or not path.exists():
            return
        tables = _sqlite_tables(path)
        if tables and not (self.reset or self._owned):
            raise NonEmptyDatabase(
                f"{path} already holds tables ({_describe_tables(tables)}); "
                "pass --reset to delete the file and start from an empty database"
            )
        remove_sqlite_files(path)

    def _empty_pg(self, url: str) -> None:
        tables = _pg_tables(url)
        if not tables:
            return
        if not (self.reset or self._owned):
            name = make_url(url).database or "(default database)"
            raise NonEmptyDatabase(
                f"PostgreSQL database {name} is not empty (tables: "
                f"{_describe_tables(tables)}); the benchmark must start from an empty "
                "database. Pass --reset to run DROP SCHEMA public CASCADE; CREATE SCHEMA public "
                "(this deletes every table in schema public), or point --url at an empty database"
            )
        pg_reset(url)

    def workdir(self) -> Path:
        """This run's temp dir (made on first use, removed by cleanup)."""
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="hubstore-bench-"))
        return self._tmpdir

    def scratch(self, name: str) -> Path:
        """A fresh file path in this run's temp dir (the reference's files live there)."""
        path = self.workdir() / name
        remove_sqlite_files(path)
        return path

    def cleanup(self) -> None:
        if self._tmpdir is not None and not self.keep:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


def display_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


# --- fresh copies of a template, one per repeat


def copy_sqlite_file(source: Path, dest: Path) -> None:
    remove_sqlite_files(dest)
    shutil.copyfile(source, dest)
    wal = Path(f"{source}-wal")
    if wal.exists() and wal.stat().st_size:
        shutil.copyfile(wal, Path(f"{dest}-wal"))


def _pg_admin(url: URL) -> Any:
    return create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")


def copy_database(template_url: str, k: int) -> str:
    """A fresh copy of the template database for repeat `k`: its URL."""
    url = make_url(template_url)
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(template_url)
        assert path is not None, "templates are files"
        dest = path.with_name(f"{path.name}.r{k}")
        copy_sqlite_file(path, dest)
        return url.set(database=str(dest)).render_as_string(hide_password=False)
    name = f"{url.database}_r{k}"
    admin = _pg_admin(url)
    try:
        quote = admin.dialect.identifier_preparer.quote
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote(name)}")
            conn.exec_driver_sql(f"CREATE DATABASE {quote(name)} TEMPLATE {quote(url.database)}")
    finally:
        admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_copy(copy_url: str, keep: bool = False) -> None:
    """Remove a copy made by copy_database."""
    url = make_url(copy_url)
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(copy_url)
        if path is not None and not keep:
            remove_sqlite_files(path)
            Path(f"{path}.lock").unlink(missing_ok=True)
        return
    if keep:
        return
    admin = _pg_admin(url)
    try:
        with admin.connect() as conn:
            name = admin.dialect.identifier_preparer.quote(url.database)
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        admin.dispose()
