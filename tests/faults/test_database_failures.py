"""A database that cannot serve raises the HubStoreError of its kind, saying why, with the
driver's error as its cause: a SQLite file that cannot be created, is read-only or is
full (DatabaseUnavailable), or whose lock is held past the busy timeout (DatabaseBusy);
a PostgreSQL server that never answers (PostgreSQL connects with a default timeout the
URL may override) or refuses, or that kills a connection (DatabaseUnavailable). The
store goes on once the database serves again, and replaces an idle connection the
server killed without a word.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy import inspect as sa_inspect

from hubstore import HubStore, engine
from hubstore.errors import DatabaseBusy, DatabaseUnavailable
from tests.faults.test_hostile_inputs import snapshot

# --- PostgreSQL: connect timeout, refused, a connection killed --------------------


def _pg_url(port: int, query: str = "") -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/x{query}"


def test_a_server_that_never_answers_times_out_as_unavailable() -> None:
    import socket

    from hubstore.errors import DatabaseUnavailable

    with socket.socket() as server:  # accepts (the kernel's backlog), never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as caught:
            HubStore.open(_pg_url(port, "?connect_timeout=1"))
        assert time.monotonic() - began < 3.0
    assert caught.value.__cause__ is not None
    assert "timeout" in str(caught.value).lower()


def test_a_refused_connection_is_unavailable_with_the_reason() -> None:
    import socket

    from hubstore.errors import DatabaseUnavailable

    with socket.socket() as probe:  # a port no one listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    began = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        HubStore.open(_pg_url(port))
    assert time.monotonic() - began < 3.0
    assert "refused" in str(caught.value).lower()


def test_postgresql_connects_with_a_default_timeout_the_url_overrides(postgres: Any) -> None:
    from sqlalchemy.engine import make_url

    from hubstore.engine import CONNECT_TIMEOUT_S, create_hub_engine

    assert CONNECT_TIMEOUT_S == 10
    admin = make_url(str(postgres.admin.url.render_as_string(hide_password=False)))
    for query, expected in (({}, 10), ({"connect_timeout": "3"}, "3")):
        engine = create_hub_engine(admin.update_query_dict(query))
        seen: list[dict[str, Any]] = []
        event.listen(engine, "do_connect", lambda d, r, cargs, cparams, seen=seen: seen.append(
            dict(cparams)))
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT 1")) == 1
        engine.dispose()
        assert seen and seen[0]["connect_timeout"] == expected


def test_a_connection_killed_inside_a_unit_of_work_is_unavailable_then_recovers(
        store: HubStore, request: pytest.FixtureRequest) -> None:
    from hubstore.errors import DatabaseUnavailable, HubStoreError

    if store.dialect != "postgresql":
        # SQLite: no server to lose; the nearest fault is a closed connection.
        with pytest.raises(HubStoreError), store.unit_of_work() as uow:
            uow.register_agent("lost", "codex")
            uow.driver.close()
        store.register_agent("after", "codex")
        assert [a.agent_id for a in store.list_all_agents()] == ["after"]
        return
    postgres = request.getfixturevalue("postgres")
    store.register_agent("before", "codex")
    began = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught, store.unit_of_work() as uow:
        uow.register_agent("lost", "codex")
        pid = uow.connection.scalar(text("SELECT pg_backend_pid()"))
        with postgres.admin.connect() as admin:
            assert admin.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        uow.audit_log("event", "lost", "x", "t")
    assert time.monotonic() - began < 5.0
    assert caught.value.__cause__ is not None
    store.register_agent("after", "codex")  # the pool recovered
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["after", "before"]
    assert store.get_hub_stats()["total_messages"] == 0


def _backend_pid(store: HubStore) -> int:
    with store.unit_of_work(write=False) as uow:
        return int(uow.connection.scalar(text("SELECT pg_backend_pid()")))


def test_an_idle_connection_killed_by_the_server_is_replaced_unseen(
        store: HubStore, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite has no server connection to lose")
    postgres = request.getfixturevalue("postgres")
    store.register_agent("before", "codex")
    pid = _backend_pid(store)
    with postgres.admin.connect() as admin:
        assert admin.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    monkeypatch.setattr(engine, "IDLE_PING_S", 0.0)  # every checkout counts as idle
    store.register_agent("after", "codex")  # pinged, found dead, connected afresh
    assert _backend_pid(store) != pid
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["after", "before"]


# --- SQLite: a file that cannot be created, read-only, full or locked -------------


def test_a_file_that_cannot_be_created_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DatabaseUnavailable):
        HubStore.open(f"sqlite:///{blocker}/hub.db", auto_migrate=True)


@pytest.fixture
def sqlite_store(tmp_path: Path, sqlite_template: Path) -> Iterator[HubStore]:
    """A migrated SQLite file of this test's own (these are a file's own failures)."""
    path = tmp_path / "hub.db"
    shutil.copyfile(sqlite_template, path)
    with HubStore.open(f"sqlite:///{path}") as hub:
        yield hub


def test_a_read_only_file_is_unavailable_with_the_reason(sqlite_store: HubStore) -> None:
    sqlite_store.audit_log("event", "a", "b", "t")
    path = sqlite_store.url.database
    with HubStore.open(f"sqlite:///file:{path}?mode=ro&uri=true") as read_only:
        assert read_only.get_hub_stats()["total_messages"] == 1
        with pytest.raises(DatabaseUnavailable, match="read-only") as info:
            read_only.audit_log("event", "a", "b", "t")
        assert isinstance(_root(info.value), sqlite3.Error)
    assert sqlite_store.get_hub_stats()["total_messages"] == 1


def test_a_full_disk_is_unavailable_with_the_reason(sqlite_store: HubStore) -> None:
    # SQLite's own SQLITE_FULL: the store's connection may not grow the file further.
    with sqlite_store.unit_of_work() as uow:
        pages = uow.connection.exec_driver_sql("PRAGMA page_count").scalar()
        uow.connection.exec_driver_sql(f"PRAGMA max_page_count = {pages}")
    tables = sorted(sa_inspect(sqlite_store.engine).get_table_names())
    before = snapshot(sqlite_store, tables)
    with pytest.raises(DatabaseUnavailable, match="full") as info:
        sqlite_store.audit_log("event", "a", "b", "t", payload={"x": "y" * 200_000})
    assert isinstance(_root(info.value), sqlite3.Error)
    assert snapshot(sqlite_store, tables) == before


def test_a_lock_held_past_the_busy_timeout_is_busy(sqlite_store: HubStore) -> None:
    path = sqlite_store.url.database
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with HubStore.open(sqlite_store.url, busy_timeout_ms=200) as other:
            started = time.monotonic()
            with pytest.raises(DatabaseBusy, match=r"busy timeout|locked") as info:
                other.audit_log("event", "a", "b", "t")
            assert time.monotonic() - started < 5
            assert isinstance(_root(info.value), sqlite3.Error | TimeoutError) or \
                info.value.__cause__ is not None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sqlite_store.get_hub_stats()["total_messages"] == 0


def _root(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc
