"""What one claiming process sends to the database per job: statements, round trips
(PostgreSQL) and commits, counted below SQLAlchemy after the timed run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench.claim_loops import claim_loop, create_claim_jobs
from hubstore import HubStore


def sqlite_commits(statements: Sequence[str]) -> int:
    """Commits in a SQLite statement trace: each COMMIT, and each write run outside a
    transaction (autocommit: the statement commits itself)."""
    commits, open_transaction = 0, False
    for statement in statements:
        word = statement.split(None, 1)[0].upper() if statement.strip() else ""
        if word == "BEGIN":
            open_transaction = True
        elif word in ("COMMIT", "END", "ROLLBACK"):
            commits += word != "ROLLBACK"
            open_transaction = False
        elif not open_transaction and word not in ("SELECT", "PRAGMA", "SAVEPOINT"):
            commits += 1
    return commits


class StatementCounter:
    """Counts what one process sends to the database, below SQLAlchemy.

    PostgreSQL: libpq's own trace of every connection (psycopg ``pgconn.trace``): each
    frontend Query or Execute message is a statement (BEGIN, COMMIT and the pool's
    pre-ping included), each ReadyForQuery from the server ends a round trip, and one
    that says the server is idle again after statements ends a transaction (a COMMIT or
    an autocommit statement: the commits, rolled-back transactions included). SQLite:
    sqlite3's trace callback, one call per statement the library runs (BEGIN and COMMIT
    included, trigger bodies not; a write outside a transaction is a commit of its own);
    SQLite has no round trips (it runs in the process).
    Only pool "connect" listeners are added: no execution event listener, so the store
    runs the same code paths as in the timed run.
    """

    def __init__(self, engine: Any, scratch: Path) -> None:
        self.dialect = engine.dialect.name
        self.scratch = scratch
        self.traced: list[tuple[Any, Path, Any]] = []
        self.sqlite_statements: list[str] = []
        self._offsets: dict[Path, int] = {}
        event.listen(engine, "connect", self._on_connect)
        engine.dispose()  # connections made before the listener are not traced

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        if self.dialect == "sqlite":
            dbapi_conn.set_trace_callback(self.sqlite_statements.append)
            return
        path = self.scratch / f"libpq-trace-{len(self.traced)}.txt"
        handle = open(path, "w")  # noqa: SIM115 - closed in totals()
        self._trace(dbapi_conn, handle)
        self.traced.append((dbapi_conn, path, handle))

    def start(self) -> None:
        """Count from here on."""
        self.sqlite_statements.clear()
        for conn, path, handle in self.traced:
            if conn.closed:
                continue
            conn.pgconn.untrace()  # flushes libpq's buffer, so the size is all of it so far
            self._offsets[path] = path.stat().st_size
            self._trace(conn, handle)

    @staticmethod
    def _trace(conn: Any, handle: Any) -> None:
        from psycopg import pq

        conn.pgconn.trace(handle.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def totals(self) -> dict[str, int]:
        if self.dialect == "sqlite":
            # Python's sqlite3 reports each statement a trigger runs as its outer one
            # again: a repeat of the statement just before is not one of its own.
            executed = [s for k, s in enumerate(self.sqlite_statements)
                        if not s.startswith("--")
                        and (k == 0 or s != self.sqlite_statements[k - 1])]
            return {"statements": len(executed), "commits": sqlite_commits(executed)}
        statements = round_trips = commits = 0
        for conn, path, handle in self.traced:
            if not conn.closed:
                conn.pgconn.untrace()  # flushes libpq's buffer
            handle.close()
            with open(path) as trace:
                trace.seek(self._offsets.get(path, 0))
                ran = False  # a statement since the server was last idle
                for line in trace:
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) < 3:
                        continue
                    if parts[0] == "F" and parts[2] in ("Query", "Execute"):
                        statements += 1
                        ran = True
                    elif parts[0] == "B" and parts[2] == "ReadyForQuery":
                        round_trips += 1
                        # Idle again after statements: a transaction ended (a COMMIT, or
                        # an autocommit statement, which is its own transaction).
                        if ran and parts[-1].strip() == "I":
                            commits += 1
                            ran = False
        return {"statements": statements, "round_trips": round_trips, "commits": commits}


def count_per_job(url: str, jobs: int, scratch: Path) -> dict[str, Any]:
    """Statements (and on PostgreSQL round trips) per job of one claiming process."""
    with HubStore.open(url) as store:
        counter = StatementCounter(store.engine, scratch)
        ids = create_claim_jobs(store, jobs)
        counter.start()
        claimed = claim_loop(store)
        totals = counter.totals()
    counted = len(claimed)
    per_job: dict[str, Any] = {
        name: round(value / counted, 2) if counted else None for name, value in totals.items()}
    per_job["jobs"] = counted
    per_job["all_claimed"] = sorted(claimed) == sorted(ids)
    per_job["method"] = (
        "libpq trace of each connection of one claiming process (Query/Execute messages = "
        "statements, ReadyForQuery = round trips), after the timed run"
        if store.engine.dialect.name == "postgresql" else
        "sqlite3 trace callback of one claiming process (statements the library ran), "
        "after the timed run")
    return per_job
