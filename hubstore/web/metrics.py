"""``/metrics``: the hub's figures in Prometheus' text format (prometheus-client).

Every value comes from one :class:`~hubstore.services.console_reads.Snapshot`: the trigger-kept
counters (messages, queued messages by urgency, dead letters, jobs by status), agents
by status and pending human requests (index ranges: one entry per agent, one per pending
request), jobs finished in the last minute (index ranges of the terminal statuses); and
the queued and running jobs of the workers with the most queued (revision 0015's
trigger-kept counts, as the overview shows them). No table is scanned. A fresh registry
per scrape: the values are the hub's, read now.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hubstore.models import AGENT_STATUSES
from hubstore.services.console_reads import Snapshot

__all__ = ["CONTENT_TYPE_LATEST", "exposition"]


class _SnapshotCollector(Collector):
    def __init__(self, snap: Snapshot, workers: Sequence[tuple[str, int, int]]) -> None:
        self.snap = snap
        self.workers = workers

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
        yield GaugeMetricFamily("hubstore_assign_jobs_finished_last_minute",
                                "Assign jobs that reached a final status in the last 60 s.",
                                value=snap.finished_last_minute)
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


def exposition(snap: Snapshot, workers: Sequence[tuple[str, int, int]] = ()) -> bytes:
    """``snap``, and the (worker, queued, running) of ``workers``, in Prometheus' text
    exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snap, workers))
    return generate_latest(registry)
