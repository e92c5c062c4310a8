"""Cancelled assign jobs: a terminal status ``cancelled`` in assign_jobs' status check.

``cancel_assign`` moves a queued or running job to ``cancelled``; nothing moves it on
(it is never claimed, retried or reported again). This revision lets the status check
accept the value and counts the new status in the figures (``assign_cancelled``).

SQLite cannot alter a CHECK constraint. Widening one changes no stored row, so the table
is not rebuilt: the status list in the table's CREATE statement is rewritten in
``sqlite_master`` under ``PRAGMA writable_schema``, the procedure SQLite's documentation
gives for removing or relaxing a CHECK ("ALTER TABLE", section "Making Other Kinds Of
Table Schema Changes"), then the schema cookie is moved on so that every connection
reads the new statement. Both forms of the table are served: hubstore's (a named
constraint) and the reference's (the check inline on the column, in a triflux file
adopted as 0001). Indexes, triggers and rows stay exactly as they are.

The reference store reads a cancelled job like any other (its getters return the
status as stored); see docs/compatibility.md for what it does with one.

Downgrade: the status list goes back to the five statuses. Cancelled jobs become
``failed``: their error already says they were cancelled (``{"message": "assign job
cancelled", ...}``), and below 0013 a failed job with no retry left is what a cancelled
one comes closest to (terminal, never claimed). Their rows are kept.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = ("queued", "running", "succeeded", "failed", "timed_out")
AFTER = (*BEFORE, "cancelled")
COUNTER = "assign_cancelled"
#: Which rows the counter counts (hubstore/figures.py states it; this is its copy).
COUNT = "SELECT count(*) FROM assign_jobs WHERE status = 'cancelled'"


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def upgrade() -> None:
    _status_check(BEFORE, AFTER)
    op.execute(f"INSERT INTO hub_counters (name, value) SELECT '{COUNTER}', ({COUNT})")


def downgrade() -> None:
    # (the counter triggers move each job's count from assign_cancelled to assign_failed)
    op.execute("UPDATE assign_jobs SET status = 'failed' WHERE status = 'cancelled'")
    op.execute(f"DELETE FROM hub_counters WHERE name = '{COUNTER}'")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DELETE FROM hub_counter_deltas WHERE name = '{COUNTER}'")
    _status_check(AFTER, BEFORE)


def _status_check(old: tuple[str, ...], new: tuple[str, ...]) -> None:
    if op.get_bind().dialect.name != "sqlite":
        # The check keeps its name: hubstore's (ck_assign_jobs_status), or the one
        # PostgreSQL gave an inline check of the reference's DDL; found by the server,
        # so that offline (--sql) scripts do the same.
        op.execute(f"""
DO $$
DECLARE name text;
BEGIN
    SELECT conname INTO STRICT name FROM pg_constraint
     WHERE conrelid = 'assign_jobs'::regclass AND contype = 'c'
       AND pg_get_constraintdef(oid) LIKE '%status%''{old[-1]}''%';
    EXECUTE format('ALTER TABLE assign_jobs DROP CONSTRAINT %I, '
                   'ADD CONSTRAINT %I CHECK (status IN ({_listed(new).replace("'", "''")}))',
                   name, name);
END $$""")
        return
    # The end of the list, found once in the statement (both forms end it with
    # 'timed_out' and the parenthesis), rewritten to the new list's end.
    find, put = _end(old), _end(new)
    if not op.get_context().as_sql:
        _require_once(find)
    op.execute("PRAGMA writable_schema = ON")
    op.execute(sa.text("UPDATE sqlite_master SET sql = replace(sql, :find, :put) "
                       "WHERE type = 'table' AND name = 'assign_jobs'")
               .bindparams(find=find, put=put))
    op.execute("PRAGMA writable_schema = OFF")
    _reload_schema()


def _end(values: tuple[str, ...]) -> str:
    """The end of a status list from 'timed_out' on, as 0001 and the reference wrote it
    (the reference without spaces, hence from the one value both forms share)."""
    tail = values[values.index("timed_out"):]
    return "'" + "', '".join(tail) + "')"


def _require_once(find: str) -> None:
    sql = op.get_bind().exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'assign_jobs'"
    ).scalar_one()
    if sql.count(find) != 1:
        raise RuntimeError(
            f"assign_jobs' status check is not the one this revision knows ({find!r} "
            f"found {sql.count(find)} times in {sql!r}); nothing was changed")


def _reload_schema() -> None:
    """Move SQLite's schema cookie on: every connection, this one included, parses the
    tables' statements again before its next statement."""
    if op.get_context().as_sql:  # (no cookie to read: a schema change moves it)
        op.execute("CREATE TABLE hubstore_schema_reload (x)")
        op.execute("DROP TABLE hubstore_schema_reload")
        return
    bind = op.get_bind()
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
