"""What a peers run's phase cost the server, counted (not timed): rows written, index
insertions, WAL bytes, trigger calls, tuples fetched and the CPU of the server's and the
client's processes, per job.

Counts hold on a busy machine where rates do not: each is read from the phase's own
database (its pg_stat_* views, read once its backends have gone) or from the WAL
records that touch that database's relations (``pg_walinspect``, installed in the run's
database before the phase; the records of other databases on the server are left out,
and so are commit records, which name no relation). Index insertions are the btree
leaf insertions in that WAL (``INSERT_LEAF`` and ``INSERT_POST``), exact where the
statistics views have no such count. Trigger calls: ``pg_stat_user_functions``, the
database set to ``track_functions = 'pl'`` before the phase (PL/pgSQL functions only).

CPU: the server's backends of the database, from ``/proc/PID/stat``, read while every
client of the phase holds its connections (the phase's processes wait, after their
timed section, until the parent has read them); the clients' own ``process_time`` over
their timed sections.
"""

from __future__ import annotations

import os
import re
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
#: The WAL records that are an index entry written (btree leaf insertions).
INDEX_INSERTS = {("Btree", "INSERT_LEAF"), ("Btree", "INSERT_POST")}


def prepare(dsn: str, database: str) -> None:
    """Make the fresh database countable: pg_walinspect in it, and its PL functions'
    calls tracked (the setting is read by the sessions that connect afterwards)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute(f'ALTER DATABASE "{database}" SET track_functions = \'pl\'')


def hold_wal(admin: Any, slot: str) -> None:
    """Keep the server's WAL from now on until :func:`release_wal` (a physical
    replication slot that reserves it): on a busy server the phase's segments would
    otherwise be recycled before they are read."""
    admin.execute("SELECT pg_create_physical_replication_slot(%s, true)", (slot_name(slot),))


def release_wal(admin: Any, slot: str) -> None:
    admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                  "WHERE slot_name = %s", (slot_name(slot),))


def slot_name(database: str) -> str:
    """A replication slot's name for ``database`` (lower case letters, digits, _)."""
    return re.sub(r"[^a-z0-9_]", "_", database.lower())


def backend_pids(admin: Any, database: str) -> list[int]:
    """The client backends connected to ``database`` now."""
    return [int(r[0]) for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = "
        "'client backend'", (database,)).fetchall()]


def process_cpu(pids: list[int]) -> dict[int, float]:
    """utime + stime of each process, seconds (processes that are gone left out)."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            pass
    return out


def counters(dsn: str) -> dict[str, Any]:
    """The database's cumulative counts now (read by a connection of its own, which
    adds a few catalog reads to tup_fetched: the same few for every phase)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), "
            "coalesce(sum(n_tup_hot_upd), 0), coalesce(sum(n_tup_del), 0) "
            "FROM pg_stat_user_tables").fetchone()
        calls = conn.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(self_time), 0) "
            "FROM pg_stat_user_functions").fetchone()
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()"
                           ).fetchone()
    assert tables is not None and calls is not None and lsn is not None and oid is not None
    return {"inserted": int(tables[0]), "updated": int(tables[1]),
            "hot_updated": int(tables[2]), "deleted": int(tables[3]),
            "trigger_calls": int(calls[0]), "trigger_ms": float(calls[1]),
            "lsn": str(lsn[0]), "oid": int(oid[0])}


def wal(dsn: str, oid: int, start: str) -> dict[str, int]:
    """The WAL records since ``start`` that touch the database's relations (``oid``),
    and their bytes; btree leaf insertions apart."""
    import psycopg

    pattern = f"% rel %/{oid}/%"
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT resource_manager, record_type, count(*), sum(record_length), "
            "sum(fpi_length) FROM pg_get_wal_records_info(%s::pg_lsn, "
            "pg_current_wal_flush_lsn()) WHERE block_ref LIKE %s GROUP BY 1, 2",
            (start, pattern)).fetchall()
    out = {"wal_records": 0, "wal_bytes": 0, "wal_fpi_bytes": 0, "index_inserts": 0}
    for manager, kind, count, length, fpi in found:
        out["wal_records"] += int(count)
        out["wal_bytes"] += int(length)
        out["wal_fpi_bytes"] += int(fpi)
        if (manager, kind) in INDEX_INSERTS:
            out["index_inserts"] += int(count)
    return out


def per_job(before: dict[str, Any], after: dict[str, Any], dsn: str, jobs: int,
            server_cpu_s: float, client_cpu_s: float, fetched: int) -> dict[str, float]:
    """The phase's counts per job."""
    walled = wal(dsn, after["oid"], before["lsn"])
    d = {key: after[key] - before[key] for key in
         ("inserted", "updated", "hot_updated", "deleted", "trigger_calls", "trigger_ms")}
    return {
        "rows_written": round((d["inserted"] + d["updated"] + d["deleted"]) / jobs, 2),
        "inserted": round(d["inserted"] / jobs, 2),
        "updated": round(d["updated"] / jobs, 2),
        "hot_updated": round(d["hot_updated"] / jobs, 2),
        "deleted": round(d["deleted"] / jobs, 2),
        "index_inserts": round(walled["index_inserts"] / jobs, 2),
        "wal_bytes": round(walled["wal_bytes"] / jobs, 1),
        "wal_fpi_bytes": round(walled["wal_fpi_bytes"] / jobs, 1),
        "wal_bytes_no_fpi": round((walled["wal_bytes"] - walled["wal_fpi_bytes"]) / jobs, 1),
        "wal_records": round(walled["wal_records"] / jobs, 2),
        "trigger_calls": round(d["trigger_calls"] / jobs, 2),
        "trigger_us": round(1000 * d["trigger_ms"] / jobs, 1),
        "server_cpu_us": round(1e6 * server_cpu_s / jobs, 1),
        "client_cpu_us": round(1e6 * client_cpu_s / jobs, 1),
        "tuples_fetched": round(fetched / jobs, 1),
    }


#: The table's columns: (key, heading).
COLUMNS = (("rows_written", "rows"), ("index_inserts", "index entries"),
           ("wal_bytes_no_fpi", "WAL B"), ("wal_fpi_bytes", "+ page images B"),
           ("trigger_calls", "trigger calls"),
           ("tuples_fetched", "tuples read"), ("server_cpu_us", "server CPU us"),
           ("client_cpu_us", "client CPU us"))
