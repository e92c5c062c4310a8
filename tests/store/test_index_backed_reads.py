"""The index-backed reads (the poll, the pattern search, the claim) return exactly what
the reference's plain queries return, and SQLite's plans use the indexes."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from hubstore import HubStore
from hubstore.execution import Prepared
from hubstore.reflexion import normalize_error
from hubstore.services.messages import UNION_TOPICS
from tests.factories import AgentFactory, MessageFactory, ReflexionEntryFactory

# The reference's own poll query (hub/store.mjs: an OR over a JSON list scan), in SQL.
REFERENCE_POLL = """
    SELECT id FROM messages
    WHERE to_agent = :agent
       OR (substr(to_agent, 1, 6) = 'topic:' AND topic IN ({topics}))
    ORDER BY created_at_ms DESC, id DESC
    LIMIT :limit
"""
TOPIC_LIST = {"sqlite": "SELECT value FROM json_each(:topics)",
              "postgresql": "SELECT jsonb_array_elements_text(CAST(:topics AS jsonb))"}


MANY_TOPICS = ["t.c", *(f"filler.{i}" for i in range(UNION_TOPICS + 300)), "t.a", "t.c"]


def test_poll_equals_the_references_or_query(store: HubStore, backend: str) -> None:
    reference = text(REFERENCE_POLL.format(topics=TOPIC_LIST[backend]))
    rng = random.Random(11)
    agents = [f"agent-{i}" for i in range(6)]
    for agent in agents:
        AgentFactory.create(agent_id=agent, topics=rng.sample(["t.a", "t.b", "t.c", "t.d"], 2))
    for _ in range(400):
        if rng.random() < 0.4:
            topic = rng.choice(["t.a", "t.b", "t.c", "t.d", "t.e"])
            to_agent = rng.choice([f"topic:{topic}", f"TOPIC:{topic}", "topic:", topic])
        else:
            to_agent, topic = rng.choice([*agents, "someone"]), rng.choice(["t.a", "x"])
        MessageFactory.create(to_agent=to_agent, topic=topic, created_at_ms=rng.randint(0, 60))
    for agent in agents:
        row = store.get_agent(agent)
        assert row is not None
        for limit in (1, 5, 20, 100):
            # Past UNION_TOPICS (200) topics the poll takes them from one JSON array.
            for include in (None, ["t.e"], ["t.a", "t.b", "t.a"], MANY_TOPICS):
                topics = include or row.topics
                with store.unit_of_work(write=False) as uow:
                    expected = list(uow.connection.scalars(reference, {
                        "agent": agent, "topics": json.dumps(topics), "limit": limit}))
                got = [m.id for m in store.poll_for_agent(agent, limit, include)]
                assert got == expected


def _plain_find(store: HubStore, needle: str, context: dict[str, Any] | None) -> list[str]:
    """find_reflexion with the trigram index out of play: SQLite without the FTS5
    prefilter; PostgreSQL with index and bitmap scans off (a sequential scan)."""
    fast = store.features
    store.features = dataclasses.replace(fast, reflexion_fts=False)
    try:
        with store.unit_of_work(write=False) as uow:
            if uow.dialect == "postgresql":
                uow.connection.execute(text("SET LOCAL enable_bitmapscan = off"))
                uow.connection.execute(text("SET LOCAL enable_indexscan = off"))
            return [e.id for e in uow.find_reflexion(needle, context)]
    finally:
        store.features = fast


def test_pattern_search_with_and_without_the_trigram_index(store: HubStore) -> None:
    """The FTS5 / pg_trgm-backed search equals the plain LIKE scan."""
    rng = random.Random(5)
    words = ["TypeError", "cannot", "read", "x_1", "100%", "undefined", "ÉCHEC", "\\path",
             "of", "ab", "Ab", "a\"b", "ключ"]
    for _ in range(300):
        message = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        ReflexionEntryFactory.create(error_pattern=normalize_error(message) or "x",
                              context={"cli": rng.choice(["codex", "gemini"])},
                              confidence=rng.random())
    needles = ["cannot read", "CANNOT", "x_1", "100%", "échec", "ÉCHEC", "ab", "a\"b", "b",
               "\\path", "ключ", "of undefined", "zzz", "typeerror: cannot read x_1 of"]
    for needle in needles:
        for context in (None, {"cli": "codex"}):
            got = [e.id for e in store.find_reflexion(needle, context)]
            assert got == _plain_find(store, needle, context), needle
    assert any(store.find_reflexion(n) for n in needles)


def test_sqlite_plans_use_the_indexes(tmp_path: Path) -> None:
    """The poll's branches and the claim run on their (partial) indexes, not table scans:
    the query repeats each partial index's predicate, so the planner can prove it."""
    from hubstore.dialects import dialect_for
    from hubstore.services.assigns.claims import claim_statement
    from hubstore.services.messages import many_topics_statement, poll_statement

    def plan(prepared: Prepared) -> str:
        with store.unit_of_work(write=False) as uow:
            # Prepared holds an Executable; every prepared statement is a Core clause,
            # and SQLite compiles it with positional parameters.
            assert isinstance(prepared.statement, ClauseElement)
            compiled = prepared.statement.compile(dialect=uow.connection.dialect)
            assert isinstance(compiled, SQLCompiler) and compiled.positiontup is not None
            args = [None] * len(compiled.positiontup)  # the plan does not depend on them
            rows = uow.driver.execute(f"EXPLAIN QUERY PLAN {compiled}", args)
            return " ".join(row[3] for row in rows)

    store = HubStore.open(f"sqlite:///{tmp_path / 'hub.db'}", auto_migrate=True)
    try:
        poll = plan(poll_statement(dialect_for("sqlite"), 2))
        assert "idx_messages_to_agent" in poll and "ix_messages_topic_feed" in poll
        assert "SCAN messages" not in poll
        # The branches read keys only: the agent's from its index alone, and the whole
        # rows of the merged, cut keys come by rowid.
        assert "COVERING INDEX idx_messages_to_agent" in poll
        assert "USING INTEGER PRIMARY KEY (rowid=?)" in poll
        many = plan(many_topics_statement(dialect_for("sqlite")))  # more than UNION_TOPICS topics
        assert "idx_messages_to_agent" in many and "ix_messages_topic_feed" in many
        assert "SCAN messages" not in many
        assert "ix_assign_jobs_claim" in plan(claim_statement(dialect_for("sqlite")))
    finally:
        store.close()
