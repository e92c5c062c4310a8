"""OpenTelemetry spans for store calls (hubstore.telemetry), with the SDK's in-memory
exporter, on both dialects."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from hubstore import HubStore, ValidationError
from hubstore.aio import AsyncHubStore
from hubstore.telemetry import instrument, traced_methods


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_each_store_call_is_a_span(store: HubStore, backend: str,
                                   spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    instrument(store, provider)
    instrument(store, provider)  # twice changes nothing
    job = store.create_assign("lead", "w1", task="t")
    assert store.get_assign(job.job_id) is not None
    with pytest.raises(ValidationError):
        store.get_dead_letters(limit=-1)
    finished = exporter.get_finished_spans()
    assert [s.name for s in finished] == [
        "hubstore.create_assign", "hubstore.get_assign", "hubstore.get_dead_letters"]
    assert all(s.attributes is not None and s.attributes["db.system"] == backend
               for s in finished)
    assert finished[-1].status.status_code is StatusCode.ERROR
    assert finished[0].status.status_code is not StatusCode.ERROR


def test_async_calls_are_spans_inside_the_callers_span(
        store: HubStore, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    instrument(store, provider)
    tracer = provider.get_tracer("test")

    async def run() -> None:
        astore = AsyncHubStore(store)
        with tracer.start_as_current_span("request"):
            await astore.get_hub_stats()

    asyncio.run(run())
    outer = next(s for s in exporter.get_finished_spans() if s.name == "request")
    inner = next(s for s in exporter.get_finished_spans() if s.name == "hubstore.get_hub_stats")
    assert inner.parent is not None and inner.parent.span_id == outer.context.span_id


def test_every_facade_method_is_traced() -> None:
    names = traced_methods()
    for name in ("register_agent", "report_assign_result", "wait_for_assign", "message_feed",
                 "requeue_dead_letter", "prune_messages"):
        assert name in names
    assert "unit_of_work" not in names
