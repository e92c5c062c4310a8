"""A closed store refuses every call with StoreClosed and writes nothing (issue 40, point
1): after ``close()`` or its ``with`` block, sync and async, on both dialects, the waits
and the feeds too. Before, the sync store opened a new pool and went on writing, and
the async one raised a plain RuntimeError."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.errors import HubStoreError, StoreClosed
from tests.faults.test_arguments_are_checked import call
from tests.faults.test_hostile_inputs import METHODS, snapshot


def tables(url: URL) -> tuple[Any, ...]:
    with HubStore.open(url) as store:
        return snapshot(store, sorted(sa_inspect(store.engine).get_table_names()))


def test_every_method_of_a_closed_store_raises_store_closed(db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        store.register_agent("agent-1", "codex")
        feed = store.message_feed("agent-1")
    before = tables(db_url)
    for method in METHODS:
        with pytest.raises(StoreClosed, match="this store is closed"):
            call(store, method)
    with pytest.raises(StoreClosed):
        feed.next(timeout_s=0)
    with pytest.raises(StoreClosed), store.unit_of_work() as uow:
        uow.register_agent("agent-2", "codex")
    with pytest.raises(StoreClosed):
        store.wait_for_assign("agent-1", timeout_s=5)
    assert StoreClosed.code == "STORE_CLOSED" and issubclass(StoreClosed, HubStoreError)
    assert tables(db_url) == before
    assert store.connections.describe()["open"] == 0


def test_close_then_close_again_is_harmless(db_url: URL) -> None:
    store = HubStore.open(db_url)
    store.close()
    store.close()
    with pytest.raises(StoreClosed):
        store.get_hub_stats()


@pytest.mark.asyncio
async def test_a_closed_async_store_raises_store_closed(db_url: URL) -> None:
    async with await AsyncHubStore.open(db_url) as store:
        await store.register_agent("agent-1", "codex")
        feed = await store.message_feed("agent-1")
    before = tables(db_url)
    with pytest.raises(StoreClosed):
        await store.register_agent("agent-2", "codex")
    with pytest.raises(StoreClosed):
        await store.claim_next_assign("agent-1")
    with pytest.raises(StoreClosed):
        await store.wait_for_assign("agent-1", timeout_s=5)
    with pytest.raises(StoreClosed):
        await store.wait_for_result("j-1", timeout_s=5)
    with pytest.raises(StoreClosed):
        await feed.next(timeout_s=5)
    with pytest.raises(StoreClosed):
        async with store.unit_of_work() as uow:
            await uow.register_agent("agent-2", "codex")
    assert tables(db_url) == before
