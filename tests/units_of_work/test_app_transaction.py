"""A hub call inside the application's own transaction (its Session or Connection on the
same database) commits and rolls back with the application's writes; an application's own
SQLite engine given to HubStore gets hubstore's set-up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from hubstore import HubStore
from hubstore.errors import DuplicateKey, HubStoreError, ValidationError
from hubstore.models import AssignJob
from hubstore.types import AssignEvent


@pytest.fixture
def app_engine(db_url: URL, store: HubStore) -> Iterator[Engine]:
    """The application's own engine on the hub's database, with a table of its own."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE app_orders (id INTEGER PRIMARY KEY, job TEXT)"))
    yield engine
    engine.dispose()


def orders(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [row[0] for row in conn.execute(text("SELECT job FROM app_orders"))]


def test_the_applications_rollback_undoes_the_hub_job(store: HubStore,
                                                      app_engine: Engine) -> None:
    heard: list[tuple[AssignEvent, AssignJob]] = []
    store.on_assign_status_change(lambda event, job: heard.append((event, job)))
    with Session(app_engine) as session:
        session.execute(text("INSERT INTO app_orders (id, job) VALUES (1, 'pending')"))
        with store.unit_of_work(join=session) as uow:
            job = uow.assign_async("lead", "w1", task="ship order 1")
            store.audit_log("event", "lead", "w1", "orders", payload={"order": 1})
            assert uow.session is session
        assert heard == []  # not before the application commits
        session.rollback()
    assert store.get_assign(job.job_id) is None
    assert store.get_messages_by_trace(job.trace_id) == []
    assert store.poll_for_agent("w1", include_topics=["orders"]) == []
    assert orders(app_engine) == []
    assert heard == []  # a rolled-back job is never announced


def test_the_applications_commit_commits_the_hub_job(store: HubStore,
                                                     app_engine: Engine) -> None:
    heard: list[tuple[AssignEvent, AssignJob]] = []
    store.on_assign_status_change(lambda event, job: heard.append((event, job)))
    with Session(app_engine) as session:
        with store.unit_of_work(join=session) as uow:
            job = uow.assign_async("lead", "w1", task="ship order 2")
        session.execute(text("INSERT INTO app_orders (id, job) VALUES (2, :job)"),
                        {"job": job.job_id})
        session.commit()
    assert [event["job_id"] for event, _ in heard] == [job.job_id]
    found = store.get_assign(job.job_id)
    assert found is not None and found.last_message_id is not None
    assert orders(app_engine) == [job.job_id]
    claimed = store.claim_next_assign("w1")
    assert claimed is not None and claimed.job_id == job.job_id


def test_a_core_connection_can_be_joined_too(store: HubStore, app_engine: Engine) -> None:
    with app_engine.connect() as conn:
        with store.unit_of_work(join=conn) as uow:
            uow.register_agent("a1", "codex")
        conn.rollback()
        assert store.get_agent("a1") is None
        with store.unit_of_work(join=conn) as uow:
            uow.register_agent("a1", "codex")
        conn.commit()
    assert store.get_agent("a1") is not None


def test_a_failed_hub_call_leaves_the_transaction_to_the_application(
        store: HubStore, app_engine: Engine) -> None:
    with Session(app_engine) as session:
        with pytest.raises(ValidationError), store.unit_of_work(join=session) as uow:
            uow.audit_log("event", "lead", "w1", "t", priority=42)
        session.rollback()
    assert store.poll_for_agent("w1", include_topics=["t"]) == []


@pytest.mark.parametrize("joined", ["session", "connection"])
def test_an_exception_caught_by_the_application_undoes_the_joined_block(
        store: HubStore, app_engine: Engine, joined: str) -> None:
    """The joined block is a SAVEPOINT of the application's transaction: an exception
    leaving it undoes its writes (and drops its announcements), even when the
    application catches it and commits, as a nested unit of work would."""
    heard: list[AssignEvent] = []
    store.on_assign_status_change(lambda event, job: heard.append(event))
    with app_engine.connect() as conn, Session(bind=conn) as session:
        app: Session | Connection = session if joined == "session" else conn
        app.execute(text("INSERT INTO app_orders (id, job) VALUES (1, 'kept')"))
        with (pytest.raises(RuntimeError, match="changed my mind"),
              store.unit_of_work(join=app) as uow):
            job = uow.assign_async("lead", "w1", task="ship order 1")
            store.register_agent("w1", "codex")  # a store call: joins the block
            raise RuntimeError("changed my mind")
        app.execute(text("INSERT INTO app_orders (id, job) VALUES (2, 'also kept')"))
        with store.unit_of_work(join=app) as uow:  # the application goes on joining
            kept = uow.assign_async("lead", "w2", task="ship order 2")
        app.commit()
    assert store.get_assign(job.job_id) is None
    assert store.get_agent("w1") is None
    assert store.get_messages_by_trace(job.trace_id) == []
    assert sorted(orders(app_engine)) == ["also kept", "kept"]
    assert store.get_assign(kept.job_id) is not None
    assert [event["job_id"] for event in heard] == [kept.job_id]


@pytest.mark.parametrize("joined", ["session", "connection"])
def test_a_duplicate_key_in_the_joined_block_leaves_the_applications_transaction_usable(
        store: HubStore, app_engine: Engine, joined: str) -> None:
    """PostgreSQL aborts a transaction at a failed statement: rolled back to the block's
    savepoint, the application's transaction goes on (no InFailedSqlTransaction)."""
    store.create_assign("lead", "w", job_id="k")
    with app_engine.connect() as conn, Session(bind=conn) as session:
        app: Session | Connection = session if joined == "session" else conn
        app.execute(text("INSERT INTO app_orders (id, job) VALUES (1, 'before')"))
        with pytest.raises(DuplicateKey), store.unit_of_work(join=app) as uow:
            uow.register_agent("w2", "codex")
            uow.create_assign("lead", "w2", job_id="k")
        app.execute(text("INSERT INTO app_orders (id, job) VALUES (2, 'after')"))
        app.commit()
    assert sorted(orders(app_engine)) == ["after", "before"]
    assert store.get_agent("w2") is None
    found = store.get_assign("k")
    assert found is not None and found.worker_agent == "w"


def test_a_failure_caught_inside_the_joined_block_fails_the_block_only(
        store: HubStore, app_engine: Engine) -> None:
    """A failed statement of the unit of work's own, caught inside the block: the block
    cannot end as if it had succeeded (as an outermost unit of work refuses to commit);
    its savepoint is rolled back and the application's transaction goes on."""
    store.create_assign("lead", "w", job_id="k")
    with Session(app_engine) as session:
        session.execute(text("INSERT INTO app_orders (id, job) VALUES (1, 'before')"))
        with (pytest.raises(HubStoreError, match="rolled back, nothing of it is committed"),
              store.unit_of_work(join=session) as uow):
            uow.register_agent("w2", "codex")
            with pytest.raises(DuplicateKey):
                uow.create_assign("lead", "w2", job_id="k")
        session.execute(text("INSERT INTO app_orders (id, job) VALUES (2, 'after')"))
        session.commit()
    assert sorted(orders(app_engine)) == ["after", "before"]
    assert store.get_agent("w2") is None


def test_a_joined_block_that_begins_the_applications_transaction_is_part_of_it(
        store: HubStore, app_engine: Engine) -> None:
    """The block as the application's first statement (SQLite's driver begins a
    transaction only before its first INSERT, UPDATE or DELETE: a SAVEPOINT before it
    would be the transaction, and its release a commit)."""
    with Session(app_engine) as session:
        with store.unit_of_work(join=session) as uow:
            uow.register_agent("a1", "codex")
        assert store.get_agent("a1") is None  # not committed: another connection's view
        session.rollback()
    assert store.get_agent("a1") is None


def test_joining_another_database_is_refused(store: HubStore, tmp_path: Path) -> None:
    other = create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    with (Session(other) as session,
          pytest.raises(ValidationError, match="not on this store"),
          store.unit_of_work(join=session)):
        pass
    other.dispose()
    with (pytest.raises(ValidationError, match="Session or Connection"),
          store.unit_of_work(join="a session")):  # type: ignore[arg-type]
        pass


def test_joining_inside_an_open_unit_of_work_is_refused(store: HubStore,
                                                        app_engine: Engine) -> None:
    with (Session(app_engine) as session, store.unit_of_work(),
          pytest.raises(ValidationError, match="open in this thread")):
        store.unit_of_work(join=session)


def test_an_applications_sqlite_engine_gets_hubstores_set_up(
        backend: str, db_url: URL) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite's set-up (PostgreSQL needs none)")
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 0  # (as given)
    store = HubStore(engine)
    try:
        with store.unit_of_work() as uow:
            hub: Connection = uow.connection
            assert hub.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert hub.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        message = store.audit_log("event", "a", "b", "t")
        assert store.deliver_to_agent(message.id, "b")
    finally:
        store.close()
        engine.dispose()
    with engine.connect() as conn:  # the application's own connections have it too
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
