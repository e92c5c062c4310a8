"""The raw-driver lane: hubstore's own statements on the driver alone, an anchor.

``driver_statement`` compiles a hubstore statement as the driver runs it, for both raw
lanes (RawDriverHub here on Python's sqlite3, claim_loops.raw_claim_loop on psycopg).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from hubstore import HubStore
from hubstore.dialects import dialect_for
from hubstore.ids import now_ms, uuidv7
from hubstore.models import Message, table_of

#: The workloads the raw-driver lane runs on Python's sqlite3 alone (RawDriverHub).
RAW_WORKLOADS = ("heartbeat", "audit_log", "poll_for_agent")


def driver_statement(prepared: Any, dialect: Any) -> tuple[str, list[str], dict[str, Any]]:
    """A hubstore statement as the driver runs it: its SQL text (with the dialect's
    casts), its parameters' names in order (qmark style; [] for named ones), and the
    values of those it binds itself (a literal OFFSET 0, say)."""
    compiled = prepared.statement.compile(dialect=dialect)
    bound = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
    return str(compiled), list(compiled.positiontup or []), bound


def _qmark(prepared: Any) -> tuple[str, list[str], dict[str, Any]]:
    """driver_statement for Python's sqlite3."""
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    return driver_statement(prepared, sqlite_dialect.dialect())


class RawDriverHub:
    """The whole hub's three most frequent calls straight on Python's sqlite3: the same
    statements hubstore runs (compiled from its own), on the store's own writing
    connection (so the same page cache, pragmas and file), with nothing around them (no
    validation, no unit of work, no write lock, rows returned as tuples with their JSON
    payload decoded). Poll, audit_log and heartbeat are about nine in ten of the hub's
    calls and of its time; every other call goes to ``store``.

    Its capacity is an anchor, not a competitor: about the most any Python library could
    serve with this driver, this file's layout and these statements, so hubstore's
    figure over it is the share its own layers leave.
    """

    def __init__(self, store: HubStore) -> None:
        from hubstore.services import agents, messages

        self.store = store
        # The thread's kept writing connection (in autocommit between units of work): a
        # connection of its own would find its page cache dropped after each of the
        # store's writes, and the store's after each of its own.
        with store.one_statement() as uow:
            self.db: sqlite3.Connection = uow.driver
        self._heartbeat = _qmark(agents.HEARTBEAT_ONLINE)
        self._insert = _qmark(messages.INSERT)
        self._topics = _qmark(messages.AGENT_TOPICS)
        self._polls: dict[int, tuple[str, list[str], dict[str, Any]]] = {}
        self._payload = list(table_of(Message).c.keys()).index("payload_json")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _run(self, statement: tuple[str, list[str], dict[str, Any]],
             values: dict[str, Any]) -> sqlite3.Cursor:
        sql, names, bound = statement
        return self.db.execute(sql, [values[n] if n in values else bound[n] for n in names])

    def refresh_lease(self, agent_id: str) -> None:
        now = now_ms()
        self._run(self._heartbeat,
                  {"p_agent_id": agent_id, "p_now": now, "p_expires": now + 30_000})

    def poll_for_agent(self, agent_id: str) -> list[tuple[Any, ...]]:
        from hubstore.services.messages import DEFAULT_POLL, poll_statement

        (topics_json,) = self._run(self._topics, {"p_agent_id": agent_id}).fetchone()
        topics = json.loads(topics_json)
        statement = self._polls.get(len(topics))
        if statement is None:
            statement = self._polls[len(topics)] = _qmark(
                poll_statement(dialect_for("sqlite"), len(topics)))
        values = {"p_agent_id": agent_id, "p_limit": DEFAULT_POLL,
                  **{f"p_topic_{k}": topic for k, topic in enumerate(topics)}}
        at = self._payload
        return [(*row[:at], json.loads(row[at]), *row[at + 1:])
                for row in self._run(statement, values).fetchall()]

    def audit_log(self, *, type: str, from_agent: str, to_agent: str, topic: str,
                  payload: Any) -> str:
        now = now_ms()
        message_id = uuidv7()
        self._run(self._insert, {
            "id": message_id, "type": type, "from_agent": from_agent, "to_agent": to_agent,
            "topic": topic, "priority": 5, "ttl_ms": 300_000, "created_at_ms": now,
            "expires_at_ms": now + 300_000, "correlation_id": uuidv7(),
            "trace_id": uuidv7(), "payload_json": json.dumps(payload), "status": "queued"})
        return message_id
