"""The peers lane's systems: hubstore's assign jobs, pgqueuer and procrastinate.

Each is driven through its own public API, as its documentation shows: install its
schema, enqueue no-op jobs (one per call, or ten per call where it has a batch call),
claim and complete them until its queue is empty (one at a time, or ten at a time where
it has a batch claim), and read back from its own tables that each job was completed
exactly once. Handlers do nothing but note the job id they were given.

pgqueuer and procrastinate are optional (``pip install -e ".[bench-peers]"``).
procrastinate runs on psycopg 3, as hubstore does; pgqueuer on asyncpg, its README's
driver (see PgQueuer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from importlib import metadata, util
from typing import Any

from sqlalchemy import make_url

from hubstore import HubStore

ENTRYPOINT = "noop"  # pgqueuer's entrypoint and procrastinate's task
SUPERVISOR = "bench-lead"  # hubstore: who assigns the jobs
WORKER = "bench-worker"  # hubstore: the one worker every job is queued for
BATCH = 10  # jobs per call in the batch lanes

#: The lanes, each measured in jobs/s: enqueue 1 or BATCH jobs per call, claim+complete
#: 1 or BATCH jobs per claim.
LANES = ("enqueue_1", f"enqueue_{BATCH}", "claim_1", f"claim_{BATCH}")

#: The calls hubstore's batch lanes use once HubStore has them (found with hasattr):
#: assign_many(supervisor_agent, worker_agent, [{"task": ...}, ...]) -> [AssignJob, ...];
#: claim_next_assigns(worker_agent, limit) -> [AssignJob, ...] (empty when none is
#: queued); report_assign_results([{"job_id", "status", "attempt"}, ...],
#: worker_agent=...). The signatures are assumed: Hubstore below is the one place to
#: adjust when the calls land.
HUBSTORE_BATCH_CALLS = ("assign_many", "claim_next_assigns", "report_assign_results")


class Clock:
    """One process's timed section: ``start()`` once connected (in a worker it first
    says it is ready and waits for the parent's start signal), ``stop()`` when its last
    job is done, before it disconnects. With ``stopped`` and ``release``, ``stop()``
    then says so and holds the process (and its connections) until the parent has read
    the server's CPU of the phase."""

    def __init__(self, ready: Any = None, go: Any = None, stopped: Any = None,
                 release: Any = None) -> None:
        self.ready, self.go = ready, go
        self.stopped, self.release = stopped, release
        self.signalled = False
        self.t0 = self.t1 = self.c0 = self.c1 = 0.0

    def start(self) -> None:
        if self.ready is not None:
            self.ready.release()
            self.signalled = True
            self.go.wait()
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.t1, self.c1 = time.perf_counter(), time.process_time()
        if self.stopped is not None:
            self.stopped.release()
            self.release.wait(120)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    @property
    def cpu_seconds(self) -> float:
        """The process's own CPU over its timed section."""
        return self.c1 - self.c0


@dataclass
class Done:
    """What one process did: the job ids (enqueued, or handled), and the
    synchronous_commit its own database session saw."""

    ids: list[str]
    synchronous_commit: str


@dataclass
class Checks:
    """Named checks of one run, each True when it held; ``seen`` says what was read."""

    passed: dict[str, bool] = field(default_factory=dict)
    seen: dict[str, Any] = field(default_factory=dict)

    def expect(self, name: str, got: Any, want: Any) -> None:
        self.passed[name] = got == want
        if got != want:
            self.seen[name] = {"got": _plain(got), "want": _plain(want)}


def _plain(value: Any) -> Any:
    """A value the JSON line can hold (sets of ids shown by their size)."""
    if isinstance(value, set | frozenset):
        return f"{len(value)} distinct ids"
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(sql).fetchall()]


def sa_url(dsn: str) -> str:
    """A libpq URL as SQLAlchemy takes it with psycopg 3."""
    return make_url(dsn).set(drivername="postgresql+psycopg").render_as_string(
        hide_password=False)


class Peer:
    """One system of the lane. ``calls`` names the call behind each lane (None: the
    system has no such call, the lane shows n/a)."""

    name = ""
    distribution = ""  # the distribution (PyPI name) the system comes from

    def missing(self) -> str | None:
        """Why the system cannot run here (None: it can)."""
        if util.find_spec(self.distribution) is None:
            return f"{self.distribution} is not installed (pip install -e \".[bench-peers]\")"
        return None

    def version(self) -> str:
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return "?"

    def calls(self) -> dict[str, str | None]:
        raise NotImplementedError

    def install(self, dsn: str) -> None:
        """Install the system's schema in the empty database at ``dsn`` (untimed)."""
        raise NotImplementedError

    def enqueue(self, dsn: str, jobs: int, batch: int, clock: Clock) -> Done:
        """Enqueue ``jobs`` jobs, ``batch`` per call (timed by ``clock``)."""
        raise NotImplementedError

    def work(self, dsn: str, batch: int, clock: Clock) -> Done:
        """One worker: claim and complete jobs, ``batch`` per claim, until none is left
        (timed by ``clock``); the ids its handler was given."""
        raise NotImplementedError

    def check(self, conn: Any, enqueued: Collection[str], claimed: bool) -> Checks:
        """Read back from the system's own tables: every job completed exactly once
        (``claimed``), else every job queued once."""
        raise NotImplementedError


#: The limited lanes' bound: at most this many jobs running at once, in all workers
#: together (hubstore's assign limit; pgqueuer's entrypoint concurrency_limit).
LIMIT = 2


class Hubstore(Peer):
    """hubstore's assign jobs: assign_async, claim_next_assign, report_assign_result."""

    name = distribution = "hubstore"
    #: The assign limit every job counts against (None: the jobs are unlimited).
    limit: int | None = None

    def calls(self) -> dict[str, str | None]:
        def has(call: str) -> bool:
            return hasattr(HubStore, call)

        report = ("report_assign_results" if has("report_assign_results")
                  else "report_assign_result per job")
        return {
            "enqueue_1": "assign_async",
            f"enqueue_{BATCH}": "assign_many" if has("assign_many") else None,
            "claim_1": "claim_next_assign + report_assign_result",
            f"claim_{BATCH}": (f"claim_next_assigns + {report}"
                               if has("claim_next_assigns") else None),
        }

    def install(self, dsn: str) -> None:
        with HubStore.open(sa_url(dsn), auto_migrate=True) as store:
            if self.limit is not None:
                store.set_assign_limit(ENTRYPOINT, max_running=self.limit)

    def _fields(self) -> dict[str, Any]:
        return {} if self.limit is None else {"limit_key": ENTRYPOINT}

    @staticmethod
    def _setting(store: HubStore) -> str:
        with store.engine.connect() as conn:  # also connects the store's pool
            return str(conn.exec_driver_sql("SHOW synchronous_commit").scalar_one())

    def enqueue(self, dsn: str, jobs: int, batch: int, clock: Clock) -> Done:
        ids: list[str] = []
        with HubStore.open(sa_url(dsn)) as store:
            setting = self._setting(store)
            clock.start()
            if batch == 1:
                for k in range(jobs):
                    ids.append(store.assign_async(SUPERVISOR, WORKER, task=f"job{k}",
                                                  **self._fields()).job_id)
            else:
                assign_many = store.assign_many  # type: ignore[attr-defined, unused-ignore]
                for first in range(0, jobs, batch):
                    made = assign_many(SUPERVISOR, WORKER, [
                        {"task": f"job{k}", **self._fields()}
                        for k in range(first, min(jobs, first + batch))])
                    ids.extend(job.job_id for job in made)
            clock.stop()
        return Done(ids, setting)

    def work(self, dsn: str, batch: int, clock: Clock) -> Done:
        ids: list[str] = []
        with HubStore.open(sa_url(dsn)) as store:
            setting = self._setting(store)
            clock.start()
            if batch == 1:
                while (job := self._claim_one(store)) is not None:
                    store.report_assign_result(job.job_id, "succeeded", worker_agent=WORKER,
                                               attempt=job.attempt)
                    ids.append(job.job_id)
            else:
                report_all = getattr(store, "report_assign_results", None)
                while claimed := self._claim_many(store, batch):
                    if report_all is not None:
                        report_all([{"job_id": job.job_id, "status": "succeeded",
                                     "attempt": job.attempt} for job in claimed],
                                   worker_agent=WORKER)
                    else:
                        for job in claimed:
                            store.report_assign_result(job.job_id, "succeeded",
                                                       worker_agent=WORKER, attempt=job.attempt)
                    ids.extend(job.job_id for job in claimed)
            clock.stop()
        return Done(ids, setting)

    def _claim_one(self, store: HubStore) -> Any:
        """The next job; under a limit, a claim that finds none waits for room until
        no job is left queued (an unlimited claim that finds none: the queue is empty)."""
        while (job := store.claim_next_assign(WORKER)) is None and self._left(store):
            if (job := store.wait_for_assign(WORKER, timeout_s=1)) is not None:
                break
        return job

    def _claim_many(self, store: HubStore, batch: int) -> list[Any]:
        """As _claim_one, ``batch`` at a time."""
        claim = store.claim_next_assigns  # type: ignore[attr-defined, unused-ignore]
        while not (jobs := claim(WORKER, batch)) and self._left(store):
            if jobs := store.wait_for_assigns(WORKER, batch, timeout_s=1):
                break
        return list(jobs)

    def _left(self, store: HubStore) -> bool:
        """Whether a limited lane's claim that found nothing should wait for room: a job
        is still queued (one row read by the status index; the hub's figures would sum
        their pending count deltas, thousands of rows in a run like this one)."""
        return self.limit is not None and bool(store.list_assigns(status="queued", limit=1))

    def check(self, conn: Any, enqueued: Collection[str], claimed: bool) -> Checks:
        jobs, want = len(enqueued), set(enqueued)
        checks = Checks()
        checks.expect("table_ids_are_the_enqueued",
                      {r[0] for r in rows(conn, "SELECT job_id FROM assign_jobs")}, want)
        events = rows(conn, "SELECT count(*), count(DISTINCT payload_json->>'job_id') FROM "
                            "messages WHERE topic = 'assign.result' AND "
                            "payload_json->>'event' = 'completed'")[0]
        if claimed:
            checks.expect("all_succeeded_on_attempt_1", rows(
                conn, "SELECT status, attempt, count(*) FROM assign_jobs GROUP BY 1, 2"),
                [("succeeded", 1, jobs)])
            checks.expect("one_completed_event_per_job", events, (jobs, jobs))
        else:
            checks.expect("all_queued", rows(
                conn, "SELECT status, count(*) FROM assign_jobs GROUP BY 1"), [("queued", jobs)])
            checks.expect("no_completed_event", events, (0, 0))
        return checks


class HubstoreLimited(Hubstore):
    """hubstore's assign jobs, every one under an assign limit of LIMIT running at once."""

    name = "hubstore-limited"
    limit = LIMIT

    def calls(self) -> dict[str, str | None]:
        return {lane: None if call is None else f"{call}, limit_key (max_running={LIMIT})"
                for lane, call in super().calls().items()}


class PgQueuer(Peer):
    """pgqueuer on asyncpg, as its README sets it up: Queries.enqueue, QueueManager.run in
    drain mode (its dequeue batch size is the claim batch); completions go through its
    status-log buffer, which flushes every batch_size jobs and when run() ends.

    Not its PsycopgDriver: that one's NOTIFY watcher holds the connection for up to a
    second per idle poll, which stalls every query once the queue runs dry (seconds per
    worker at the end of the drain, measured here)."""

    name = distribution = "pgqueuer"
    #: Its entrypoint's concurrency_limit (0: unlimited).
    limit = 0

    def missing(self) -> str | None:
        if util.find_spec("asyncpg") is None and util.find_spec("pgqueuer") is not None:
            return "asyncpg is not installed (pip install -e \".[bench-peers]\")"
        return super().missing()

    def calls(self) -> dict[str, str | None]:
        return {
            "enqueue_1": "Queries.enqueue(entrypoint, payload)",
            f"enqueue_{BATCH}": f"Queries.enqueue([{BATCH} entrypoints], [payloads], "
                                "[priorities])",
            "claim_1": "QueueManager.run(batch_size=1, mode=drain)",
            f"claim_{BATCH}": f"QueueManager.run(batch_size={BATCH}, mode=drain)",
        }

    @staticmethod
    async def _connect(dsn: str) -> tuple[Any, str]:
        import asyncpg  # type: ignore[import-untyped, import-not-found, unused-ignore]

        conn = await asyncpg.connect(dsn)
        return conn, str(await conn.fetchval("SHOW synchronous_commit"))

    def install(self, dsn: str) -> None:
        async def install() -> None:
            from pgqueuer import Queries  # type: ignore[import-not-found, unused-ignore]

            conn, _ = await self._connect(dsn)
            try:
                await Queries.from_asyncpg_connection(conn).install()
            finally:
                await conn.close()

        asyncio.run(install())

    def enqueue(self, dsn: str, jobs: int, batch: int, clock: Clock) -> Done:
        async def enqueue() -> Done:
            from pgqueuer import Queries  # type: ignore[import-not-found, unused-ignore]

            conn, setting = await self._connect(dsn)
            try:
                queries = Queries.from_asyncpg_connection(conn)
                ids: list[str] = []
                await asyncio.to_thread(clock.start)
                for first in range(0, jobs, batch):
                    m = min(batch, jobs - first)
                    if batch == 1:
                        made = await queries.enqueue(ENTRYPOINT, None)
                    else:
                        made = await queries.enqueue([ENTRYPOINT] * m, [None] * m, [0] * m)
                    ids.extend(map(str, made))
                clock.stop()
            finally:
                await conn.close()
            return Done(ids, setting)

        return asyncio.run(enqueue())

    def work(self, dsn: str, batch: int, clock: Clock) -> Done:
        async def work() -> Done:
            from pgqueuer import Job, Queries, QueueManager  # type: ignore[import-not-found, unused-ignore]
            from pgqueuer.types import QueueExecutionMode  # type: ignore[import-not-found, unused-ignore]

            conn, setting = await self._connect(dsn)
            ids: list[str] = []
            try:
                qm = QueueManager(Queries.from_asyncpg_connection(conn))

                async def noop(job: Job) -> None:
                    ids.append(str(job.id))

                # its @qm.entrypoint decorator, called (an untyped decorator to mypy when
                # pgqueuer is not installed)
                qm.entrypoint(ENTRYPOINT, concurrency_limit=self.limit)(noop)
                await asyncio.to_thread(clock.start)
                await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
                clock.stop()
            finally:
                await conn.close()
            return Done(ids, setting)

        return asyncio.run(work())

    def check(self, conn: Any, enqueued: Collection[str], claimed: bool) -> Checks:
        jobs, want = len(enqueued), set(enqueued)
        checks = Checks()
        queue = rows(conn, "SELECT status::text, count(*) FROM pgqueuer GROUP BY 1")
        log = rows(conn, "SELECT status::text, count(*), count(DISTINCT job_id) FROM "
                         "pgqueuer_log GROUP BY 1 ORDER BY 1")
        if claimed:  # its log has a row per job and move: queued, picked, successful
            checks.expect("queue_empty", queue, [])
            checks.expect("one_log_row_per_job_and_move", log, [
                (status, jobs, jobs) for status in ("picked", "queued", "successful")])
            checks.expect("log_ids_are_the_enqueued", {str(r[0]) for r in rows(
                conn, "SELECT job_id FROM pgqueuer_log WHERE status = 'successful'")}, want)
        else:
            checks.expect("all_queued", queue, [("queued", jobs)])
            checks.expect("queue_ids_are_the_enqueued", {str(r[0]) for r in rows(
                conn, "SELECT id FROM pgqueuer")}, want)
            checks.expect("log_has_only_the_queued", log, [("queued", jobs, jobs)])
        return checks


class PgQueuerLimited(PgQueuer):
    """pgqueuer, its entrypoint's concurrency_limit LIMIT (enforced in the database,
    across its workers, as hubstore's assign limit is)."""

    name = "pgqueuer-limited"
    limit = LIMIT

    def calls(self) -> dict[str, str | None]:
        return {lane: None if call is None else f"{call}, concurrency_limit={LIMIT}"
                for lane, call in super().calls().items()}


class Procrastinate(Peer):
    """procrastinate: an App on a PsycopgConnector, Task.defer_async and
    batch_defer_async, App.run_worker_async(wait=False) (it fetches one job at a time:
    no batch claim)."""

    name = distribution = "procrastinate"

    def calls(self) -> dict[str, str | None]:
        return {
            "enqueue_1": "Task.defer_async",
            f"enqueue_{BATCH}": f"Task.batch_defer_async ({BATCH} jobs)",
            "claim_1": "App.run_worker_async(concurrency=1, wait=False)",
            f"claim_{BATCH}": None,
        }

    @staticmethod
    def _app(dsn: str, handled: list[str]) -> tuple[Any, Any]:
        """The app and its no-op task, whose handler notes each job id in ``handled``."""
        from procrastinate import App, JobContext, PsycopgConnector  # type: ignore[import-not-found, unused-ignore]

        app = App(connector=PsycopgConnector(conninfo=dsn))

        async def noop(context: JobContext) -> None:
            assert context.job.id is not None
            handled.append(str(context.job.id))

        # its @app.task decorator, called (untyped to mypy when procrastinate is not here)
        return app, app.task(name=ENTRYPOINT, pass_context=True)(noop)

    @staticmethod
    async def _setting(app: Any) -> str:
        row = await app.connector.execute_query_one_async("SHOW synchronous_commit")
        return str(row["synchronous_commit"])

    def install(self, dsn: str) -> None:
        async def install() -> None:
            app, _ = self._app(dsn, [])
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(install())

    def enqueue(self, dsn: str, jobs: int, batch: int, clock: Clock) -> Done:
        async def enqueue() -> Done:
            app, noop = self._app(dsn, [])
            ids: list[str] = []
            async with app.open_async():
                setting = await self._setting(app)
                await asyncio.to_thread(clock.start)
                for first in range(0, jobs, batch):
                    if batch == 1:
                        ids.append(str(await noop.defer_async()))
                    else:
                        made = await noop.batch_defer_async(*[{}] * min(batch, jobs - first))
                        ids.extend(map(str, made))
                clock.stop()
            return Done(ids, setting)

        return asyncio.run(enqueue())

    def work(self, dsn: str, batch: int, clock: Clock) -> Done:
        assert batch == 1, "procrastinate's worker fetches one job at a time"

        async def work() -> Done:
            ids: list[str] = []
            app, _ = self._app(dsn, ids)
            async with app.open_async():
                setting = await self._setting(app)
                await asyncio.to_thread(clock.start)
                # every job is queued before the start: nothing to listen for
                await app.run_worker_async(concurrency=1, wait=False, listen_notify=False,
                                           install_signal_handlers=False)
                clock.stop()
            return Done(ids, setting)

        return asyncio.run(work())

    def check(self, conn: Any, enqueued: Collection[str], claimed: bool) -> Checks:
        jobs, want = len(enqueued), set(enqueued)
        checks = Checks()
        checks.expect("table_ids_are_the_enqueued", {str(r[0]) for r in rows(
            conn, "SELECT id FROM procrastinate_jobs")}, want)
        statuses = rows(conn, "SELECT status::text, count(*) FROM procrastinate_jobs "
                              "GROUP BY 1")
        events = {r[0]: (r[1], r[2]) for r in rows(
            conn, "SELECT type::text, count(*), count(DISTINCT job_id) FROM "
                  "procrastinate_events GROUP BY 1")}
        if claimed:
            checks.expect("all_succeeded", statuses, [("succeeded", jobs)])
            checks.expect("one_started_event_per_job", events.get("started"), (jobs, jobs))
            checks.expect("one_succeeded_event_per_job", events.get("succeeded"),
                          (jobs, jobs))
        else:
            checks.expect("all_todo", statuses, [("todo", jobs)])
            checks.expect("no_started_event", events.get("started"), None)
        return checks


PEERS: dict[str, Peer] = {peer.name: peer for peer in (
    Hubstore(), PgQueuer(), Procrastinate(), HubstoreLimited(), PgQueuerLimited())}


def quiet_logging() -> None:
    """The peers' own progress logs (a line per job at INFO) left out."""
    import logging

    for name in ("pgqueuer", "procrastinate", "psycopg", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)

