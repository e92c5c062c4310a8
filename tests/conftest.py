"""Shared fixtures: every storage test runs on SQLite and on PostgreSQL.

PostgreSQL: HUBSTORE_TEST_PG (default postgresql+psycopg://postgres@127.0.0.1:5432/test)
is the admin connection; its database is created (from the server's ``postgres``
maintenance database) when it does not exist yet. The migrations build one template
database per session, and under pytest-xdist one per worker (each name carries the
worker's id and a random part, so workers and concurrent runs never share a database).
Each test gets a database of its own, copied from the template, and dropped afterwards.
Copies are made one test ahead and dropped behind, by a thread of the session, while
tests run; test databases commit without waiting for the WAL flush
(``synchronous_commit = off``: what a transaction sees is unchanged, only a crash of the
server could lose its last commits).
SQLite: the template is a migrated file, copied per test. When CI=true an unreachable
PostgreSQL fails the PostgreSQL tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, migrations
from hubstore.testing import factories
from tests.helpers import Heard

PG_ADMIN = os.environ.get("HUBSTORE_TEST_PG",
                          "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures"
BACKENDS = ["sqlite", "postgresql"]
#: This process's part of the test database names: the pytest-xdist worker ("gw0"), or
#: "main" without xdist.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
#: Where a server's databases are created when the admin database is missing (as
#: createdb does: ``postgres``, then ``template1``).
MAINTENANCE_DATABASES = ("postgres", "template1")


def pytest_configure(config: pytest.Config) -> None:
    """Test files live in memory where there is a tmpfs (``/dev/shm``): SQLite's syncs
    (a checkpoint each time a file's last connection closes) then cost nothing. A temp
    root chosen with ``--basetemp``, ``$PYTEST_DEBUG_TEMPROOT`` or ``$TMPDIR`` wins."""
    shm = Path("/dev/shm")
    if (config.option.basetemp is None and not os.environ.get("PYTEST_DEBUG_TEMPROOT")
            and not os.environ.get("TMPDIR") and shm.is_dir() and os.access(shm, os.W_OK)):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(shm)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the cores this process may use. The suite's
    tests often wait (on subprocesses, on the server, on timed sleeps) and the extra
    workers fill those waits: on two cores, 5:46 with 3 workers against 6:06 with 2 (one
    fresh clone, one run each), then 5:56 with 4 against 6:10 with 3 (/work/main,
    2,540 tests, one run each)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        cores = os.cpu_count() or 1
    return cores + 2


class _TakingTurns:
    """pytest-xdist's workers of one run take turns around tests marked ``alone``: such
    a test runs while no other test runs (its bound is on how late something is, and a
    test of the other worker on the same cores would be measured with it); other tests
    run side by side. A lock file shared by the workers, held shared by each test and
    exclusively by an ``alone`` test, with a turnstile before it, so that a waiting
    ``alone`` test goes next instead of waiting for a gap between the others' tests."""

    def __init__(self, folder: Path) -> None:
        self._turnstile = (folder / "hubstore-turnstile.lock").open("a")
        self._tests = (folder / "hubstore-tests.lock").open("a")

    def hold(self, alone: bool) -> Iterator[None]:
        import fcntl

        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._tests, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)


_turns: _TakingTurns | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _turns
    basetemp = item.config.option.basetemp
    if not hasattr(item.config, "workerinput") or not basetemp or os.name != "posix":
        yield  # one process (or no fcntl): nothing runs beside the test
        return
    if _turns is None:  # the workers' base folders share the run's folder
        _turns = _TakingTurns(Path(basetemp).parent)
    yield from _turns.hold(item.get_closest_marker("alone") is not None)


def pg_admin_url() -> URL:
    return make_url(PG_ADMIN)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _connects(url: URL) -> str | None:
    """None when ``url`` takes a connection, else why not (one line)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        engine.dispose()
    return None


def ensure_database(url: URL) -> bool:
    """Create ``url``'s database when it does not exist, from the server's maintenance
    database; True when this call created it. Raises when the server cannot be reached
    (or the database neither exists nor can be created). Another process creating it
    at the same moment is no error."""
    if _connects(url) is None:
        return False
    name = str(url.database)
    reasons = []
    for maintenance in MAINTENANCE_DATABASES:
        engine = create_engine(url.set(database=maintenance), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                exists = conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                     {"n": name})
                if exists:
                    break
                try:
                    conn.execute(text(f"CREATE DATABASE {_quoted(name)}"))
                except Exception:  # created by another worker meanwhile?
                    if not conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                       {"n": name}):
                        raise
                    break
                return True
        except Exception as exc:
            reasons.append(f"{type(exc).__name__}: {exc}".splitlines()[0])
        finally:
            engine.dispose()
    else:
        raise RuntimeError(f"cannot create database {name!r}: {'; '.join(reasons)}")
    return False


def _pg_reachable() -> str | None:
    """None when the admin database takes a connection (created first if it was
    missing), else why not."""
    reason = _connects(pg_admin_url())
    if reason is None:
        return None
    try:
        ensure_database(pg_admin_url())
    except Exception:
        return reason  # the server cannot be reached, or refuses to create the database
    return _connects(pg_admin_url())


class PostgresDatabases:
    """Creates and drops throwaway databases on the admin server.

    :meth:`copy` hands out copies of a template made ahead, and :meth:`drop` returns at
    once: the copies are made on one thread of the session and the drops run on
    another, so a test waits neither for the server's copying (a few tenths of a second
    of its CPU) nor for its dropping (mostly waiting). :meth:`close` waits for both."""

    def __init__(self) -> None:
        self.admin = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
        event.listen(self.admin, "connect", _no_flush_wait)
        self._copier = ThreadPoolExecutor(1, thread_name_prefix="hubstore-test-copies")
        self._dropper = ThreadPoolExecutor(1, thread_name_prefix="hubstore-test-drops")
        self._spares: dict[str, Future[URL]] = {}  # template name -> the next copy
        self._drops: list[Future[None]] = []
        self._lock = threading.Lock()
        with self.admin.connect() as conn:
            version = int(conn.scalar(text("SHOW server_version_num")) or 0)
        self._strategy = " STRATEGY FILE_COPY" if version >= 150000 else ""

    def _name(self, prefix: str) -> str:
        return f"{prefix}_{WORKER}_{uuid.uuid4().hex[:12]}"

    def create(self, prefix: str = "hubstore_t", template: str | None = None) -> URL:
        """A new database (a copy of ``template``, else empty), made now.

        PostgreSQL 15 and later copy by writing every page of the template to the WAL
        unless told ``STRATEGY FILE_COPY`` (their predecessors' way): the file copy,
        with its checkpoint, took half the server's CPU for a test database (0.2 s
        against 0.4 s, measured)."""
        name = self._name(prefix)
        clause = f" TEMPLATE {_quoted(template)}{self._strategy}" if template else ""
        with self.admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {_quoted(name)}{clause}"))
            conn.execute(text(f"ALTER DATABASE {_quoted(name)} SET synchronous_commit = off"))
        return pg_admin_url().set(database=name)

    def copy(self, template: str) -> URL:
        """A new copy of ``template`` (made while the previous test ran); the next one is
        started before this returns."""
        with self._lock:
            spare = self._spares.pop(template, None)
            self._spares[template] = self._copier.submit(self.create, template=template)
        return spare.result() if spare is not None else self.create(template=template)

    def drop(self, url: URL) -> None:
        """Drop ``url``'s database, on the session's dropping thread (see :meth:`close`)."""
        self._drops.append(self._dropper.submit(self.drop_now, url))

    def drop_now(self, url: URL) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {_quoted(str(url.database))} "
                              "WITH (FORCE)"))

    def forget_template(self, template: str) -> None:
        """Drop the copy of ``template`` made ahead (before the template is dropped)."""
        with self._lock:
            spare = self._spares.pop(template, None)
        if spare is not None:
            self.drop_now(spare.result())

    def close(self) -> None:
        """Wait for every drop (raising the first that failed), then let go."""
        for template in list(self._spares):
            self.forget_template(template)
        self._copier.shutdown(wait=True)
        self._dropper.shutdown(wait=True)
        try:
            for dropped in self._drops:
                dropped.result()
        finally:
            self.admin.dispose()


def _no_flush_wait(dbapi_conn: Any, _record: Any) -> None:
    """The admin connection's own commits do not wait for the WAL flush either."""
    with dbapi_conn.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
    dbapi_conn.commit()


def require_postgres() -> None:
    """Return when the admin database can be used; else skip the test, or fail it
    when CI=true (CI must not pass without its PostgreSQL tests)."""
    reason = _pg_reachable()
    if reason is not None:
        message = f"PostgreSQL at {PG_ADMIN} is unreachable ({reason})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases]:
    require_postgres()
    databases = PostgresDatabases()
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture(scope="session")
def pg_template(postgres: PostgresDatabases) -> Iterator[str]:
    url = postgres.create("hubstore_template")
    migrations.upgrade(url)
    name = str(url.database)
    yield name
    postgres.forget_template(name)
    postgres.drop_now(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "hub.db"
    migrations.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A URL to a database of this test's own with nothing in it (not migrated)."""
    if backend == "sqlite":
        yield make_url(f"sqlite:///{tmp_path / 'empty.db'}")
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres")
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A URL to a migrated database of this test's own."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "hub.db"
        shutil.copyfile(template, path)
        yield make_url(f"sqlite:///{path}")
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres")
    url = postgres.copy(request.getfixturevalue("pg_template"))
    yield url
    postgres.drop(url)


@pytest.fixture
def store(db_url: URL) -> Iterator[HubStore]:
    with HubStore.open(db_url) as hub:
        factories.bind(hub)
        try:
            yield hub
        finally:
            factories.unbind()


def fixture_pairs() -> list[tuple[Path, Path]]:
    """The reference-written databases in ../shared/fixtures with their JSON."""
    if not FIXTURES.is_dir():
        return []
    return [(db, db.with_suffix(".json")) for db in sorted(FIXTURES.glob("*.db"))]


@pytest.fixture
def heard(store: HubStore) -> Iterator[Heard]:
    """Every (event, job) the store's status listeners are told about."""
    events: Heard = []
    unsubscribe = store.on_assign_status_change(lambda event, job: events.append((event, job)))
    yield events
    unsubscribe()
