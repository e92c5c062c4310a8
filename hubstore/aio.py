"""The asyncio API: :class:`AsyncHubStore`, every store method as a coroutine.

How it runs: the sync store does the work on *lanes*, a few threads of the store's own,
each a queue of one worker. A call takes a free lane, runs the sync method there and
wakes the awaiting task when it is done; the event loop never waits for the database.
A unit of work keeps one lane from ``__aenter__`` to ``__aexit__``: its connection, its
transaction and SQLite's per-thread connections stay on that thread, and store calls
made by the same task while it is open run there too (joining it as savepoints, as in
the sync API). Lanes are used on both dialects. On PostgreSQL the alternative is
psycopg's async driver through SQLAlchemy's asyncio extension (greenlets running the
sync code over an AsyncEngine); it would need a second engine and every statement
would still hop between greenlets, and the lanes measured well: see docs/waiting.md and
``benchmarks/bench_store.py --async``.

Waiting does not hold a lane: ``wait_for_assign`` and ``feed.next`` wait on the event
loop for the store's change watcher (:mod:`hubstore.signals`) and take a lane only to
look at the tables. Cancelled, they take nothing:

- ``wait_for_assign`` claims in a transaction that commits only once the loop has
  accepted the job; cancelled before that, the transaction rolls back. Cancelled during
  the commit itself (a millisecond), the job is put back to queued afterwards.
- ``feed.next`` reads without moving the feed; the position moves, in the same step of
  the loop that returns the messages, only when they are delivered.

Listeners subscribed with :meth:`AsyncHubStore.on_assign_status_change` run on the
event loop after the commit (coroutine functions as tasks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from sqlalchemy.engine import URL

from hubstore import assign_rules as rules
from hubstore import signals
from hubstore.aio_methods import AsyncOperations
from hubstore.database import AssignListener
from hubstore.engine import BUSY_TIMEOUT_MS
from hubstore.errors import StoreClosed
from hubstore.models import AssignJob, Message
from hubstore.services.assigns.batches import MAX_BATCH
from hubstore.services.assigns.claims import claimer
from hubstore.services.assigns.moves import put_back_claim
from hubstore.services.waiting import (
    MessageFeed,
    check_batch,
    deadline_after,
    look_for_result,
    result_keys,
    wait_plan,
    wait_s,
)
from hubstore.store import HubStore
from hubstore.types import AssignEvent
from hubstore.validation import optional_listen_url, require_callable, require_id, require_int

if TYPE_CHECKING:
    from hubstore.operations import HubOperations
    from hubstore.uow import UnitOfWork

__all__ = ["AsyncHubStore", "AsyncMessageFeed", "AsyncUnitOfWork"]

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Lanes per store unless ``open(lanes=...)`` says otherwise: SQLite has one writer at a
#: time (more lanes only queue on its lock); PostgreSQL's pool holds 5 + 10 connections.
DEFAULT_LANES = {"sqlite": 4, "postgresql": 8}
#: How long a claiming transaction waits for the event loop to accept its job before it
#: rolls back (the loop answers within one of its steps unless something blocks it).
ACCEPT_TIMEOUT_S = 5.0


class _Declined(Exception):
    """The event loop did not take the claimed job: roll the claim back."""


class _Lane:
    """One thread, running one call at a time, in the order they came.

    A call's result reaches the event loop in one ``call_soon_threadsafe`` (with what
    must happen once the call has ended: giving the lane back), so a call costs the
    loop one wake-up; concurrent.futures with asyncio.wrap_future would cost two.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            del job  # nothing of the call stays referenced while the lane waits

    def run(self, loop: asyncio.AbstractEventLoop, context: contextvars.Context,
            then: Callable[[], None] | None, fn: Callable[_P, _T], /,
            *args: _P.args, **kwargs: _P.kwargs) -> asyncio.Future[_T]:
        """Queue ``fn(*args, **kwargs)`` (in ``context``); ``then()`` runs on the loop
        when it has ended, even if the returned future was cancelled meanwhile."""
        future: asyncio.Future[_T] = loop.create_future()

        def job() -> None:
            try:
                result = context.run(fn, *args, **kwargs)
            except BaseException as exc:
                _call_soon(loop, _ended, future, None, exc, then)
            else:
                _call_soon(loop, _ended, future, result, None, then)

        self._jobs.put(job)
        return future

    def stop(self) -> None:
        """End the thread once the calls queued before have run."""
        self._jobs.put(None)


def _ended(future: asyncio.Future[_T], result: _T, exc: BaseException | None,
           then: Callable[[], None] | None) -> None:
    if then is not None:
        then()
    if future.done():  # cancelled: nobody waits for the result
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class _Lanes:
    """A store's lanes: handed to one call (or one unit of work) at a time."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._idle: list[_Lane] = []
        self._all: list[_Lane] = []
        self._waiting: deque[asyncio.Future[_Lane]] = deque()
        self._closed = False

    async def acquire(self) -> _Lane:
        if self._closed:
            raise StoreClosed()
        if self._idle:
            return self._idle.pop()
        if len(self._all) < self.size:
            lane = _Lane(f"hubstore-lane-{len(self._all)}")
            self._all.append(lane)
            return lane
        waiter: asyncio.Future[_Lane] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over as we were cancelled
            raise

    def release(self, lane: _Lane) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(lane)
                return
        self._idle.append(lane)

    def shutdown(self) -> list[_Lane]:
        self._closed = True
        lanes, self._all, self._idle = self._all, [], []
        while self._waiting:
            self._waiting.popleft().cancel()
        return lanes


def _stop_lanes(lanes: _Lanes) -> None:
    for lane in lanes.shutdown():
        lane.stop()


async def _finish(future: asyncio.Future[_T]) -> _T:
    """Await ``future`` to its end even when cancelled meanwhile; then re-raise the
    cancellation (the result is lost to the caller but the work is done)."""
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    return future.result()


class AsyncHubStore(AsyncOperations):
    """The hub's store for asyncio programs: every store method as a coroutine.

    >>> async with await AsyncHubStore.open("sqlite:///hub.db") as store:  # doctest: +SKIP
    ...     async with store.unit_of_work() as uow:
    ...         job = await uow.assign_async("lead", "w1", task="t")
    """

    def __init__(self, store: HubStore, *, lanes: int | None = None) -> None:
        #: The sync store doing the work (its methods block: call them from a thread).
        self.sync = store
        self.url: URL = store.url
        self.dialect: str = store.dialect
        self._lanes = _Lanes(lanes or DEFAULT_LANES.get(self.dialect, 4))
        self._current: contextvars.ContextVar[AsyncUnitOfWork | None] = contextvars.ContextVar(
            f"hubstore_async_uow_{id(self):x}", default=None)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        # A store dropped without close() still ends its lanes' threads.
        weakref.finalize(self, _stop_lanes, self._lanes)

    @classmethod
    async def open(cls, url: str | URL | None = None, *, auto_migrate: bool = False,
                   busy_timeout_ms: int = BUSY_TIMEOUT_MS, lanes: int | None = None,
                   listen_url: URL | str | bool | None = None,
                   **engine_options: Any) -> AsyncHubStore:
        """:meth:`HubStore.open` off the event loop (same arguments and errors).

        ``lanes`` bounds the threads doing the store's work; ``listen_url`` is
        :attr:`HubStore.listen_url` (a direct URL for LISTEN behind PgBouncer).
        """
        lanes = None if lanes is None else require_int(lanes, "lanes", minimum=0)
        optional_listen_url(listen_url)
        store = await asyncio.to_thread(HubStore.open, url, auto_migrate=auto_migrate,
                                        busy_timeout_ms=busy_timeout_ms, **engine_options)
        if listen_url is not None:
            store.listen_url = listen_url
        opened = cls(store, lanes=lanes)
        opened._loop = asyncio.get_running_loop()
        return opened

    # -- running calls on lanes ------------------------------------------------------

    def _sync_ops(self) -> HubOperations:
        return self.sync

    async def _call(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
                    ) -> _T:
        """``fn(*args, **kwargs)`` on a lane; in this task's open unit of work, on its."""
        current = self._current.get()
        if current is not None and current.is_open:
            return await current._call(fn, *args, **kwargs)
        return await (await self._submit(fn, *args, **kwargs))

    async def _submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
                      ) -> asyncio.Future[_T]:
        """Start ``fn`` on a free lane; the lane is free again when ``fn`` ends."""
        loop = self._loop_now()
        lane = await self._lanes.acquire()
        try:
            return lane.run(loop, contextvars.copy_context(),
                            lambda: self._lanes.release(lane), fn, *args, **kwargs)
        except BaseException:
            self._lanes.release(lane)
            raise

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        return loop

    async def run_sync(self, fn: Callable[[HubStore], _T]) -> _T:
        """``fn(store)`` with the sync store, on a lane (for what has no coroutine)."""
        require_callable(fn, "fn")
        return await self._call(fn, self.sync)

    # -- units of work ---------------------------------------------------------------

    def unit_of_work(self, write: bool = True) -> AsyncUnitOfWork:
        """An async unit of work (see :meth:`HubStore.unit_of_work`): ``async with``.

        Opened while one is open in this task, it joins it (as a savepoint when
        ``write``), as in the sync API.
        """
        return AsyncUnitOfWork(self, write, self._current.get())

    # -- listeners -------------------------------------------------------------------

    def on_assign_status_change(self, listener: AssignListener) -> Callable[[], None]:
        """Call ``listener(event, job)`` on the event loop after each committed assign
        status change (a coroutine function runs as a task). Returns the function that
        unsubscribes it."""
        require_callable(listener, "listener")
        try:  # the loop subscribing, else the one the store was opened on
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is None:
                raise RuntimeError("subscribe from the event loop that uses the store") from None
            loop = self._loop

        def deliver(event: AssignEvent, job: AssignJob) -> None:
            try:
                outcome = listener(event, job)
            except Exception:
                log.exception("assign status listener %r failed", listener)
                return
            if inspect.isawaitable(outcome):
                task = loop.create_task(_awaited(outcome))
                self._tasks.add(task)
                task.add_done_callback(self._listener_done)

        def relay(event: AssignEvent, job: AssignJob) -> None:  # on a lane
            _call_soon(loop, deliver, event, job)

        return self.sync.on_assign_status_change(relay)

    def _listener_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("assign status listener failed", exc_info=task.exception())

    # -- waiting ---------------------------------------------------------------------

    @property
    def listen_url(self) -> URL | str | bool | None:
        """Where the PostgreSQL listener connects (see :attr:`HubStore.listen_url`)."""
        return self.sync.listen_url

    @listen_url.setter
    def listen_url(self, value: URL | str | bool | None) -> None:
        self.sync.listen_url = value

    async def wait_for_assign(self, worker_agent: str, timeout_s: float | None = 30.0,
                              claimed_by: str | None = None) -> AssignJob | None:
        """:meth:`HubStore.wait_for_assign` without blocking the event loop.

        Cancelled, it raises CancelledError and takes nothing: a job it was claiming
        stays (or goes back to) queued for the next waiter.
        """
        require_id(worker_agent, "worker_agent")
        jobs = await self._wait_claiming(worker_agent, None, timeout_s, claimer(claimed_by))
        return jobs[0] if jobs else None

    async def _wait_claiming(self, worker_agent: str, limit: int | None,
                             timeout_s: float | None, claimed_by: str) -> list[AssignJob]:
        """Claim (as _claim_jobs) until a claim takes jobs, waking on the worker's
        signal or when its next scheduled job is due; [] once ``timeout_s`` passed."""
        deadline = deadline_after(timeout_s)
        async with _Wake(self, signals.ASSIGNS, [signals.worker_key(worker_agent)]) as wake:
            while True:
                wake.clear()
                jobs = await self._claim_jobs(worker_agent, limit, claimed_by)
                if jobs:
                    return jobs
                plan = await self._call(wait_plan, self.sync, worker_agent)
                wake.sub.keys = plan.keys
                if not await wake.pause(deadline, plan.due):
                    return []

    async def _claim_jobs(self, worker_agent: str, limit: int | None, claimed_by: str
                          ) -> list[AssignJob]:
        """One claim (of up to ``limit`` jobs; None: claim_next_assign's one), committed
        only once this task has taken the jobs."""
        loop = self._loop_now()
        offered: asyncio.Future[list[AssignJob]] = loop.create_future()
        accepted: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def claim() -> list[AssignJob]:
            with self.sync.unit_of_work() as uow:
                if limit is None:
                    one = uow.claim_next_assign(worker_agent, claimed_by)
                    jobs = [] if one is None else [one]
                else:
                    jobs = uow.claim_next_assigns(worker_agent, limit, claimed_by)
                if not jobs:
                    return []
                _call_soon(loop, _settle, offered, jobs)
                try:
                    keep = accepted.result(timeout=ACCEPT_TIMEOUT_S)
                except concurrent.futures.TimeoutError:
                    keep = False
                if not keep:
                    raise _Declined
            return jobs

        done = await self._submit(claim)
        try:
            either: list[asyncio.Future[Any]] = [offered, done]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Not accepted: the claim rolls back on its lane (now, or once it gets that
            # far), so there is nothing to wait for (it may wait for SQLite's lock).
            accepted.set_result(False)
            raise
        if not offered.done():  # no job (or the claim failed): nothing to accept
            offered.cancel()
            return await done
        accepted.set_result(True)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:  # during the commit: put the jobs back afterwards
            claimed = await _quietly(done)
            for job in claimed or []:
                await _finish(await self._submit(put_back_claim, self.sync, job))
            raise

    async def wait_for_assigns(self, worker_agent: str, limit: int = 10,
                               timeout_s: float | None = 30.0,
                               claimed_by: str | None = None) -> list[AssignJob]:
        """:meth:`HubStore.wait_for_assigns` without blocking the event loop (cancelled,
        it takes nothing, as wait_for_assign)."""
        require_id(worker_agent, "worker_agent")
        require_int(limit, "limit", minimum=1, maximum=MAX_BATCH)
        return await self._wait_claiming(worker_agent, limit, timeout_s,
                                         claimer(claimed_by))

    async def wait_for_result(self, job_id: str, timeout_s: float | None = 30.0
                              ) -> AssignJob | None:
        """:meth:`HubStore.wait_for_result` without blocking the event loop."""
        require_id(job_id, "job_id")
        deadline = deadline_after(timeout_s)
        job, due = await self._call(look_for_result, self.sync, job_id)
        if job.status in rules.TERMINAL:
            return job
        async with _Wake(self, signals.MESSAGES, result_keys(job)) as wake:
            while True:
                wake.clear()
                job, due = await self._call(look_for_result, self.sync, job_id)
                if job.status in rules.TERMINAL:
                    return job
                if not await wake.pause(deadline, due):
                    return None

    async def message_feed(self, agent_id: str, include_topics: Iterable[str] | None = None,
                           cursor: str | None = None) -> AsyncMessageFeed:
        """:meth:`HubStore.message_feed` as a coroutine: the feed's start is fixed when
        it returns."""
        feed = await self._call(self.sync.message_feed, agent_id, include_topics, cursor)
        return AsyncMessageFeed(self, feed)

    # -- closing ---------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the watcher, close every connection and the lanes; from then on every
        call raises StoreClosed."""
        lanes = self._lanes.shutdown()
        await asyncio.to_thread(self._close_sync, lanes)

    def _close_sync(self, lanes: list[_Lane]) -> None:
        for lane in lanes:
            lane.stop()
        for lane in lanes:
            lane.thread.join()
        self.sync.close_waiters()
        self.sync.close()

    async def __aenter__(self) -> AsyncHubStore:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class AsyncUnitOfWork(AsyncOperations):
    """One transaction on one lane: ``async with store.unit_of_work() as uow``.

    Its methods are the store methods as coroutines, run in its transaction. Leaving the
    block normally commits; an exception (cancellation included) rolls back.
    """

    def __init__(self, store: AsyncHubStore, write: bool,
                 parent: AsyncUnitOfWork | None) -> None:
        self.store = store
        self.write = write
        self._parent = parent if parent is not None and parent.is_open else None
        self._lane: _Lane | None = None
        self._context: contextvars.Context = (self._parent._context if self._parent is not None
                         else contextvars.copy_context())
        self._manager: AbstractContextManager[UnitOfWork] | object | None = None
        self._sync: UnitOfWork | None = None
        self._token: contextvars.Token[AsyncUnitOfWork | None] | None = None

    @property
    def is_open(self) -> bool:
        return self._sync is not None

    @property
    def sync(self) -> UnitOfWork:
        """The sync unit of work (use it only through :meth:`run_sync`)."""
        if self._sync is None:
            raise RuntimeError("this unit of work is not open")
        return self._sync

    def _sync_ops(self) -> HubOperations:
        return self.sync

    async def _call(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
                    ) -> _T:
        lane = self._lane
        if lane is None:
            raise RuntimeError("this unit of work is not open")
        return await lane.run(self.store._loop_now(), self._context, None, fn, *args,
                              **kwargs)

    async def run_sync(self, fn: Callable[[UnitOfWork], _T]) -> _T:
        """``fn(uow)`` with the sync unit of work, in its transaction, on its lane
        (``uow.connection`` and ``uow.session`` are usable there)."""
        return await self._call(fn, self.sync)

    def unit_of_work(self, write: bool = True) -> AsyncUnitOfWork:
        """A nested block of this unit of work (a savepoint when ``write``)."""
        return AsyncUnitOfWork(self.store, write, self)

    async def __aenter__(self) -> AsyncUnitOfWork:
        if self._manager is not None:
            raise RuntimeError("a unit of work can be entered only once")
        if self._parent is not None:
            self._lane = self._parent._lane
        else:
            self._lane = await self.store._lanes.acquire()
        assert self._lane is not None
        self._manager = _PENDING
        try:
            self._manager, self._sync = await _finish(self._lane.run(
                self.store._loop_now(), self._context, None, _enter, self.store.sync,
                self.write))
        except BaseException:
            self._sync = None
            self._free_lane()
            raise
        self._token = self.store._current.set(self)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        assert self._lane is not None and isinstance(self._manager, AbstractContextManager)
        if self._token is not None:
            self.store._current.reset(self._token)
            self._token = None
        lane, manager = self._lane, self._manager
        try:
            # Queued behind any call of this block still running on the lane; awaited to
            # its end even when cancelled, so the transaction never outlives the block.
            suppress = await _finish(lane.run(self.store._loop_now(), self._context, None,
                                              manager.__exit__, exc_type, exc, tb))
        finally:
            self._sync = None
            self._free_lane()
        return bool(suppress)

    def _free_lane(self) -> None:
        lane, self._lane = self._lane, None
        if lane is not None and self._parent is None:
            self.store._lanes.release(lane)


_PENDING = object()


def _enter(store: HubStore, write: bool) -> tuple[AbstractContextManager[UnitOfWork],
                                                  UnitOfWork]:
    """Open a unit of work (or, in an open one, a nested block), on the lane."""
    manager = store.unit_of_work(write)
    return manager, manager.__enter__()


class AsyncMessageFeed:
    """:class:`~hubstore.services.waiting.MessageFeed` for asyncio: ``await feed.next()``.

    The feed moves only when ``next`` returns messages: a cancelled ``next`` leaves
    what it had read for the next call.
    """

    def __init__(self, store: AsyncHubStore, feed: MessageFeed) -> None:
        self.store = store
        self.feed = feed

    @property
    def agent_id(self) -> str:
        return self.feed.agent_id

    @property
    def cursor(self) -> str:
        """Resumes right after the last message :meth:`next` returned (any process)."""
        return self.feed.cursor

    async def next(self, timeout_s: float | None = 30.0, max_messages: int = 100
                   ) -> list[Message]:
        """The next messages (at most ``max_messages``) as soon as there are any; an
        empty list once ``timeout_s`` passed with none."""
        limit = check_batch(max_messages)
        deadline = deadline_after(timeout_s)
        feed = self.feed
        async with _Wake(self.store, signals.MESSAGES, feed.keys()) as wake:
            while True:
                wake.clear()
                batch = await self.store._call(feed.read, limit)
                # From here to the return nothing awaits: delivered, or not moved at all.
                feed.position, feed._topics = batch.position, batch.topics
                if wake.sub.keys is not None and feed.keys() != wake.sub.keys:
                    wake.sub.keys = feed.keys()  # topics changed: listen for them too
                    if not batch.messages:
                        continue
                if batch.messages:
                    return batch.messages
                if not await wake.pause(deadline):
                    return []


class _Wake:
    """A subscription to the store's change watcher whose wake-ups set an asyncio.Event."""

    def __init__(self, store: AsyncHubStore, channel: str, keys: Iterable[str]) -> None:
        self.store = store
        self.channel = channel
        self.keys = list(keys)
        self.event = asyncio.Event()
        self._sub: signals.Subscription | None = None

    @property
    def sub(self) -> signals.Subscription:
        assert self._sub is not None
        return self._sub

    async def __aenter__(self) -> _Wake:
        loop = self.store._loop_now()
        watcher = self.store.sync.change_watcher()
        event = self.event
        self._sub = watcher.subscribe(self.channel, self.keys,
                                      wake=lambda: _call_soon(loop, event.set))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sub is not None:
            self._sub.close()

    def clear(self) -> None:
        """Forget earlier wake-ups (before looking at the tables)."""
        self.event.clear()

    async def pause(self, deadline: float | None, due: float | None = None) -> bool:
        """Wait for a wake-up, the re-check interval, the deadline or ``due`` (when a
        scheduled job becomes due); False once the deadline has passed."""
        wait = wait_s(self.sub.watcher.recheck_s, deadline, due)
        if wait is None:
            return False
        try:
            async with asyncio.timeout(wait):
                await self.event.wait()
        except TimeoutError:
            pass
        return True


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: Any
               ) -> None:
    """``fn(*args)`` on the loop, from any thread; nothing when the loop has closed."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed
        log.debug("event loop closed; %r dropped", fn)


def _settle(future: asyncio.Future[_T], value: _T) -> None:
    if not future.done():
        future.set_result(value)


async def _awaited(outcome: Any) -> None:
    await outcome


async def _quietly(future: asyncio.Future[_T]) -> _T | None:
    """The future's result once it ends (cancellations waited out); None when it
    failed or declined."""
    try:
        return await _finish(future)
    except asyncio.CancelledError:
        raise
    except _Declined:
        return None
    except Exception:
        log.debug("claim ended with an error", exc_info=True)
        return None
