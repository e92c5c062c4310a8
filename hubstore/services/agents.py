"""Agents: registration, leases, topics and the stale sweep."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam, select, update

from hubstore.dialects import SqlDialect
from hubstore.execution import Prepared, execute, get, load
from hubstore.ids import now_ms, uuidv7
from hubstore.models import AGENT_CLIS, AGENT_STATUSES, Agent, table_of
from hubstore.results import Lease
from hubstore.services.base import (
    const,
    resolve_now,
    update_row,
)
from hubstore.transaction import Scope
from hubstore.types import AgentCli, AgentStatus
from hubstore.validation import (
    json_list,
    json_object,
    lookup_key,
    optional_int,
    require_duration,
    require_enum,
    require_id,
    string_list,
)

#: A stale agent whose lease passed more than this long ago goes offline.
OFFLINE_AFTER_MS = 300_000

_agents = table_of(Agent)
# Hot paths: statements built once (constructing them costs more than running them).
_HEARTBEAT = Prepared(
    update(_agents).where(_agents.c.agent_id == bindparam("p_agent_id"))
    .values(last_seen_ms=bindparam("p_now"), lease_expires_ms=bindparam("p_expires"),
            status="online"))
# An online agent's heartbeat leaves status out of SET, so SQLite does not rewrite the
# agent's entry in idx_agents_status (a fifth of a heartbeat's time there).
HEARTBEAT_ONLINE = Prepared(
    update(_agents).where(_agents.c.agent_id == bindparam("p_agent_id"),
                          _agents.c.status == const("online"))
    .values(last_seen_ms=bindparam("p_now"), lease_expires_ms=bindparam("p_expires")))
_REGISTER_COLUMNS = ("cli", "pid", "capabilities_json", "topics_json", "last_seen_ms",
                     "lease_expires_ms", "status", "metadata_json")


@functools.cache
def _register_statement(sql: SqlDialect) -> Prepared:
    """INSERT ... ON CONFLICT (agent_id) DO UPDATE, built once per dialect."""
    insert = sql.insert(_agents)
    return Prepared(insert.on_conflict_do_update(
        index_elements=[_agents.c.agent_id],
        set_={name: insert.excluded[name] for name in _REGISTER_COLUMNS}))


def register_agent(scope: Scope, agent_id: str, cli: AgentCli, pid: int | None = None,
                   capabilities: Iterable[Any] = (), topics: Iterable[str] = (),
                   heartbeat_ttl_ms: int = 30_000,
                   metadata: dict[str, Any] | None = None) -> Lease:
    """Insert or update the agent as online with a fresh lease."""
    require_id(agent_id, "agent_id")
    require_enum(cli, AGENT_CLIS, "cli")
    optional_int(pid, "pid")
    caps = json_list(capabilities, "capabilities")
    topic_list = string_list(topics, "topics")
    ttl = require_duration(heartbeat_ttl_ms, "heartbeat_ttl_ms")
    meta = json_object(metadata, "metadata")
    with scope.one_statement() as tx:  # the upsert
        now = now_ms()
        values = {
            "agent_id": agent_id, "cli": cli, "pid": pid, "capabilities_json": caps,
            "topics_json": topic_list, "last_seen_ms": now, "lease_expires_ms": now + ttl,
            "status": "online", "metadata_json": meta,
        }
        _register_statement(tx.sql).run(tx, values)
    return Lease(agent_id, uuidv7(), now + ttl, now)


def get_agent(scope: Scope, agent_id: str) -> Agent | None:
    """The agent, or None."""
    lookup_key(agent_id, "agent_id")
    with scope.transaction(write=False) as tx:
        return get(tx, Agent, agent_id)


def refresh_lease(scope: Scope, agent_id: str, ttl_ms: int = 30_000) -> Lease:
    """Heartbeat: last seen now, lease now + ttl, status online."""
    require_id(agent_id, "agent_id")
    ttl = require_duration(ttl_ms, "ttl_ms")
    with scope.one_statement() as tx:
        now = now_ms()
        values = {"p_agent_id": agent_id, "p_now": now, "p_expires": now + ttl}
        online = HEARTBEAT_ONLINE.run(tx, values)
    if not online:  # stale, offline or unknown: the heartbeat that sets the status
        with scope.one_statement() as tx:
            _HEARTBEAT.run(tx, values)
    return Lease(agent_id, None, now + ttl, now)


def update_agent_topics(scope: Scope, agent_id: str, topics: Iterable[str]) -> bool:
    """Replace the agent's topics; True when the agent exists."""
    require_id(agent_id, "agent_id")
    topic_list = string_list(topics, "topics")
    with scope.transaction() as tx:
        return update_row(tx, _agents, agent_id, topics_json=topic_list,
                          last_seen_ms=now_ms())


def list_online_agents(scope: Scope) -> list[Agent]:
    """Agents that are not offline (stale ones count)."""
    with scope.transaction(write=False) as tx:
        stmt = (select(Agent).where(Agent.status != "offline")
                .order_by(*tx.sql.natural_order(_agents)))
        return load(tx, Agent, stmt)


def list_all_agents(scope: Scope) -> list[Agent]:
    """Every agent."""
    with scope.transaction(write=False) as tx:
        return load(tx, Agent,
                    select(Agent).order_by(*tx.sql.natural_order(_agents)))


def get_agents_by_topic(scope: Scope, topic: str) -> list[Agent]:
    """Non-offline agents subscribed to ``topic``."""
    lookup_key(topic, "topic")
    with scope.transaction(write=False) as tx:
        subscribed = tx.sql.json_list_contains(_agents.c.topics_json, topic)
        stmt = (select(Agent).where(subscribed, Agent.status != "offline")
                .order_by(*tx.sql.natural_order(_agents)))
        return load(tx, Agent, stmt)


def sweep_stale_agents(scope: Scope, now_ms: int | None = None) -> dict[str, int]:
    """Online agents past their lease become stale; long-stale ones go offline."""
    now = resolve_now(now_ms)
    with scope.transaction() as tx:
        stale = execute(tx,
            update(_agents).where(_agents.c.status == "online",
                                  _agents.c.lease_expires_ms < now)
            .values(status="stale"))
        offline = execute(tx,
            update(_agents).where(_agents.c.status == "stale",
                                  _agents.c.lease_expires_ms < now - OFFLINE_AFTER_MS)
            .values(status="offline"))
        return {"stale": stale.rowcount, "offline": offline.rowcount}


def update_agent_status(scope: Scope, agent_id: str, status: AgentStatus) -> bool:
    """Set the agent's status; True when the agent exists."""
    require_id(agent_id, "agent_id")
    require_enum(status, AGENT_STATUSES, "status")
    with scope.transaction() as tx:
        return update_row(tx, _agents, agent_id, status=status)
