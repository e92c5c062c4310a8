"""PostgreSQL behind PgBouncer in transaction pooling mode (issue 12 item 7).

A PgBouncer of the test's own (Debian's ``pgbouncer``) on a free local port, pooling
transactions to the test server. The store's URL says ``?pgbouncer=true``: no
server-side prepared statements (psycopg would prepare a statement run five times, and
the next transaction may find itself on a server connection that does not have it).
LISTEN needs a direct connection: ``listen_url``. Skipped when the binary is missing,
except with CI=true (then it fails: .ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.errors import ValidationError
from hubstore.urls import behind_pgbouncer, resolve_url
from tests.conftest import PostgresDatabases
from tests.helpers import present

BINARY = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Bouncer:
    """A running PgBouncer in transaction pooling mode, in a temporary folder."""

    def __init__(self, server: URL) -> None:
        assert BINARY is not None
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="hubstore-pgbouncer-"))
        (self.dir / "userlist.txt").write_text(f'"{server.username}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(f"""\
[databases]
* = host={server.host} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir / "userlist.txt"}
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
logfile = {self.dir / "pgbouncer.log"}
""")
        command = [BINARY, "-q", str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            os.chown(self.dir, *_postgres_ids())
            for path in self.dir.iterdir():
                os.chown(path, *_postgres_ids())
            command[1:1] = ["-u", "postgres"]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"pgbouncer did not start: {self.log()}") from None
                time.sleep(0.05)

    def url(self, database: URL) -> URL:
        """``database`` through this PgBouncer, marked as such."""
        return database.set(host="127.0.0.1", port=self.port).update_query_dict(
            {"pgbouncer": "true"})

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _postgres_ids() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam("postgres")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture
def direct(postgres: PostgresDatabases, pg_template: str) -> Iterator[URL]:
    """A migrated database of this test's own, reached directly."""
    url = postgres.create(template=pg_template)
    yield url
    postgres.drop(url)


@pytest.fixture
def bouncer(postgres: PostgresDatabases) -> Iterator[Bouncer]:
    if BINARY is None:
        message = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    running = Bouncer(postgres.admin.url)
    try:
        yield running
    finally:
        running.stop()


def test_the_pgbouncer_option_is_read_and_checked() -> None:
    assert behind_pgbouncer(resolve_url("postgresql://u@h/db?pgbouncer=true"))
    assert not behind_pgbouncer(resolve_url("postgresql://u@h/db?pgbouncer=0"))
    assert not behind_pgbouncer(resolve_url("postgresql://u@h/db"))
    with pytest.raises(ValidationError, match="pgbouncer"):
        resolve_url("postgresql://u@h/db?pgbouncer=maybe")


def work(store: HubStore, name: str, rounds: int) -> list[str]:
    """A few hundred statements of every kind: writes, reads, claims, a unit of work."""
    claimed = []
    store.register_agent(name, "codex", topics=["t"])
    for i in range(rounds):
        store.refresh_lease(name)
        store.audit_log("event", "lead", name, "t", payload={"i": i})
        # this round's message and every earlier round's two (it and the job's handoff)
        assert len(store.poll_for_agent(name, max_messages=100)) == min(2 * i + 1, 100)
        job = store.assign_async("lead", name, task=f"job {i}")
        got = present(store.claim_next_assign(name))
        assert got.job_id == job.job_id
        store.report_assign_result(job.job_id, "succeeded", worker_agent=name)
        with store.unit_of_work() as uow:
            uow.update_agent_topics(name, ["t", f"t{i % 3}"])
            uow.audit_log("event", name, "lead", "t", payload={"done": i})
        claimed.append(got.job_id)
    return claimed


def test_a_store_through_pgbouncer_in_transaction_mode(bouncer: Bouncer, direct: URL) -> None:
    url = bouncer.url(direct)
    with HubStore.open(url) as first, HubStore.open(url) as second:
        results: dict[str, list[str]] = {}
        errors: list[BaseException] = []

        def run(store: HubStore, name: str) -> None:
            try:
                results[name] = work(store, name, 30)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s, n))
                   for s, n in ((first, "w1"), (second, "w2"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, f"{errors[0]!r}\n{bouncer.log()}"
        assert {name: len(ids) for name, ids in results.items()} == {"w1": 30, "w2": 30}
        stats = first.get_hub_stats()
        # per round: two audit_log calls, the handoff and the completed event
        assert stats["total_messages"] == 2 * 30 * 4
        assert len(first.list_assigns(status="succeeded", limit=100)) == 60
        with first.unit_of_work() as uow:  # and the server saw no prepared statement
            prepared = uow.connection.execute(text("SELECT count(*) FROM pg_prepared_statements"))
            assert prepared.scalar() == 0


def test_waiting_through_pgbouncer_listens_on_the_direct_url(bouncer: Bouncer,
                                                             direct: URL) -> None:
    url = bouncer.url(direct)
    with HubStore.open(url) as waiter, HubStore.open(url) as producer:
        waiter.listen_url = direct
        assert waiter.change_watcher().signals
        threading.Timer(0.3, lambda: producer.assign_async("lead", "w1", task="t")).start()
        started = time.monotonic()
        job = present(waiter.wait_for_assign("w1", timeout_s=5))
        assert job.status == "running"
        assert time.monotonic() - started < 1.5
        feed = waiter.message_feed("lead")
        threading.Timer(0.2, lambda: producer.report_assign_result(
            job.job_id, "succeeded", worker_agent="w1")).start()
        assert [m.payload["event"] for m in feed.next(timeout_s=5)] == ["completed"]


def test_without_a_listen_url_waiters_look_at_the_tables_instead(bouncer: Bouncer,
                                                                 direct: URL) -> None:
    with HubStore.open(bouncer.url(direct)) as waiter:
        assert not waiter.change_watcher().signals  # LISTEN through PgBouncer: never
        threading.Timer(0.2, lambda: waiter.assign_async("lead", "w1", task="t")).start()
        assert present(waiter.wait_for_assign("w1", timeout_s=5)).status == "running"


async def _async_round(url: URL, direct: URL) -> list[str]:
    async with await AsyncHubStore.open(url, listen_url=direct) as store:
        await store.register_agent("a1", "codex")
        for i in range(10):
            await store.audit_log("event", "lead", "a1", "t", payload={"i": i})
            await store.poll_for_agent("a1")
        job = await store.assign_async("lead", "a1", task="t")
        got = present(await store.wait_for_assign("a1", timeout_s=2))
        assert got.job_id == job.job_id
        async with store.unit_of_work() as uow:
            await uow.report_assign_result(job.job_id, "succeeded", worker_agent="a1")
        return [m.type for m in await store.poll_for_agent("lead")]


def test_the_async_store_through_pgbouncer(bouncer: Bouncer, direct: URL) -> None:
    import asyncio

    assert asyncio.run(_async_round(bouncer.url(direct), direct)) == ["event"]


def test_migrations_through_pgbouncer(bouncer: Bouncer, postgres: PostgresDatabases) -> None:
    """Migrating an empty database through PgBouncer (the migrations' lock is held per
    transaction), then opening it there."""
    from hubstore import migrations

    empty = postgres.create()
    try:
        url = bouncer.url(empty)
        migrations.upgrade(url)
        assert migrations.current(url) == migrations.head()
        with HubStore.open(url) as store:
            store.register_agent("a1", "codex")
            assert present(store.get_agent("a1")).cli == "codex"
    finally:
        bouncer.stop()  # its server connections would keep the database from being dropped
        postgres.drop(empty)
