"""The expiry sweep and the hub's figures.

The figures come from ``hub_counters``, kept exact by triggers on every insert, update
and delete, whoever writes the row, so no call counts a whole table. On SQLite (revision
0003) row triggers update the counters, except for message inserts (0009): those are
counted by their message_log rows, folded in every 64th row, and a read adds the rows
not folded yet; on PostgreSQL (0004) statement triggers append
deltas that readers add up and now and then fold in; the reader that folded then
vacuums the deltas table, so that later reads do not step over the rows the fold
deleted. Without those revisions the figures are counted, as the reference does.
Each worker's queued and running jobs (revision 0015, :func:`jobs_by_worker`) are kept
the same way: row triggers on SQLite, deltas folded with the hub's on PostgreSQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Engine,
    TextClause,
    column,
    func,
    literal,
    select,
    table,
    text,
    union_all,
    update,
)

from hubstore import figures
from hubstore.dialects import SqlDialect, dialect_for
from hubstore.execution import execute, scalar, scalars
from hubstore.models import Agent, Message, table_of
from hubstore.services.assigns.limits import get_assign_limits
from hubstore.services.base import const, resolve_now
from hubstore.services.dead_letters import record_dead_letters
from hubstore.services.human_requests import expire_human_requests
from hubstore.transaction import Scope, Transaction

if TYPE_CHECKING:
    from sqlalchemy.sql.dml import ReturningUpdate


DELIVERY_WINDOW_MS = 300_000

hub_counters = table("hub_counters", column("name"), column("value"))
_messages = table_of(Message)


_ONLINE = (select(literal("online_agents").label("name"), func.count().label("value"))
           .select_from(table_of(Agent)).where(Agent.status == const("online")))
# One statement, one round trip: the trigger-kept counters and the online agents.
_FIGURES = union_all(select(hub_counters.c.name, hub_counters.c.value), _ONLINE)

#: SQLite (revision 0009): the message inserts are counted by their message_log rows;
#: those after hub_counters' 'message_log_folded' seq (at most about 64, a rowid range)
#: are not in hub_counters yet and are added here.
LOG_FOLDED = figures.LOG_FOLDED
_LOG_PENDING = f"""
    SELECT count(*) AS n, coalesce(sum(queue_at_insert = 1), 0) AS normal,
           coalesce(sum(queue_at_insert = 2), 0) AS urgent
      FROM message_log
     WHERE seq > (SELECT value FROM hub_counters WHERE name = '{LOG_FOLDED}')"""
#: Fold every pending log row into hub_counters now (the prune's trim does, before it
#: deletes log rows); revision 0009's trigger does the same every 64th row.
FOLD_LOG = [text(figures.fold_log("(SELECT max(seq) FROM message_log)")),
            text("UPDATE hub_counters SET value = "
                 "coalesce((SELECT max(seq) FROM message_log), value) "
                 f"WHERE name = '{LOG_FOLDED}'")]
FIGURES_WITH_LOG = text(f"""
    SELECT name, value + CASE name WHEN 'messages' THEN p.n
                                   WHEN 'messages_queued_normal' THEN p.normal
                                   WHEN 'messages_queued_urgent' THEN p.urgent
                                   ELSE 0 END AS value
      FROM hub_counters, ({_LOG_PENDING}) AS p
     WHERE name <> '{LOG_FOLDED}'
    UNION ALL SELECT 'online_agents', count(*) FROM agents WHERE status = 'online'""")


# PostgreSQL: the counters plus the deltas not yet folded into them (revision 0004).
_FIGURES_WITH_DELTAS = text("""
    SELECT name, sum(value) AS value FROM (
        SELECT name, value FROM hub_counters
        UNION ALL SELECT name, delta FROM hub_counter_deltas
        UNION ALL SELECT '_pending', count(*) FROM hub_counter_deltas
        UNION ALL SELECT 'online_agents', count(*) FROM agents WHERE status = 'online'
    ) AS figures GROUP BY name""")
#: Fold the deltas once this many are pending (a read then sums fewer rows).
FOLD_AT = 1_000

# Revision 0015: each worker's queued and running jobs, a row per worker that has any
# (SQLite's triggers delete a row left at zero; on PostgreSQL the fold does); on
# PostgreSQL the counts plus the deltas not folded yet.
WORKER_ROWS = "SELECT worker_agent, queued, running FROM assign_worker_counts"
WORKER_ROWS_WITH_DELTAS = """
    SELECT worker_agent, sum(queued) AS queued, sum(running) AS running FROM (
        SELECT worker_agent, queued, running FROM assign_worker_counts
        UNION ALL SELECT worker_agent, queued, running FROM assign_worker_count_deltas
    ) AS workers GROUP BY worker_agent"""


def _busiest(rows: str) -> TextClause:
    return text(f"""
    SELECT worker_agent, queued, running FROM ({rows}) AS counted
     WHERE queued > 0 OR running > 0
     ORDER BY queued DESC, running DESC, worker_agent LIMIT :n""")


_WORKERS = _busiest(WORKER_ROWS)
_WORKERS_WITH_DELTAS = _busiest(WORKER_ROWS_WITH_DELTAS)
_WORKER_DELTAS_PENDING = text("SELECT count(*) FROM assign_worker_count_deltas")


def counts(tx: Transaction) -> dict[str, int]:
    """Every counter the figures need, in one statement that counts no table."""
    features = tx.db.features
    if features.counter_deltas:
        figures = {str(n): int(v) for n, v in execute(tx, _FIGURES_WITH_DELTAS)}
        if figures.pop("_pending", 0) >= FOLD_AT:
            # Readers run READ ONLY transactions: the fold is a write of its own, after.
            engine = tx.db.engine
            tx.after_commit(lambda: fold_deltas(engine))
        return figures
    if features.log_counts:
        return {str(n): int(v) for n, v in execute(tx, FIGURES_WITH_LOG)}
    if features.counters:
        return {str(n): int(v) for n, v in execute(tx, _FIGURES)}
    online = execute(tx, _ONLINE).one().value
    return {"online_agents": int(online), **plain_counts(tx)}


def fold_deltas(engine: Engine) -> None:
    """Fold the pending deltas into the counters, the hub's and the workers' (one folder
    at a time), then vacuum: the dialect's statements (PostgreSQL's; see
    ``SqlDialect.fold_counter_deltas``)."""
    dialect_for(engine.dialect.name).fold_counter_deltas(engine)


def jobs_by_worker(tx: Transaction, limit: int) -> list[tuple[str, int, int]]:
    """(worker, queued jobs, running jobs) of the ``limit`` workers with the most queued
    jobs (then running), from revision 0015's trigger-kept counts: no job is read."""
    if not tx.db.features.counter_deltas:
        rows = execute(tx, _WORKERS, {"n": limit})
        return [(str(w), int(q), int(r)) for w, q, r in rows]
    rows = execute(tx, _WORKERS_WITH_DELTAS, {"n": limit})
    depths = [(str(w), int(q), int(r)) for w, q, r in rows]
    if scalar(tx, _WORKER_DELTAS_PENDING) >= FOLD_AT:
        engine = tx.db.engine
        tx.after_commit(lambda: fold_deltas(engine))
    return depths


def plain_counts(tx: Transaction) -> dict[str, int]:
    """The same counters by counting rows (the reference's way, also the check)."""
    return figures.plain_counts_of(execute(tx, figures.PLAIN_COUNTS).mappings().one())


def expire_queued(sql: SqlDialect, now: int) -> ReturningUpdate[str]:
    """The queued messages due before ``now`` made dead letters, their ids returned: one
    range of the partial index idx_messages_expires (queued messages only).

    SQLite, without ANALYZE's statistics, would rather take idx_messages_status
    (``status = 'queued'``, an equality) and walk every queued message; ``likely()``
    tells its planner that the term selects most rows, and still lets it prove the
    partial index's predicate."""
    queued = sql.likely(_messages.c.status == const("queued"))
    return (update(_messages).where(queued, _messages.c.expires_at_ms < now)
            .values(status="dead_letter").returning(_messages.c.id))


def sweep_expired(scope: Scope, now_ms: int | None = None) -> dict[str, int]:
    """Queued messages past expiry become dead letters; overdue human requests time out."""
    now = resolve_now(now_ms)
    with scope.transaction() as tx:
        expired = list(scalars(tx, expire_queued(tx.sql, now)))
        record_dead_letters(tx, expired, "ttl_expired", None, now)
        timed_out = expire_human_requests(tx, now)
        return {"messages": len(expired), "human_requests": timed_out}


def get_queue_depths(scope: Scope) -> dict[str, int]:
    """Queued messages by urgency, and the dead-letter count."""
    with scope.transaction(write=False) as tx:
        c = counts(tx)
    return _depths(c)


def get_delivery_stats(scope: Scope, now_ms: int | None = None) -> dict[str, Any]:
    """Acked messages created in the last five minutes."""
    now = resolve_now(now_ms)
    with scope.transaction(write=False) as tx:
        total = scalar(tx, select(func.count()).select_from(_messages).where(
            _messages.c.status == const("acked"),
            _messages.c.created_at_ms > now - DELIVERY_WINDOW_MS))
    return {"total_deliveries": int(total or 0), "avg_delivery_ms": 0}


def get_hub_stats(scope: Scope) -> dict[str, Any]:
    """Online agents, messages, active assign jobs and the queue depths (the
    reference's figures); where assign limits exist, also ``assign_limits``: each
    key's limit, its running jobs and its starts in the last window
    (``AssignLimit.to_dict()`` but the key)."""
    with scope.transaction(write=False) as tx:
        c = counts(tx)
        limits = get_assign_limits(tx)
    figures: dict[str, Any] = {
        "online_agents": c["online_agents"],
        "total_messages": c["messages"],
        "active_assign_jobs": c["assign_queued"] + c["assign_running"],
        **_depths(c),
    }
    if limits:
        figures["assign_limits"] = {
            key: {name: value for name, value in limit.to_dict().items() if name != "key"}
            for key, limit in limits.items()}
    return figures


def get_audit_stats(scope: Scope) -> dict[str, int]:
    """The audit figures."""
    with scope.transaction(write=False) as tx:
        c = counts(tx)
    return {
        "online_agents": c["online_agents"],
        "total_messages": c["messages"],
        "dlq": c["dead_letters"],
        "assign_queued": c["assign_queued"],
        "assign_running": c["assign_running"],
        "assign_failed": c["assign_failed"],
        "assign_timed_out": c["assign_timed_out"],
    }


def _depths(c: dict[str, int]) -> dict[str, int]:
    return {"urgent": c["messages_queued_urgent"], "normal": c["messages_queued_normal"],
            "dlq": c["dead_letters"]}
