"""Database URLs: resolving the one a store opens, and the SQLite file behind one."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_dir
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from hubstore.errors import DatabaseUnavailable, ValidationError, describe
from hubstore.validation import require_str

ENV_URL = "HUBSTORE_URL"


def default_url() -> str:
    """The embedded default: a SQLite file in the user's data directory."""
    return f"sqlite:///{Path(user_data_dir('hubstore')) / 'hub.db'}"


#: The URL forms hubstore opens, for error messages.
SUPPORTED_FORMS = ("sqlite:///PATH (a file; also sqlite+pysqlite:///PATH) and "
                   "postgresql://USER@HOST:PORT/DB (also postgresql+psycopg://..., psycopg 3; "
                   "several servers: postgresql://USER@/DB?host=H1:P1&host=H2:P2"
                   "&target_session_attrs=read-write)")
_DRIVERS = {"sqlite": ("pysqlite",), "postgresql": ("psycopg",)}


def resolve_url(url: str | URL | None = None) -> URL:
    """The given URL, else $HUBSTORE_URL, else the embedded default, checked up front.

    Refused with ValidationError, before anything is created: an empty or unreadable
    URL, a driver other than pysqlite and psycopg 3 (``postgresql+psycopg2``,
    ``+asyncpg``, ``sqlite+aiosqlite``, MySQL...), a port outside 1..65535, and an
    in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``: each connection
    would see a database of its own, never migrated). ``~`` in a SQLite path is expanded.
    """
    raw = url if url is not None else os.environ.get(ENV_URL) or default_url()
    if isinstance(raw, str) and not raw.strip():
        raise ValidationError(f"the database URL is empty; hubstore supports {SUPPORTED_FORMS}")
    if isinstance(raw, str):
        require_str(raw, "the database URL")  # no U+0000, no lone surrogate
    elif not isinstance(raw, URL):  # (make_url's own message would repr it whole)
        raise ValidationError(f"the database URL must be a string or an sqlalchemy URL, "
                              f"got {type(raw).__name__} {describe(raw)}")
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise ValidationError(
            f"cannot read the database URL {_hide_password(raw)!r} ({exc}); "
            f"hubstore supports {SUPPORTED_FORMS}") from exc
    backend = parsed.get_backend_name()
    driver = parsed.drivername.partition("+")[2]
    if backend not in _DRIVERS or (driver and driver not in _DRIVERS[backend]):
        raise ValidationError(
            f"hubstore supports {SUPPORTED_FORMS}, not {parsed.drivername}:// URLs")
    if backend == "postgresql":
        if parsed.port is not None and not 1 <= parsed.port <= 65535:
            raise ValidationError(f"the port {parsed.port} is not between 1 and 65535")
        behind_pgbouncer(parsed)  # bad values refused up front
        call_timeout_in(parsed)
        try:
            import psycopg  # noqa: F401  (the engine imports it next anyway)
        except ImportError as exc:
            shown = _hide_password(parsed.render_as_string())
            if isinstance(exc, ModuleNotFoundError) and exc.name == "psycopg":
                raise DatabaseUnavailable(
                    f"{shown} is a PostgreSQL URL, and its driver, psycopg 3, is not "
                    'installed: pip install "hubstore[postgres]"') from exc
            # Installed without a libpq it can load ("no pq wrapper available").
            raise DatabaseUnavailable(
                f"{shown} is a PostgreSQL URL, and its driver, psycopg 3, cannot be "
                f"imported ({' '.join(str(exc).split())[:300]}); it needs libpq: "
                'pip install "psycopg[binary]" (a wheel that carries libpq), or '
                '"psycopg[c]", or install the system\'s libpq') from exc
        return parsed.set(drivername="postgresql+psycopg")
    database = parsed.database or ""
    if parsed.host:  # sqlite://hub.db: one slash short, "hub.db" read as a host
        meant = "/".join(filter(None, (parsed.host, database)))
        raise ValidationError(
            f"{_hide_password(str(raw))} names a host ({parsed.host!r}), and a SQLite "
            f"URL has none: did you mean sqlite:///{meant} (three slashes: a file relative to the "
            f"working directory; four for an absolute path: sqlite:////tmp/{meant})?")
    if database in ("", ":memory:") or "mode=memory" in database \
            or parsed.query.get("mode") == "memory" or database.startswith("file::memory:"):
        raise ValidationError(
            "hubstore does not open in-memory SQLite databases (each connection would see "
            "an empty database of its own); use a file, for example a temporary one: "
            "sqlite:////tmp/hub-test.db, or the hubstore.testing plugin's hub_store fixture")
    if database.startswith("~"):
        parsed = parsed.set(database=str(Path(database).expanduser()))
    return parsed


#: The URL query option that says a PostgreSQL URL leads to PgBouncer in transaction (or
#: statement) pooling mode: ``postgresql://user@bouncer:6432/hub?pgbouncer=true``. Each
#: transaction may then run on another server connection, so hubstore's connections
#: prepare no statements (psycopg's ``prepare_threshold=None``), and waiters LISTEN only
#: on ``store.listen_url`` (a direct URL), never through PgBouncer.
PGBOUNCER_OPTION = "pgbouncer"
_YES, _NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def behind_pgbouncer(url: URL) -> bool:
    """Whether ``url`` says ``?pgbouncer=true`` (ValidationError for a value not a yes/no)."""
    value = url.query.get(PGBOUNCER_OPTION)
    if value is None:
        return False
    text = (value[-1] if isinstance(value, tuple) else value).strip().lower()
    if text not in _YES + _NO:
        raise ValidationError(f"{PGBOUNCER_OPTION}= takes true or false, not {text!r}")
    return text in _YES


def without_hubstore_options(url: URL) -> URL:
    """``url`` without hubstore's own query options (``?pgbouncer=...``,
    ``?call_timeout=...``): libpq does not know them."""
    return url.difference_update_query(HUBSTORE_OPTIONS)


#: The URL query option that bounds each call to a PostgreSQL server, in seconds
#: (``?call_timeout=10``; 0: no bound): see :mod:`hubstore.pg_connections`.
CALL_TIMEOUT_OPTION = "call_timeout"
#: The shortest bound a call may have (the change watcher's wait is 0.5 s).
MIN_CALL_TIMEOUT_S = 1.0
#: The URL query options that are hubstore's, not libpq's.
HUBSTORE_OPTIONS = (PGBOUNCER_OPTION, CALL_TIMEOUT_OPTION)


def call_timeout_in(url: URL) -> float | None:
    """The seconds ``?call_timeout=`` gives (0.0: no bound), or None when the URL does
    not say (ValidationError for a value that is not 0 or a number of seconds >= 1)."""
    value = url.query.get(CALL_TIMEOUT_OPTION)
    if value is None:
        return None
    text = (value[-1] if isinstance(value, tuple) else value).strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    return checked_call_timeout(seconds, f"{CALL_TIMEOUT_OPTION}=", shown=text)


def checked_call_timeout(value: object, what: str, *, shown: object = None) -> float:
    """A call bound in seconds, checked: 0 (or None: no bound), else a number of at
    least MIN_CALL_TIMEOUT_S, finite. ValidationError otherwise (naming ``what``)."""
    if value is None:
        return 0.0
    seconds = (float(value) if isinstance(value, int | float) and not isinstance(value, bool)
               and abs(value) < 2**63 else float("nan"))
    if seconds == 0:
        return 0.0
    if not MIN_CALL_TIMEOUT_S <= seconds < float("inf"):
        raise ValidationError(
            f"{what} takes a number of seconds of at least {MIN_CALL_TIMEOUT_S:g} (or 0 for "
            f"no bound), not {describe(value if shown is None else shown)}")
    return seconds


def _hide_password(raw: object) -> str:
    """The URL as text, with any password masked (it appears in error messages)."""
    text = str(raw)
    scheme, sep, rest = text.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return text


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for an in-memory database."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def folder_refusal(path: Path) -> str | None:
    """Why the missing folders of a new SQLite file at ``path`` will not be made (None:
    they may be, or none is missing): hubstore creates folders only inside an existing,
    writable one, and never at the top of the file system (``/typo/x.db``)."""
    if path.parent.exists():
        return None
    ancestor = next(p for p in path.absolute().parents if p.exists())
    if ancestor == Path(ancestor.anchor):
        return (f"{path.parent} does not exist, and hubstore creates folders only inside an "
                f"existing one, not at the top of {ancestor} (check the path, or create the "
                "folder first)")
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        return (f"{path.parent} does not exist and {ancestor} is not a writable folder to "
                "create it in (check the path)")
    return None


def ensure_sqlite_file(url: URL) -> None:
    """Create a missing SQLite file with mode 0600, and its folders with mode 0700
    (DatabaseUnavailable where :func:`folder_refusal` says no)."""
    path = sqlite_path(url)
    if path is None or path.exists():
        return
    refusal = folder_refusal(path)
    if refusal is not None:
        raise DatabaseUnavailable(f"the SQLite file cannot be created: {refusal}")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def same_database(a: URL, b: URL) -> bool:
    """Whether two URLs name one database (SQLite: one file; else host, port, name)."""
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        first, second = sqlite_path(a), sqlite_path(b)
        return first is not None and second is not None and (
            first.resolve() == second.resolve())
    return ((a.host or "localhost", a.port or 5432, a.database)
            == (b.host or "localhost", b.port or 5432, b.database))
