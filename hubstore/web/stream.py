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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from hubstore import signals
from hubstore.aio import AsyncHubStore
from hubstore.errors import HubStoreError
from hubstore.services.console_reads import Snapshot, snapshot

log = logging.getLogger("hubstore.web")

MIN_INTERVAL_S = 0.2
PG_RECHECK_S = 0.5


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

    @contextlib.asynccontextmanager
    async def listen(self) -> AsyncIterator[Listener]:
        """A :class:`Listener` while the block runs (the first one starts the pulse)."""
        self._listeners += 1
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
