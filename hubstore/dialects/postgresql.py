"""PostgreSQL's SQL component."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    BindParameter,
    ColumnClause,
    ColumnElement,
    Connection,
    Engine,
    Executable,
    FromClause,
    Integer,
    Select,
    Table,
    Text,
    TextClause,
    and_,
    any_,
    bindparam,
    cast,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy import type_coerce as coerce
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.selectable import TableValuedAlias

from hubstore.dialects.base import SqlDialect, const
from hubstore.jsontype import dumps
from hubstore.models import AssignLimit, AssignLimitShare, table_of

_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = _UPPER.lower()
_ASCII_LOWER = str.maketrans(_UPPER, _LOWER)


#: Revision 0004's and 0015's counter deltas: one folder at a time (a transaction-scoped
#: advisory lock), each table's deltas moved into its counters by one statement.
_TRY_FOLD_LOCK = text("SELECT pg_try_advisory_xact_lock(:key)")
FOLD_LOCK_KEY = 0x6875_6266_6F6C_64  # "hubfold"
_FOLD = text("""
    WITH moved AS (DELETE FROM hub_counter_deltas RETURNING name, delta)
    INSERT INTO hub_counters (name, value)
    SELECT name, sum(delta) FROM moved GROUP BY name
    ON CONFLICT (name) DO UPDATE SET value = hub_counters.value + EXCLUDED.value""")
_FOLD_WORKERS = (
    text("""
    WITH moved AS (DELETE FROM assign_worker_count_deltas
                   RETURNING worker_agent, queued, running)
    INSERT INTO assign_worker_counts (worker_agent, queued, running)
    SELECT worker_agent, sum(queued), sum(running) FROM moved GROUP BY worker_agent
    ON CONFLICT (worker_agent) DO UPDATE
       SET queued = assign_worker_counts.queued + EXCLUDED.queued,
           running = assign_worker_counts.running + EXCLUDED.running"""),
    text("DELETE FROM assign_worker_counts WHERE queued = 0 AND running = 0"))
# SKIP_LOCKED: if another fold's vacuum or autovacuum is at it, leave it to them.
_VACUUM_DELTAS = "VACUUM (SKIP_LOCKED) hub_counter_deltas, assign_worker_count_deltas"


_limits = table_of(AssignLimit)
_shares = table_of(AssignLimitShare)


class PostgreSQLDialect(SqlDialect):
    name = "postgresql"
    writable_ctes = True
    row_locks = True
    split_claim_indexes = True
    release_stripes = 8  # (revision 0014's trigger: txid_current() % 8)

    def insert(self, table: Table) -> postgresql.Insert:
        return postgresql.insert(table)

    def natural_order(self, table: Table) -> list[ColumnElement[Any]]:
        return list(table.primary_key.columns)

    def row_key(self, table: Table) -> ColumnElement[Any]:
        (key,) = table.primary_key.columns
        return key

    def json_list_contains(self, column: ColumnElement[Any], value: str
                           ) -> ColumnElement[bool]:
        return coerce(column, JSONB).contains([value])

    def in_json_array(self, column: ColumnElement[Any], name: str) -> TextClause:
        return text(f"{column} IN (SELECT jsonb_array_elements_text(CAST(:{name} AS jsonb)))")

    def materialized(self, query: CTE) -> CTE:
        # (a WITH query of SELECT ... FOR UPDATE is not inlined; said all the same)
        return query.prefix_with("MATERIALIZED")

    def one_of(self, column: ColumnElement[Any], keys: Select[Any]) -> ColumnElement[bool]:
        # column = ANY(ARRAY(keys)): the array is computed once, then looked up by the
        # index; an IN (keys) semi-join is planned as a scan of the table when it is small
        return column == any_(func.array(keys.scalar_subquery()))

    def json_rows(self, table: Table, name: str) -> Select[Any]:
        # jsonb_populate_recordset(NULL::<table>, rows): each object's keys by column
        # name, each value converted to its column's type (a JSON value as jsonb).
        rows = func.jsonb_populate_recordset(
            literal_column(f"NULL::{table.name}"), bindparam(name, type_=JSONB)
        ).table_valued(*(column.name for column in table.c))
        return select(*(rows.c[column.name] for column in table.c))

    def claim_slots(self, picked: CTE, released: CTE, now: ColumnElement[Any]
                    ) -> tuple[CTE, CTE]:
        """Where row locks serialize: each share the claim took room from, of each key it
        picked jobs of, and which of the key's picked jobs start in it (those whose rank in
        claim order is above ``low`` and at most ``high``); a key whose room went since the
        statement's snapshot has none. Second, the statement that counts the starts in the
        shares of several (the statement must carry it)."""
        wanted = (select(picked.c.limit_key, func.count().label("n"),
                         func.max(picked.c.free).label("free"))
                  .where(picked.c.limited.is_not(None)).group_by(picked.c.limit_key)
                  .cte("wanted"))
        want = wanted.c
        limit = _limits.alias("limit_of")
        # A key with one share and no rate: the share counts the starts here, when it has
        # room for every picked job (waiting for a claim that holds it).
        one = released.alias("one_released")
        shares = _shares.c
        # Every share a claim may wait for (share 0 of a key with one share, with a rate
        # or not) locked first, in the keys' order: two claims that meet keys in opposite
        # orders then never wait for each other in a cycle (which PostgreSQL breaks by
        # failing one of them).
        lone = _shares.alias("lone_share")
        lone_limit = _limits.alias("lone_limit")
        ordered = self.materialized(
            select(lone.c.key)
            .select_from(lone.join(wanted, lone.c.key == want.limit_key)
                         .join(lone_limit, lone_limit.c.key == lone.c.key))
            .where(lone.c.share == 0, lone_limit.c.shares == 1)
            .order_by(lone.c.key).with_for_update(of=lone, key_share=True)
            .cte("lone_shares"))
        single = (
            update(_shares)
            .where(shares.key.in_(select(ordered.c.key)),
                   shares.key == want.limit_key, shares.share == 0, limit.c.key == shares.key,
                   limit.c.shares == 1, limit.c.max_starts.is_(None),
                   one.c.key == shares.key, one.c.share == 0,
                   or_(shares.budget.is_(None), shares.started - one.c.released + want.n
                       <= shares.budget))
            .values(started=shares.started + want.n)
            .returning(shares.key, shares.share, literal(0, BigInteger).label("low"),
                       want.n.label("high"))
            .cte("single_share"))
        # A key with a rate (it has one share): its row and its share locked, each with room
        # for every picked job; the jobs name no share, and the trigger counts their starts
        # and start times.
        slot = _limits.alias("slot")
        rated = self.materialized(
            select(slot.c.key)
            .select_from(slot.join(wanted, slot.c.key == want.limit_key))
            .where(slot.c.max_starts.is_not(None), self.rate_room_for(slot, want.n, now),
                   slot.c.key.in_(select(ordered.c.key)))
            .order_by(slot.c.key).with_for_update(of=slot, key_share=True).cte("rated"))
        held = _shares.alias("rated_share_row")
        held_released = released.alias("rated_released")
        rated_share = self.materialized(
            select(held.c.key, literal(None, Integer).label("share"),
                   literal(0, BigInteger).label("low"), want.n.label("high"))
            .select_from(held.join(wanted, held.c.key == want.limit_key)
                         .join(limit, limit.c.key == held.c.key)
                         .join(held_released, and_(held_released.c.key == held.c.key,
                                                   held_released.c.share == held.c.share)))
            .where(held.c.share == 0, limit.c.max_starts.is_not(None),
                   held.c.key.in_(select(rated.c.key)),
                   or_(held.c.budget.is_(None),
                       held.c.started - held_released.c.released + want.n <= held.c.budget))
            .with_for_update(of=held, key_share=True).cte("rated_share"))
        # Several shares: as many with room as the picked jobs need by the snapshot's room
        # (one, far from the limit), skipping those other claims hold (each backend tries
        # them from a place of its own); the picked jobs fill them in turn, none beyond the
        # room it has, and each counts those it takes.
        each = _shares.alias("each_share")
        each_released = released.alias("each_released")
        spare = each.c.budget - (each.c.started - each_released.c.released)
        needed = func.least(limit.c.shares, (want.n * limit.c.shares + want.free - 1)
                            // func.greatest(want.free, 1))
        pick = (select(each.c.share, spare.label("room"))
                .select_from(each.join(each_released, and_(
                    each_released.c.key == each.c.key, each_released.c.share == each.c.share)))
                .where(each.c.key == want.limit_key, spare >= 1)
                .order_by((each.c.share + func.pg_backend_pid()) % limit.c.shares)
                .limit(needed).with_for_update(of=each, key_share=True, skip_locked=True)
                .lateral("pick"))
        high = func.sum(pick.c.room).over(partition_by=want.limit_key, order_by=pick.c.share)
        several = self.materialized(
            select(want.limit_key.label("key"), pick.c.share, (high - pick.c.room).label("low"),
                   high.label("high"), want.n)
            .select_from(wanted.join(limit, limit.c.key == want.limit_key).join(pick, true()))
            .where(limit.c.shares > 1).cte("several_shares"))
        taken = func.least(several.c.high, several.c.n) - several.c.low
        counted = (update(_shares)
                   .where(shares.key == several.c.key, shares.share == several.c.share,
                          taken > 0)
                   .values(started=shares.started + taken).cte("several_counted"))
        both = union_all(
            select(single.c.key, single.c.share, single.c.low, single.c.high),
            select(rated_share.c.key, rated_share.c.share, rated_share.c.low,
                   rated_share.c.high),
            select(several.c.key, several.c.share, several.c.low, several.c.high))
        return both.cte("slots"), counted

    def fold_counter_deltas(self, engine: Engine) -> None:
        with engine.begin() as conn:
            if not conn.scalar(_TRY_FOLD_LOCK, {"key": FOLD_LOCK_KEY}):
                return
            conn.execute(_FOLD)
            for statement in _FOLD_WORKERS:
                conn.execute(statement)
        # Until a vacuum clears the rows the fold deleted, every figures read scans them
        # again: after 100,000 messages, figures ran at about 30 reads/s, instead of
        # over 1,000, until autovacuum came by. (VACUUM runs outside any transaction.)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(_VACUUM_DELTAS)

    def json_object(self, pairs: list[tuple[str, ColumnElement[Any]]]) -> ColumnElement[Any]:
        parts: list[Any] = []
        for key, value in pairs:
            parts += [literal_column(f"'{key}'"), value]
        return func.jsonb_build_object(*parts)

    def json_records(self, name: str, columns: list[ColumnClause[Any]]) -> TableValuedAlias:
        # jsonb_to_recordset(rows) AS records(name type, ...)
        return (func.jsonb_to_recordset(bindparam(name, type_=JSONB))
                .table_valued(*columns).render_derived("records", with_types=True))

    def start_times(self, starts: ColumnElement[Any]) -> tuple[FromClause, ColumnElement[Any]]:
        each = func.jsonb_array_elements(starts).table_valued("value")
        return each, cast(each.c.value, BigInteger)

    def lesser(self, first: ColumnElement[Any], second: ColumnElement[Any]
               ) -> ColumnElement[Any]:
        return func.least(first, second)  # (PostgreSQL's least ignores NULLs)

    def greater(self, first: ColumnElement[Any], second: ColumnElement[Any]
                ) -> ColumnElement[Any]:
        return func.greatest(first, second)

    def rate_room_for(self, limit: FromClause, count: ColumnElement[Any],
                      now: ColumnElement[Any]) -> ColumnElement[bool]:
        # Revision 0014's trigger keeps the start times sorted, the max_starts newest:
        # room for `count` more when the (max_starts - count + 1)-th newest start is
        # outside the window (or there are not that many).
        c = limit.c
        at = func.jsonb_array_length(c.starts_json) - c.max_starts + count - 1
        decisive = cast(c.starts_json.op("->>")(cast(at, Integer)), BigInteger)
        return or_(c.max_starts.is_(None), at < 0, decisive <= now - c.per_ms)

    def hold_still(self, table: Table) -> Executable:
        return text(f"LOCK TABLE {table.name} IN SHARE MODE")  # (a table of ours)

    def room_notice(self, key: str) -> Executable:
        return select(func.pg_notify(const("hubstore_assigns"),
                                     const("l") + func.md5(bindparam("p_key", key, Text))))

    def json_not_null(self, column: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.jsonb_typeof(column) != const("null")

    def json_key_equals(self, column: ColumnElement[Any], key: str, kind: str,
                        value: BindParameter[Any]) -> ColumnElement[bool]:
        # JSONB compares JSON values: the bound value is the JSON text of the filter's.
        return coerce(column, JSONB)[key] == cast(value, JSONB)

    def json_filter_value(self, value: str | int | float) -> Any:
        return dumps(value)

    def ascii_like(self, column: ColumnElement[Any], pattern: BindParameter[Any]
                   ) -> ColumnElement[bool]:
        folded = func.translate(column, const(_UPPER), const(_LOWER))
        return folded.like(pattern, escape="\\")

    def like_needle(self, needle: str) -> str:
        return needle.translate(_ASCII_LOWER)  # (the column side is folded likewise)

    def project_slug(self) -> ColumnElement[Any]:
        return literal_column("adaptive_state_json -> 'project_slug'", JSONB)

    def project_slug_param(self, name: str) -> ColumnElement[Any]:
        return cast(bindparam(name, type_=Text), JSONB)

    def project_slug_value(self, slug: str, encoded: str) -> str:
        return encoded

    def refuse_writes(self, driver: Any, on: bool) -> None:
        if on:
            driver.execute("SAVEPOINT hubstore_read_only; SET TRANSACTION READ ONLY")
        elif driver.info.transaction_status.name != "IDLE":  # (a failed Session flush
            # rolls the whole transaction back, savepoint and all)
            driver.execute("ROLLBACK TO SAVEPOINT hubstore_read_only; "
                           "RELEASE SAVEPOINT hubstore_read_only")

    def begin_for_savepoint(self, driver: Any) -> None:
        """Nothing: psycopg begins a transaction before any statement."""

    def end_failed_commit(self, driver: Any) -> None:
        """Nothing: SQLAlchemy's rollback ended it."""

    def transaction_failed(self, conn: Connection) -> bool:
        driver: Any = conn.connection.driver_connection
        return bool(driver.info.transaction_status.name == "INERROR")
