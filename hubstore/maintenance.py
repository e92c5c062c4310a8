"""The hub's sweeps on a timer, for hubs where nobody claims (or to keep figures fresh).

Claims already take back stalled jobs (services/assigns/rescue.py); ``run_maintenance`` runs
every sweep the hub has, every ``every_s`` seconds, until stopped:

- assign jobs past their deadline: timed out, retried while retries remain
  (``sweep_timed_out_assigns``, batch after batch until none is due);
- queued messages past their expiry become dead letters, pending human requests past
  their deadline time out (``sweep_expired``);
- agents whose lease passed become stale, then offline (``sweep_stale_agents``);
- periodic jobs whose tick has come are queued, once per tick (``run_due_schedules``).

Any number of processes may run it on one database: each sweep is a guarded move of the
rows it finds (PostgreSQL skips rows another sweeper holds), so no row is moved twice.

>>> from hubstore.maintenance import run_maintenance
>>> run_maintenance(store, every_s=5.0)  # doctest: +SKIP   (until Ctrl-C or stop.set())
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from hubstore.errors import HubStoreError, ValidationError
from hubstore.services.assigns.rescue import SWEEP_BATCH
from hubstore.validation import require_number

if TYPE_CHECKING:
    from hubstore.aio import AsyncHubStore
    from hubstore.store import HubStore

log = logging.getLogger(__name__)

#: The most timeout batches one round runs (SWEEP_BATCH jobs each), so that a round ends.
MAX_BATCHES = 100


def sweep_once(store: HubStore) -> dict[str, int]:
    """Every sweep once (see the module); how many rows each moved."""
    done: Counter[str] = Counter()
    for _ in range(MAX_BATCHES):
        swept = store.sweep_timed_out_assigns()
        done.update({f"assigns_{name}": count for name, count in swept.items()})
        if swept["timed_out"] < SWEEP_BATCH:
            break
    done.update({f"expired_{name}": count
                 for name, count in store.sweep_expired().items()})
    done.update({f"agents_{name}": count
                 for name, count in store.sweep_stale_agents().items()})
    done["schedules_queued"] = len(store.run_due_schedules())
    return {name: done[name] for name in sorted(done)}


def _every(every_s: object) -> float:
    seconds = require_number(every_s, "every_s")
    if seconds <= 0:
        raise ValidationError(f"every_s must be a number of seconds above 0, not {seconds}")
    return seconds


def _logged(result: dict[str, int]) -> dict[str, int]:
    moved = {name: count for name, count in result.items() if count}
    if moved:
        log.info("hubstore maintenance: %s", ", ".join(f"{k}={v}" for k, v in moved.items()))
    return result


def run_maintenance(store: HubStore, every_s: float = 5.0, *,
                    stop: threading.Event | None = None, rounds: int | None = None,
                    on_round: Callable[[dict[str, int]], object] | None = None
                    ) -> dict[str, int]:
    """Run every sweep (:func:`sweep_once`) every ``every_s`` seconds, until ``stop`` is
    set, ``rounds`` rounds ran, or the process is interrupted; the totals moved.
    ``on_round`` is called with each round's counts. A round that fails (the database
    away for a moment: a HubStoreError) is logged and the next one runs as usual."""
    interval = _every(every_s)
    stopped = stop if stop is not None else threading.Event()
    total: Counter[str] = Counter()
    done_rounds = 0
    while not stopped.is_set():
        try:
            moved = _logged(sweep_once(store))
            total.update(moved)
            if on_round is not None:
                on_round(moved)
        except HubStoreError:
            log.warning("hubstore maintenance round failed; trying again in %s s", interval,
                        exc_info=True)
        done_rounds += 1
        if rounds is not None and done_rounds >= rounds:
            break
        stopped.wait(interval)
    return dict(total)


async def arun_maintenance(store: AsyncHubStore, every_s: float = 5.0, *,
                           rounds: int | None = None) -> dict[str, int]:
    """:func:`run_maintenance` for asyncio: runs until cancelled (or ``rounds`` rounds);
    each round on the store's threads, never blocking the event loop."""
    interval = _every(every_s)
    total: Counter[str] = Counter()
    done_rounds = 0
    while True:
        try:
            total.update(_logged(await store.run_sync(sweep_once)))
        except HubStoreError:
            log.warning("hubstore maintenance round failed; trying again in %s s", interval,
                        exc_info=True)
        done_rounds += 1
        if rounds is not None and done_rounds >= rounds:
            return dict(total)
        await asyncio.sleep(interval)


__all__ = ["arun_maintenance", "run_maintenance", "sweep_once"]
