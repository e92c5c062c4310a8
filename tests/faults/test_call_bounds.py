"""Every PostgreSQL connection hubstore makes gets the same settings, and no call waits on
the network for ever (issue 33).

- The store's engine, ``hubstore db check``'s, the migrations' and the change watcher's
  LISTEN connection all connect with hubstore's libpq settings (connect timeout, TCP
  keepalives, tcp_user_timeout), each overridden by the URL's own.
- A server that stops answering (a proxy that stops forwarding: its kernel still ACKs,
  as a frozen server's does) fails the call within ``call_timeout``, with
  DatabaseUnavailable naming the server; the next call after it answers again succeeds.
- A connection lost in a call: the error is the first failure, names the server, and
  nothing reconnects while it is handled. Lost before COMMIT: nothing was written
  (``outcome_unknown`` False). Lost while the server commits (the answer to COMMIT, or to
  the one statement of a call in autocommit): ``outcome_unknown``, and a retry with the
  same ``job_id`` raises DuplicateKey (the job exists, once), or, with the same
  ``unique_key`` too, returns the job the first try wrote.
- A multi-host URL's host that took the last connection is tried first.

tests/faults/test_failover.py does the same on a real failover and a SIGSTOPped server.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.engine import URL

from hubstore import HubStore, health, migrations
from hubstore.errors import DatabaseUnavailable, DuplicateKey, HubStoreError, ValidationError
from hubstore.pg_connections import CALL_TIMEOUT_S, LIBPQ_DEFAULTS, MAINTENANCE_CALL_TIMEOUT_S
from tests.conftest import PostgresDatabases
from tests.faults.tcp_proxy import Proxy


@pytest.fixture
def pg_url(postgres: PostgresDatabases, pg_template: str) -> Iterator[URL]:
    """A migrated PostgreSQL database of this test's own."""
    url = postgres.copy(pg_template)
    yield url
    postgres.drop(url)


@pytest.fixture
def proxy(pg_url: URL) -> Iterator[Proxy]:
    made = Proxy((pg_url.host or "127.0.0.1", pg_url.port or 5432))
    yield made
    made.close()


def _through(proxy: Proxy, url: URL, **query: str) -> URL:
    return url.set(host="127.0.0.1", port=proxy.port).update_query_dict(query)


# --- one set of settings for every connection -------------------------------------


class _Connects:
    """Records the keyword arguments of every psycopg connection made (the engines'
    dialects and the change watcher all make theirs with ``Connection.connect``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[dict[str, Any]] = []
        real = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

        def connect(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
            self.seen.append(dict(kwargs))
            return real(cls, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "connect", classmethod(connect))


def _bound(conn: Connection) -> Any:
    """The call bound of the psycopg connection under ``conn``."""
    driver: Any = conn.connection.driver_connection
    return driver.hubstore_bound


def _settings(params: dict[str, Any]) -> dict[str, str]:
    return {name: str(params.get(name)) for name in LIBPQ_DEFAULTS}


def test_every_connection_gets_the_same_settings(pg_url: URL,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    connects = _Connects(monkeypatch)
    expected = {name: str(value) for name, value in LIBPQ_DEFAULTS.items()}
    kinds = {}
    with HubStore.open(pg_url) as store:
        kinds["store"] = len(connects.seen)
        assert store.wait_for_assign("w1", timeout_s=0.2) is None  # starts the watcher
        deadline = time.monotonic() + 10
        while len(connects.seen) == kinds["store"] and time.monotonic() < deadline:
            time.sleep(0.01)
        kinds["change watcher"] = len(connects.seen)
    with health.read_only(pg_url) as conn:
        assert _bound(conn) == MAINTENANCE_CALL_TIMEOUT_S
    kinds["db check"] = len(connects.seen)
    assert migrations.current(pg_url) == migrations.head()
    kinds["migrations, looking"] = len(connects.seen)
    with migrations.locked_connection(pg_url, create=False) as conn:
        assert _bound(conn) == MAINTENANCE_CALL_TIMEOUT_S
    kinds["migrations, running"] = len(connects.seen)
    assert list(kinds.values()) == list(range(1, 6)), kinds  # one connection each
    for (kind, _), params in zip(kinds.items(), connects.seen, strict=True):
        assert _settings(params) == expected, kind

    # The URL's own values win, for every kind of connection.
    mine = pg_url.update_query_dict({"keepalives_idle": "42", "connect_timeout": "7"})
    connects.seen.clear()
    with HubStore.open(mine) as store:
        assert store.wait_for_assign("w1", timeout_s=0.2) is None
        deadline = time.monotonic() + 10
        while len(connects.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    with health.read_only(mine):
        pass
    assert len(connects.seen) == 3
    for params in connects.seen:
        assert _settings(params) == {**expected, "keepalives_idle": "42",
                                     "connect_timeout": "7"}


def test_the_call_bound_is_the_urls_else_the_given_else_the_default(pg_url: URL) -> None:
    def bound(store: HubStore) -> Any:
        with store.unit_of_work(write=False) as uow:
            return uow.driver.hubstore_bound

    with HubStore.open(pg_url) as store:
        assert bound(store) == CALL_TIMEOUT_S == 30
    with HubStore.open(pg_url, call_timeout_s=5) as store:
        assert bound(store) == 5
    with HubStore.open(pg_url, call_timeout_s=None) as store:
        assert bound(store) == 0  # no bound
    with HubStore.open(pg_url.update_query_dict({"call_timeout": "2.5"}),
                       call_timeout_s=5) as store:
        assert bound(store) == 2.5
        store.register_agent("w1", "codex")  # libpq never sees the option


@pytest.mark.parametrize("value", ["abc", "0.5", "-1", "inf", "nan", ""])
def test_a_bad_call_timeout_is_refused(pg_url: URL, value: str) -> None:
    with pytest.raises(ValidationError, match="call_timeout"):
        HubStore.open(pg_url.update_query_dict({"call_timeout": value}))


@pytest.mark.parametrize("value", [0.5, -1, float("inf"), "3", True, [1]])
def test_a_bad_call_timeout_s_is_refused(value: Any) -> None:
    with pytest.raises(ValidationError, match="call_timeout_s"):
        HubStore.open("sqlite:////nonexistent/hub.db", call_timeout_s=value)


# --- a server that stops answering --------------------------------------------------


def test_a_silent_server_fails_the_call_within_its_bound(pg_url: URL, proxy: Proxy) -> None:
    with HubStore.open(_through(proxy, pg_url, call_timeout="1.5")) as store:
        store.register_agent("w1", "codex")
        for call in (lambda: store.get_agent("w1"),  # a read in autocommit
                     lambda: store.assign_async("lead", "w1", task="t")):  # a write
            proxy.freeze()
            try:
                began = time.monotonic()
                with pytest.raises(DatabaseUnavailable) as caught:
                    call()
                took = time.monotonic() - began
            finally:
                proxy.thaw()
            assert 1.5 <= took < 3.5, took
            assert str(caught.value) == (
                f"the connection to the PostgreSQL server at 127.0.0.1:{proxy.port} was "
                "lost: no answer within 1.5 s (call_timeout), so hubstore closed the "
                "connection")
            assert store.get_agent("w1") is not None  # the next call succeeds


def test_a_silent_server_inside_a_unit_of_work(pg_url: URL, proxy: Proxy) -> None:
    with HubStore.open(_through(proxy, pg_url, call_timeout="1")) as store:
        began = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match="no answer within 1 s") as caught, \
                store.unit_of_work() as uow:
            uow.register_agent("w1", "codex")
            proxy.freeze()
            uow.register_agent("w2", "codex")
        proxy.thaw()
        assert time.monotonic() - began < 3.0
        assert not caught.value.outcome_unknown  # lost before COMMIT: nothing written
        assert store.list_all_agents() == []


def test_a_server_silent_from_the_first_query_fails_the_open_within_its_bound(
        pg_url: URL, proxy: Proxy) -> None:
    """Issue 40: SQLAlchemy's first-connect queries (the dialect's initialisation) ran
    before the call bound was on, so an open whose server answered the handshake and
    then nothing waited for ever (300 s seen); now within call_timeout."""
    proxy.freeze_after(b"pg_catalog.version()")
    began = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match=r"no answer within 1\.5 s"):
        HubStore.open(_through(proxy, pg_url, call_timeout="1.5"))
    assert time.monotonic() - began < 4.0


@pytest.mark.parametrize("command", [["db", "check"], ["db", "current"]])
def test_db_commands_on_a_silent_server_fail_within_their_bounds(
        pg_url: URL, command: list[str]) -> None:
    """The same at the command line (60 s and more before), for both kinds of silence:
    a socket that accepts connections and never answers (connect_timeout), and a server
    that answers the handshake and then nothing (call_timeout)."""
    with socket.socket() as silent:  # accepts (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        proxy = Proxy((pg_url.host or "127.0.0.1", pg_url.port or 5432))
        try:
            proxy.freeze_after(b"pg_catalog.version()")
            for port in (silent.getsockname()[1], proxy.port):
                url = pg_url.set(host="127.0.0.1", port=port).update_query_dict(
                    {"call_timeout": "2", "connect_timeout": "2"})
                began = time.monotonic()
                run = subprocess.run([sys.executable, "-m", "hubstore", *command, "--url",
                                      url.render_as_string(hide_password=False)],
                                     capture_output=True, text=True, timeout=120,
                                     check=False)
                took = time.monotonic() - began
                assert run.returncode == 1, run.stderr
                assert "Traceback" not in run.stderr and "failed:" in run.stderr
                assert took < 15, (port, took, run.stderr)  # 2 + 2, the start-up, a busy CI
        finally:
            proxy.close()


# --- a connection lost: the first failure, no reconnect, the outcome ----------------


def _kill(postgres: PostgresDatabases, pid: int) -> None:
    with postgres.admin.connect() as admin:
        assert admin.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})


def test_a_connection_lost_names_the_first_failure_and_reconnects_nowhere(
        pg_url: URL, postgres: PostgresDatabases) -> None:
    connects: list[int] = []

    def connected(*_: Any) -> None:
        connects.append(1)

    with HubStore.open(pg_url) as store:
        store.register_agent("before", "codex")
        event.listen(store.engine, "connect", connected)
        try:
            for where in ("unit of work", "savepoint", "savepoint, lost inside",
                          "read-only block"):
                with store.unit_of_work() as uow:  # (a warm pooled connection)
                    pid = uow.connection.scalar(text("SELECT pg_backend_pid()"))
                connects.clear()
                with pytest.raises(DatabaseUnavailable) as caught, \
                        store.unit_of_work() as uow:
                    uow.register_agent("lost", "codex")
                    if where == "unit of work":
                        _kill(postgres, pid)
                        uow.audit_log("event", "lost", "x", "t")
                    elif where == "savepoint":
                        _kill(postgres, pid)
                        store.audit_log("event", "lost", "x", "t")
                    else:
                        with store.unit_of_work(write=where != "read-only block"):
                            _kill(postgres, pid)
                            store.get_agent("lost")
                assert connects == [], where  # no connection made while failing
                assert str(caught.value) == (
                    f"the connection to the PostgreSQL server at {pg_url.host}:{pg_url.port}"
                    " was lost: terminating connection due to administrator command")
                assert not caught.value.outcome_unknown
        finally:
            event.remove(store.engine, "connect", connected)
        store.register_agent("after", "codex")
        assert sorted(a.agent_id for a in store.list_all_agents()) == ["after", "before"]
        assert store.get_hub_stats()["total_messages"] == 0


def test_a_lost_commit_answer_is_outcome_unknown_and_the_retry_finds_the_job(
        pg_url: URL, proxy: Proxy) -> None:
    with HubStore.open(_through(proxy, pg_url)) as store:
        store.register_agent("w1", "codex")
        # assign_async is one statement in autocommit on PostgreSQL: it is the COMMIT.
        proxy.lose_answer_after(b"INSERT INTO assign_jobs")
        with pytest.raises(DatabaseUnavailable) as caught:
            store.assign_async("lead", "w1", task="build", job_id="job-1")
        assert caught.value.outcome_unknown
        with pytest.raises(DuplicateKey):  # the retry: the first try had committed
            store.assign_async("lead", "w1", task="build", job_id="job-1")

        # A unit of work whose COMMIT's answer is lost.
        proxy.lose_answer_after(b"COMMIT")
        with pytest.raises(DatabaseUnavailable) as caught, store.unit_of_work() as uow:
            uow.create_assign("lead", "w1", task="ship", job_id="job-2")
        assert caught.value.outcome_unknown
        with pytest.raises(DuplicateKey):
            store.create_assign("lead", "w1", task="ship", job_id="job-2")
        # With the id as unique_key too, the retry returns the job the first try wrote.
        proxy.lose_answer_after(b"COMMIT")
        with pytest.raises(DatabaseUnavailable) as caught:
            store.assign_async("lead", "w1", task="test", job_id="job-3", unique_key="job-3")
        assert caught.value.outcome_unknown
        again = store.assign_async("lead", "w1", task="test", job_id="job-3",
                                   unique_key="job-3")
        assert (again.job_id, again.deduplicated) == ("job-3", True)
        assert proxy.answers_lost == 3
        jobs = store.list_assigns(limit=10)
        assert sorted(j.job_id for j in jobs) == ["job-1", "job-2", "job-3"]
        assert store.get_hub_stats()["total_messages"] == 2  # job-1's, job-3's dispatch


def test_a_lost_commit_answer_retried_with_the_callers_id_writes_one_row(
        pg_url: URL, proxy: Proxy) -> None:
    with HubStore.open(_through(proxy, pg_url)) as store:
        proxy.lose_answer_after(b"COMMIT")
        with pytest.raises(DatabaseUnavailable) as caught:
            store.audit_log("event", "lead", "w1", "t", payload={"n": 1}, id="msg-1")
        assert caught.value.outcome_unknown
        again = store.audit_log("event", "lead", "w1", "t", payload={"n": 1}, id="msg-1")
        assert (again.id, again.deduplicated) == ("msg-1", True)

        proxy.lose_answer_after(b"COMMIT")
        with pytest.raises(DatabaseUnavailable) as caught:
            store.insert_human_request("lead", "approval", "ship?", request_id="ask-1")
        assert caught.value.outcome_unknown
        asked = store.insert_human_request("lead", "approval", "ship?", request_id="ask-1")
        assert (asked.request_id, asked.deduplicated) == ("ask-1", True)
        assert proxy.answers_lost == 2
        assert store.get_hub_stats()["total_messages"] == 1
        assert [r.request_id for r in store.get_pending_human_requests()] == ["ask-1"]


def test_only_a_commit_leaves_the_outcome_unknown(store: HubStore) -> None:
    """SQLite: no server to lose; a failure there is never outcome-unknown."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL: the tests above")
    with pytest.raises(HubStoreError) as caught, store.unit_of_work() as uow:
        uow.register_agent("lost", "codex")
        uow.driver.close()
    assert not getattr(caught.value, "outcome_unknown", False)


# --- several servers ------------------------------------------------------------------


def test_the_host_that_took_the_last_connection_is_tried_first(pg_url: URL) -> None:
    with socket.socket() as silent:  # accepts (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        dead = silent.getsockname()[1]
        url = pg_url.set(host=None, port=None).update_query_dict({
            "host": [f"127.0.0.1:{dead}", f"{pg_url.host}:{pg_url.port}"],
            "connect_timeout": "2"})
        began = time.monotonic()
        with HubStore.open(url) as store:
            assert time.monotonic() - began >= 2  # the first connection tried both
            ready = threading.Barrier(3)
            took: list[float] = []

            def read() -> None:  # two at once: two new connections
                with store.unit_of_work(write=False) as uow:
                    ready.wait(10)
                    started = time.monotonic()
                    uow.connection.scalar(text("SELECT 1"))
                    took.append(time.monotonic() - started)

            began = time.monotonic()
            threads = [threading.Thread(target=read) for _ in range(2)]
            for thread in threads:
                thread.start()
            ready.wait(10)
            for thread in threads:
                thread.join(10)
            assert time.monotonic() - began < 1.5  # none waited for the silent host
            assert len(took) == 2
