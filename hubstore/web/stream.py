"""Live updates: one :class:`Pulse` per console turns the store's cross-process wake-ups
into versions that the pages' server-sent-event streams pass on.

While at least one page listens, the pulse subscribes to the store's change watcher
(:mod:`hubstore.signals`: LISTEN/NOTIFY on PostgreSQL, ``PRAGMA data_version`` on
SQLite), and on each wake-up reads the :class:`~hubstore.services.console_reads.Snapshot` (counters
and index ranges only); when what the console shows has changed, listeners get a new
version and their pages fetch the parts that show it. Wake-ups are taken at most every
:data:`MIN_INTERVAL_S`, so a busy hub costs a few snapshot reads a second, however many
pages are open. On PostgreSQL the triggers notify queued jobs and new messages only, so
the pulse also reads the snapshot every :data:`PG_RECHECK_S` (a job finishing, a human
request answered elsewhere); on SQLite every commit wakes it.

:meth:`Pulse.stop` ends every stream (``hubstore web`` calls it on Ctrl-C or SIGTERM):
a server waits for its open responses before it exits, and a stream never ends by
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from hubstore import signals
from hubstore.aio import AsyncHubStore
from hubstore.errors import HubStoreError
from hubstore.services.console_reads import Snapshot, snapshot

log = logging.getLogger("hubstore.web")

MIN_INTERVAL_S = 0.2
PG_RECHECK_S = 0.5
#: A stream with nothing to say sends a beat this often (which also keeps proxies from
#: closing an idle stream).
KEEPALIVE_S = 15.0


def stall_ms() -> int:
    """How long a page waits without hearing its stream before it says it is not live:
    two beats missed, and one more as slack."""
    return int(3 * KEEPALIVE_S * 1000)


T = TypeVar("T")


class Listener:
    """One page's view of the pulse: :meth:`next` waits for a newer version."""

    def __init__(self, pulse: Pulse) -> None:
        self._pulse = pulse
        self.seen = pulse.version

    async def next(self, timeout_s: float) -> int | None:
        """The newest version once it is newer than the last one returned; None after
        ``timeout_s`` without a change."""
        if self._pulse.version == self.seen:
            changed = self._pulse.changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout_s)
        if self._pulse.version == self.seen:
            return None
        self.seen = self._pulse.version
        return self.seen


class Pulse:
    """The console's one watcher of the hub (see the module's docstring)."""

    def __init__(self, store: AsyncHubStore) -> None:
        self.store = store
        self.version = 0
        self.changed = asyncio.Event()
        self.latest: Snapshot | None = None
        self._listeners = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stopping = asyncio.Event()

    @property
    def listeners(self) -> int:
        """How many streams listen now."""
        return self._listeners

    @property
    def stopped(self) -> bool:
        return self.stopping.is_set()

    def stop(self) -> None:
        """End every stream (on the event loop's thread)."""
        self.stopping.set()
        self._publish()

    def stop_threadsafe(self) -> None:
        """:meth:`stop` from any thread, or a signal handler (before any stream: at
        once)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.stopping.set()
        else:
            loop.call_soon_threadsafe(self.stop)

    async def unless_stopped(self, work: Coroutine[Any, Any, T]) -> T | None:
        """``work``'s result, or None (``work`` cancelled) once the pulse is stopped."""
        if self.stopped:
            work.close()
            return None
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return None if task.cancelled() else task.result()

    @contextlib.asynccontextmanager
    async def listen(self) -> AsyncIterator[Listener]:
        """A :class:`Listener` while the block runs (the first one starts the pulse)."""
        self._listeners += 1
        self._loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            yield Listener(self)
        finally:
            self._listeners -= 1
            if not self._listeners and self._task is not None:
                self._task.cancel()
                self._task = None

    def _publish(self) -> None:
        self.version += 1
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def ring() -> None:  # on the watcher's thread
            loop.call_soon_threadsafe(wake.set)

        watcher = self.store.sync.change_watcher()
        subs = [watcher.subscribe(channel, None, ring)
                for channel in (signals.ASSIGNS, signals.MESSAGES)]
        recheck = watcher.recheck_s if self.store.dialect == "sqlite" else min(
            watcher.recheck_s, PG_RECHECK_S)
        last = None if self.latest is None else self.latest.fingerprint()
        try:
            while True:
                wake.clear()
                try:
                    current = await self.store.run_sync(snapshot)
                except HubStoreError as exc:
                    log.warning("console: reading the hub failed (%s); trying again", exc.code)
                else:
                    self.latest = current
                    if current.fingerprint() != last:
                        if last is not None:
                            self._publish()
                        last = current.fingerprint()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), recheck)
                await asyncio.sleep(MIN_INTERVAL_S)
        finally:
            for sub in subs:
                sub.close()
