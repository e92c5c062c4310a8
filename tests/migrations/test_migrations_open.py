"""HubStore.open without auto_migrate: a database not at head raises SchemaNotCurrent,
names the command that fixes it, and is left exactly as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from hubstore import HubStore, migrations
from hubstore.errors import SchemaNotCurrent
from tests.reference_ddl import Rows, build_legacy, file_state, schema_objects, snapshot


def _state(url: URL) -> tuple[bytes, list[str]] | tuple[list[tuple[Any, ...]], Rows | None] | None:
    """Everything that could change: the SQLite file and its neighbours, or the schema
    and rows of a PostgreSQL database."""
    if url.get_backend_name() == "sqlite":
        assert url.database
        path = Path(url.database)
        return file_state(path) if path.exists() else None
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            objects = schema_objects(conn)
            rows = snapshot(conn) if any(o[1] == "agents" for o in objects) else None
            return objects, rows
    finally:
        engine.dispose()


def _refused(url: URL) -> str:
    before = _state(url)
    with pytest.raises(SchemaNotCurrent) as raised:
        HubStore.open(url)
    assert raised.value.code == "SCHEMA_NOT_CURRENT"
    assert _state(url) == before
    return str(raised.value)


def test_missing_sqlite_file_stays_missing(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "hub.db"
    message = _refused(make_url(f"sqlite:///{path}"))
    assert f"hubstore db upgrade --url 'sqlite:///{path}'" in message
    assert "auto_migrate=True" in message
    assert not (tmp_path / "not").exists()


def test_new_database_is_not_created(empty_url: URL) -> None:
    message = _refused(empty_url)
    assert "has no hubstore revision" in message
    assert "hubstore db upgrade" in message


def test_database_behind_head_is_left_alone(empty_url: URL) -> None:
    migrations.upgrade(empty_url, "0002")
    message = _refused(empty_url)
    assert f"is at revision 0002, not {migrations.head()} (head)" in message
    assert migrations.current(empty_url) == "0002"


@pytest.mark.parametrize("version", [3, 4])
def test_legacy_database_is_not_adopted_without_auto_migrate(empty_url: URL,
                                                             version: int) -> None:
    build_legacy(empty_url, version)
    assert "hubstore db upgrade" in _refused(empty_url)


def test_wal_legacy_file_leaves_nothing_behind(tmp_path: Path) -> None:
    """A WAL file (as the reference leaves it) gets no -wal/-shm files from the look."""
    path = tmp_path / "triflux.db"
    build_legacy(make_url(f"sqlite:///{path}"), 4, wal=True)
    assert file_state(path)[0][18:20] == b"\x02\x02"
    _refused(make_url(f"sqlite:///{path}"))


def test_revision_of_a_newer_hubstore_is_named(empty_url: URL) -> None:
    migrations.upgrade(empty_url)
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    assert "newer hubstore" in _refused(empty_url)


def test_database_at_head_opens(db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        assert store.list_all_agents() == []


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often hubstore resolves a URL and makes an engine, from now on."""
    import hubstore.engine
    import hubstore.store
    import hubstore.urls

    calls: dict[str, int] = {"resolve_url": 0, "create_engine": 0}

    def counting(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    resolve = counting("resolve_url", hubstore.urls.resolve_url)
    # the migrations package's modules that import them (commands, config, runtime)
    parts = [module for module in vars(migrations).values() if isinstance(module, ModuleType)]
    for module in (hubstore.urls, hubstore.store, hubstore.engine,
                   *(m for m in parts if hasattr(m, "resolve_url"))):
        monkeypatch.setattr(module, "resolve_url", resolve)
    for module in (hubstore.engine, *(m for m in parts if hasattr(m, "create_engine"))):
        monkeypatch.setattr(module, "create_engine",
                            counting("create_engine", module.create_engine))
    return calls


def test_open_at_head_resolves_the_url_once_and_builds_one_engine(
        db_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counted(monkeypatch)
    with HubStore.open(db_url) as store:
        assert store.list_all_agents() == []
    assert calls == {"resolve_url": 1, "create_engine": 1}


def test_open_with_auto_migrate_resolves_the_url_once(
        empty_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new database migrated by HubStore.open: the URL resolved once; PostgreSQL: one
    engine and one connection serve the revision check, the migrations and the store.
    SQLite: the migrations run on an engine of their own (the file's journal mode stays
    as it is until a legacy file is adopted, foreign keys off)."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    calls = _counted(monkeypatch)
    connects: list[object] = []

    def connected(dbapi_conn: object, _record: object) -> None:
        connects.append(dbapi_conn)

    event.listen(Pool, "connect", connected)
    try:
        with HubStore.open(empty_url, auto_migrate=True) as store:
            assert store.list_all_agents() == []
    finally:
        event.remove(Pool, "connect", connected)
    sqlite = empty_url.get_backend_name() == "sqlite"
    assert calls == {"resolve_url": 1, "create_engine": 2 if sqlite else 1}
    if not sqlite:
        assert len(connects) == 1
    assert migrations.current(empty_url) == migrations.head()


@pytest.mark.parametrize("call", ["upgrade", "current", "downgrade", "require_current"])
def test_a_server_that_cannot_be_reached_is_unavailable(call: str) -> None:
    import socket

    from hubstore.errors import DatabaseUnavailable

    with socket.socket() as probe:  # a port no one listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/hub"
    runs: dict[str, Callable[[], object]] = {
        "upgrade": lambda: migrations.upgrade(url),
        "current": lambda: migrations.current(url),
        "downgrade": lambda: migrations.downgrade(url, "base"),
        "require_current": lambda: migrations.require_current(url)}
    run = runs[call]
    with pytest.raises(DatabaseUnavailable, match="refused") as caught:
        run()
    assert caught.value.__cause__ is not None


def test_a_database_that_does_not_exist_is_unavailable(postgres: Any) -> None:
    from hubstore.errors import DatabaseUnavailable

    url: URL = postgres.admin.url.set(database="hubstore_no_such_database")
    runs: list[Callable[[], object]] = [
        lambda: migrations.upgrade(url), lambda: migrations.current(url),
        lambda: migrations.downgrade(url, "base"),
        lambda: migrations.upgrade(url, schema="hub")]
    for run in runs:
        with pytest.raises(DatabaseUnavailable, match="does not exist"):
            run()


def test_upgrade_makes_no_folder_at_the_top_or_under_a_file(tmp_path: Path) -> None:
    """As `hubstore db upgrade` refuses: folders are made only inside an existing,
    writable one (HubStore.open(auto_migrate=True) follows the same rule)."""
    import uuid

    from hubstore.errors import DatabaseUnavailable

    top = Path("/") / f"hubstore-typo-{uuid.uuid4().hex[:8]}"
    (tmp_path / "file").write_text("")
    for path, reason in ((top / "sub" / "x.db", "creates folders only inside an existing"),
                         (tmp_path / "file" / "sub" / "x.db", "is not a writable folder")):
        for run in (lambda p=path: migrations.upgrade(f"sqlite:///{p}"),
                    lambda p=path: HubStore.open(f"sqlite:///{p}", auto_migrate=True)):
            with pytest.raises(DatabaseUnavailable, match=reason):
                run()
    assert not top.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    made = tmp_path / "a" / "b" / "x.db"  # inside an existing folder: made
    migrations.upgrade(f"sqlite:///{made}")
    assert migrations.current(f"sqlite:///{made}") == migrations.head()
