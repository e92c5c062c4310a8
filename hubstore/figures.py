"""The hub's figures, each counter rule stated once.

A counter is named by what it counts; :data:`COUNTS` says, in SQL, which rows each one
counts (the reference's way of getting the figures, and ``db check``'s way of checking
the counters). The migrations that install trigger-kept counters (0003, 0004, 0009, 0015)
freeze a copy of these rules in their own text, as migrations must;
tests/store/test_figures.py checks that every copy agrees with this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from sqlalchemy import TextClause, text

from hubstore.types import AssignStatus

#: A queued message of at least this priority counts as urgent, below it as normal.
URGENT_PRIORITY = 7
#: The message counters (revision 0009 folds the inserts into these three).
MESSAGE_COUNTERS = ("messages", "messages_queued_normal", "messages_queued_urgent")

#: Which rows each counter counts.
COUNTS: dict[str, str] = {
    "messages": "SELECT count(*) FROM messages",
    "messages_queued_urgent":
        f"SELECT count(*) FROM messages WHERE status = 'queued' "
        f"AND priority >= {URGENT_PRIORITY}",
    "messages_queued_normal":
        f"SELECT count(*) FROM messages WHERE status = 'queued' "
        f"AND priority < {URGENT_PRIORITY}",
    "dead_letters": "SELECT count(*) FROM dead_letters",
    **{f"assign_{status}": f"SELECT count(*) FROM assign_jobs WHERE status = '{status}'"
       for status in get_args(AssignStatus)},
}

#: Revision 0015: each worker's queued and running assign jobs (assign_worker_counts, a
#: row per worker that has any), by counting rows.
WORKER_COUNTS = ("SELECT worker_agent, "
                 "sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END) AS queued, "
                 "sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running "
                 "FROM assign_jobs WHERE status IN ('queued', 'running') "
                 "GROUP BY worker_agent")

#: Every counter by counting rows, in one statement (one row, a column per counter).
PLAIN_COUNTS: TextClause = text(
    "SELECT " + ", ".join(f"({query}) AS {name}" for name, query in COUNTS.items()))


def queue_bucket(priority: str) -> str:
    """SQL: the queue counter a queued message of priority ``priority`` (an SQL
    expression, such as ``NEW.priority``) counts towards."""
    return (f"CASE WHEN {priority} >= {URGENT_PRIORITY} THEN 'messages_queued_urgent' "
            "ELSE 'messages_queued_normal' END")


def queue_code(row: str) -> str:
    """SQL: revision 0009's ``queue_at_insert`` of a message row (``NEW``): 0 when not
    queued, 1 queued normal, 2 queued urgent."""
    return (f"CASE WHEN {row}.status = 'queued' THEN CASE WHEN {row}.priority >= "
            f"{URGENT_PRIORITY} THEN 2 ELSE 1 END ELSE 0 END")


#: hub_counters' row (revision 0009) holding the last message_log seq already folded in.
LOG_FOLDED = "message_log_folded"


def fold_log(upto: str) -> str:
    """SQL (revision 0009): add the message_log rows after the folded seq, up to the
    seq ``upto`` (an SQL expression), to the message counters."""
    return (
        "UPDATE hub_counters SET value = value + (SELECT CASE hub_counters.name "
        "WHEN 'messages' THEN count(*) "
        "WHEN 'messages_queued_normal' THEN coalesce(sum(queue_at_insert = 1), 0) "
        "ELSE coalesce(sum(queue_at_insert = 2), 0) END FROM message_log "
        f"WHERE seq > (SELECT value FROM hub_counters WHERE name = '{LOG_FOLDED}') "
        f"AND seq <= {upto}) "
        f"WHERE name IN ({', '.join(repr(name) for name in MESSAGE_COUNTERS)})")


def plain_counts_of(row: Mapping[Any, Any]) -> dict[str, int]:
    """PLAIN_COUNTS' one row (as a mapping) as {counter: count}."""
    return {name: int(row[name] or 0) for name in COUNTS}
