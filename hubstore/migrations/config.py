"""hubstore's Alembic scripts and Config: where the scripts are, the head, the options' checks."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import URL

from hubstore.engine import resolve_url
from hubstore.errors import ValidationError, describe

#: A version table or schema name: lower case, so that it reads the same quoted or not.
_SQL_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def script_location() -> str:
    """The migration scripts: inside the installed package, else the checkout's alembic/."""
    here = Path(__file__).resolve().parents[1]  # the hubstore package
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise RuntimeError(f"hubstore's migration scripts are missing (looked beside {here})")


def alembic_config(url: URL | str | None = None, *, version_table: str | None = None,
                   schema: str | None = None) -> Config:
    """An Alembic Config for hubstore's scripts (no alembic.ini needed).

    ``version_table`` and ``schema``: as for :func:`upgrade` (checked here).
    """
    return _config(None if url is None else resolve_url(url), version_table, schema)


def _config(resolved: URL | None, version_table: str | None, schema: str | None) -> Config:
    """:func:`alembic_config` for a URL resolve_url already checked."""
    version_table, schema = checked_options(version_table, schema)
    config = Config()
    config.set_main_option("script_location", script_location())
    if resolved is not None:
        _require_postgresql(resolved, schema)
        config.attributes["hubstore_url"] = resolved
    if version_table is not None:
        config.attributes["hubstore_version_table"] = version_table
    if schema is not None:
        config.attributes["hubstore_schema"] = schema
    return config


@functools.cache
def script_directory() -> ScriptDirectory:
    """hubstore's revisions (loaded once: every HubStore.open asks for the head)."""
    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """The head revision."""
    revision = script_directory().get_current_head()
    assert revision is not None
    return revision


def is_known(revision: str, script: ScriptDirectory | None = None) -> bool:
    """Whether ``revision`` is one of this hubstore's revisions."""
    try:
        return (script or script_directory()).get_revision(revision) is not None
    except CommandError:
        return False


def checked_options(version_table: str | None, schema: str | None
                    ) -> tuple[str | None, str | None]:
    """``version_table`` and ``schema`` as given, refused with ValidationError unless each
    is None or a lower-case SQL name (letters, digits and _, at most 63 characters)."""
    for what, value in (("version_table", version_table), ("schema", schema)):
        if value is not None and (not isinstance(value, str) or not _SQL_NAME.fullmatch(value)):
            raise ValidationError(
                f"{what} must be a lower-case SQL name (a-z, 0-9 and _, not starting with a "
                f"digit, at most 63 characters), not {describe(value)}")
    return version_table, schema


def _require_postgresql(url: URL, schema: str | None) -> None:
    if schema is not None and url.get_backend_name() != "postgresql":
        raise ValidationError(
            f"schema={schema!r} is for PostgreSQL; a SQLite file has no schemas (give "
            "hubstore a file of its own, or leave schema out)")
