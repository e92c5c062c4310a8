"""Units of work nest as Django's ``atomic``, on both dialects: a store call or a unit of
work inside an open one joins it at once (no second connection, no wait on its own
lock), an inner block is a savepoint (its failure rolls back only itself and its
listeners never hear; its after-commit actions wait for the outer commit), the outer
rollback undoes everything, and nothing is seen elsewhere before the outermost commit.
Times are bounded, never measured as throughput.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import event

from hubstore import HubStore
from hubstore.models import Agent
from tests.helpers import FAST_S


@pytest.fixture
def other(store: HubStore) -> Iterator[HubStore]:
    """A second store on the same database (another connection, as another program)."""
    with HubStore.open(store.url) as second:
        yield second


def checkouts(store: HubStore) -> list[int]:
    """A list that grows by one each time the store's engine hands out a connection."""
    seen: list[int] = []
    event.listen(store.engine, "checkout", lambda *_: seen.append(1))
    return seen


def test_a_store_method_inside_a_unit_of_work_joins_it_at_once(store: HubStore) -> None:
    opened = checkouts(store)
    with store.unit_of_work() as uow:
        uow.register_agent("outer", "codex")
        before = len(opened)
        began = time.monotonic()
        store.register_agent("inner", "codex")
        store.audit_log("event", "outer", "inner", "t")
        assert sorted(a.agent_id for a in store.list_all_agents()) == ["inner", "outer"]
        with store.unit_of_work() as joined:
            assert joined is uow
        assert time.monotonic() - began < FAST_S
        assert len(opened) == before  # no second connection
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["inner", "outer"]
    assert store.get_hub_stats()["total_messages"] == 1


def test_an_inner_exception_rolls_back_only_the_inner_block(store: HubStore) -> None:
    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        with pytest.raises(KeyError), store.unit_of_work() as inner:
            inner.register_agent("lost", "codex")
            store.audit_log("event", "lost", "x", "t")
            raise KeyError("inner")
        assert uow.get_agent("lost") is None
        uow.audit_log("event", "kept", "x", "t")  # the outer block goes on
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]
    assert store.get_hub_stats()["total_messages"] == 1


def test_an_inner_block_is_a_savepoint_once_the_session_is_in_use(store: HubStore) -> None:
    """The unit of work's Session made (uow.session, or a store method that loads
    through it): an inner block's SAVEPOINT is still emitted at its start, so the store
    calls in it, which run on the connection, are rolled back with it."""
    with store.unit_of_work() as uow:
        assert uow.session.get(Agent, "nobody") is None
        with pytest.raises(KeyError), store.unit_of_work():
            store.register_agent("lost", "codex")
            raise KeyError("inner")
        uow.register_agent("kept", "codex")
    assert store.get_agent("lost") is None
    assert store.get_agent("kept") is not None


def test_a_failing_store_method_inside_rolls_back_only_itself(store: HubStore) -> None:
    job = store.create_assign("lead", "w")
    with store.unit_of_work() as uow:
        uow.register_agent("kept", "codex")
        with pytest.raises(Exception) as caught:
            store.update_assign_status(job.job_id, "succeeded", result={"bad": float("nan")})
        assert type(caught.value).__module__.startswith("hubstore")
        uow.update_assign_status(job.job_id, "running")
    got = store.get_assign(job.job_id)
    assert got is not None and got.status == "running"
    assert [a.agent_id for a in store.list_all_agents()] == ["kept"]


def test_the_outer_rollback_undoes_the_inner_work(store: HubStore) -> None:
    with pytest.raises(RuntimeError), store.unit_of_work():
        store.register_agent("a", "codex")
        with store.unit_of_work() as inner:
            inner.audit_log("event", "a", "b", "t")
        store.create_assign("lead", "w")
        raise RuntimeError("outer")
    assert store.list_all_agents() == []
    assert store.list_assigns() == []
    assert store.get_hub_stats()["total_messages"] == 0


def test_nothing_is_visible_elsewhere_before_the_outermost_commit(
        store: HubStore, other: HubStore) -> None:
    with store.unit_of_work():
        with store.unit_of_work():
            store.register_agent("a", "codex")
        assert store.get_agent("a") is not None  # visible inside
        began = time.monotonic()
        assert other.get_agent("a") is None  # not elsewhere, and the reader does not wait
        assert time.monotonic() - began < FAST_S
    seen = other.get_agent("a")
    assert seen is not None and seen.cli == "codex"


def test_listeners_of_a_rolled_back_savepoint_never_hear(store: HubStore) -> None:
    heard: list[tuple[str, str]] = []
    store.on_assign_status_change(lambda event, job: heard.append(
        (event["job_id"], event["status"])))
    with store.unit_of_work():
        kept = store.create_assign("lead", "w")
        with pytest.raises(KeyError), store.unit_of_work() as inner:
            lost = inner.create_assign("lead", "w")
            inner.update_assign_status(kept.job_id, "running")
            raise KeyError
        assert heard == []
    assert heard == [(kept.job_id, "queued")]
    assert store.get_assign(lost.job_id) is None
    got = store.get_assign(kept.job_id)
    assert got is not None and got.status == "queued"


def test_a_committed_savepoint_keeps_its_actions_for_the_outer_commit(store: HubStore) -> None:
    ran: list[str] = []
    with store.unit_of_work() as uow:
        with store.unit_of_work() as inner:
            inner.after_commit(lambda: ran.append("inner"))
        assert ran == []  # a savepoint's release is no commit
        uow.after_commit(lambda: ran.append("outer"))
    assert ran == ["inner", "outer"]


def test_a_failure_inside_a_savepoint_lets_the_unit_of_work_go_on(store: HubStore) -> None:
    from hubstore.errors import DuplicateKey

    store.create_assign("lead", "w", job_id="taken")
    with store.unit_of_work() as uow:
        uow.register_agent("a", "codex")
        with pytest.raises(DuplicateKey), store.unit_of_work() as inner:
            inner.create_assign("lead", "w", job_id="taken")
        with pytest.raises(DuplicateKey):  # a store call is a savepoint of its own
            store.create_assign("lead", "w", job_id="taken")
        uow.register_agent("b", "codex")
    assert sorted(a.agent_id for a in store.list_all_agents()) == ["a", "b"]
