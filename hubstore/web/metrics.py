"""``/metrics``: the hub's figures in Prometheus' text format (prometheus-client).

Every value comes from one :class:`~hubstore.services.console_reads.Snapshot`: the trigger-kept
counters (messages, queued messages by urgency, dead letters, jobs by status), agents
by status and pending human requests (index ranges: one entry per agent, one per pending
request); and the queued and running jobs of the workers with the most queued (revision
0015's trigger-kept counts, as the overview shows them), with the age of each one's
oldest queued job (nine probes of the claim index per worker). No table is scanned.
Those are read fresh at each scrape.

The console's :class:`Tally` adds what a scrape alone cannot tell: the jobs finished
since the console started, by final status (a ``_total`` counter), and the time from
claim to finish of each (a histogram). At each scrape it reads the jobs that reached a
final status since the last one (a range of idx_assign_jobs_status per status, read
again :data:`LAG_MS` back for commits that landed late, each job's finish counted once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hubstore.ids import now_ms
from hubstore.models import AGENT_STATUSES
from hubstore.services.console_reads import Snapshot
from hubstore.services.job_metrics import FINAL, finished_since, oldest_queued
from hubstore.store import HubStore

#: How far back each scrape reads the finished jobs again (a commit stamped before the
#: last scrape's newest may land after it).
LAG_MS = 5_000
#: Finished jobs a scrape reads at most per status (the rest: at the next one).
READ_LIMIT = 20_000
#: The claim-to-finish histogram's buckets, in seconds.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
           14400.0)


class Tally:
    """The jobs finished since the console started, and their claim-to-finish times
    (see the module's docstring); :meth:`read` brings them up to date."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.finished = Counter(
            "hubstore_assign_jobs_finished",
            "Assign jobs that reached a final status since the console started.",
            ["status"], registry=self.registry)
        self.latency = Histogram(
            "hubstore_assign_job_claim_to_finish_seconds",
            "Time from a job's claim (started_at) to its final status (completed_at).",
            ["status"], buckets=BUCKETS, registry=self.registry)
        started = now_ms()
        self._since = dict.fromkeys(FINAL, started)
        self._seen: dict[str, set[tuple[str, int]]] = {s: set() for s in FINAL}
        self._lock = threading.Lock()
        for status in FINAL:
            self.finished.labels(status)
            self.latency.labels(status)

    def read(self, store: HubStore) -> None:
        """Count the jobs finished since the last read (on a store lane's thread)."""
        with self._lock, store.transaction(write=False) as uow:
            for status in FINAL:
                rows = finished_since(uow, status, self._since[status], READ_LIMIT)
                seen = self._seen[status]
                for row in rows:
                    key = (row.job_id, row.updated_at_ms)
                    if key in seen:
                        continue
                    seen.add(key)
                    self.finished.labels(status).inc()
                    if row.started_at_ms is not None and row.completed_at_ms is not None:
                        took = max(0, row.completed_at_ms - row.started_at_ms) / 1000
                        self.latency.labels(status).observe(took)
                if rows:
                    newest = rows[-1].updated_at_ms
                    since = newest if len(rows) >= READ_LIMIT else newest - LAG_MS
                    self._since[status] = max(self._since[status], since)
                    floor = self._since[status]
                    self._seen[status] = {k for k in seen if k[1] >= floor}


def queue_ages(store: HubStore, workers: Sequence[tuple[str, int, int]]) -> dict[str, int]:
    """Each of ``workers``' (worker, queued, running) with a queued job: the
    ``created_at_ms`` of its oldest."""
    with store.transaction(write=False) as uow:
        return oldest_queued(uow, [worker for worker, queued, _ in workers if queued])


__all__ = ["CONTENT_TYPE_LATEST", "Tally", "exposition", "queue_ages"]


class _SnapshotCollector(Collector):
    def __init__(self, snap: Snapshot, workers: Sequence[tuple[str, int, int]],
                 oldest: Mapping[str, int], now: int) -> None:
        self.snap = snap
        self.workers = workers
        self.oldest = oldest
        self.now = now

    def collect(self) -> Iterator[Metric]:
        snap, figures = self.snap, self.snap.figures
        queued = GaugeMetricFamily("hubstore_messages_queued",
                                   "Queued messages by urgency (priority >= 7 is urgent).",
                                   labels=["urgency"])
        queued.add_metric(["urgent"], figures.get("messages_queued_urgent", 0))
        queued.add_metric(["normal"], figures.get("messages_queued_normal", 0))
        yield queued
        yield GaugeMetricFamily("hubstore_messages", "Messages stored.",
                                value=figures.get("messages", 0))
        yield GaugeMetricFamily("hubstore_dead_letters", "Dead letters.",
                                value=figures.get("dead_letters", 0))
        jobs = GaugeMetricFamily("hubstore_assign_jobs", "Assign jobs by status.",
                                 labels=["status"])
        for status, count in snap.jobs_by_status.items():
            jobs.add_metric([status], count)
        yield jobs
        agents = GaugeMetricFamily("hubstore_agents", "Agents by status.", labels=["status"])
        for status in AGENT_STATUSES:
            agents.add_metric([status], snap.agents_by_status.get(status, 0))
        yield agents
        yield GaugeMetricFamily("hubstore_human_requests_pending",
                                "Human requests waiting for an answer.",
                                value=snap.pending_human_requests)
        depths = GaugeMetricFamily(
            "hubstore_worker_assign_jobs",
            "Queued and running assign jobs of the workers with the most queued.",
            labels=["worker", "status"])
        for worker, queued_jobs, running_jobs in self.workers:
            depths.add_metric([worker, "queued"], queued_jobs)
            depths.add_metric([worker, "running"], running_jobs)
        yield depths
        ages = GaugeMetricFamily(
            "hubstore_worker_queue_age_seconds",
            "Age of the oldest queued assign job of each worker with queued jobs.",
            labels=["worker"])
        for worker, created in self.oldest.items():
            ages.add_metric([worker], max(0, self.now - created) / 1000)
        yield ages


def exposition(snap: Snapshot, workers: Sequence[tuple[str, int, int]] = (),
               oldest: Mapping[str, int] | None = None, tally: Tally | None = None) -> bytes:
    """``snap``, the (worker, queued, running) of ``workers``, the ``created_at_ms`` of
    each one's oldest queued job and ``tally``'s counts, in Prometheus' text exposition
    format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snap, workers, oldest or {}, now_ms()))
    text = generate_latest(registry)
    return text if tally is None else text + generate_latest(tally.registry)
