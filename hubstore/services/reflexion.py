"""Reflexion entries: learned errors and their solutions."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    Text,
    TextClause,
    and_,
    bindparam,
    delete,
    insert,
    or_,
    select,
    update,
)

from hubstore.dialects import ContextSignature, SqlDialect
from hubstore.errors import ValidationError, describe
from hubstore.execution import Prepared, execute, from_row, get
from hubstore.ids import now_ms, uuidv7
from hubstore.jsontype import dumps
from hubstore.models import REFLEXION_TYPES, ReflexionEntry, table_of
from hubstore.reflexion import recalc_confidence
from hubstore.results import ReflexionPage
from hubstore.services.base import resolve_now
from hubstore.transaction import Scope
from hubstore.types import ReflexionPatch, ReflexionType
from hubstore.validation import (
    MAX_PATTERN_BYTES,
    json_object,
    lookup_key,
    refuse_unknown,
    require_duration,
    require_enum,
    require_id,
    require_int,
    require_key,
    require_number,
    require_str,
    require_text,
    require_time,
)

THIRTY_DAYS_MS = 30 * 24 * 60 * 60 * 1000
#: The most entries one page_reflexion page holds.
MAX_PAGE = 1_000
_CURSOR = re.compile(r"([^:]+):(-?[0-9]{1,19}):(.+)", re.DOTALL)
SUBSTRING_LIMIT = 10
NEEDLE_UTF16_UNITS = 100
_entries = table_of(ReflexionEntry)
_by_confidence = (_entries.c.confidence.desc(), _entries.c.id)
_INSERT = Prepared(insert(_entries).values({c.name: bindparam(c.name) for c in _entries.c}))
_LOCK_COUNTS = Prepared(select(_entries.c.hit_count, _entries.c.success_count)
                        .where(_entries.c.id == bindparam("p_id")).with_for_update())
_RECORD_HIT = Prepared(update(_entries).where(_entries.c.id == bindparam("p_id"))
               .values(hit_count=bindparam("p_hits"), success_count=bindparam("p_successes"),
                       last_hit_ms=bindparam("p_now"), updated_at_ms=bindparam("p_now"),
                       confidence=bindparam("p_confidence"))
               .returning(*_entries.c), _entries)


def like_escape(value: str) -> str:
    """Escape LIKE's wildcards and its escape character (backslash)."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def first_utf16_units(value: str, units: int) -> str:
    """``value.slice(0, units)`` as JavaScript counts (UTF-16 code units)."""
    encoded = value.encode("utf-16-le", "surrogatepass")[: units * 2]
    return encoded.decode("utf-16-le", "ignore")


def check_context_filter(context: object) -> dict[str, Any]:
    """A context filter: string keys, scalar JSON values (None means 'any')."""
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise ValidationError(f"context must be a dict, got {type(context).__name__}")
    for key, value in context.items():
        if not isinstance(key, str):
            raise ValidationError(f"context keys must be strings, got {describe(key)}")
        require_str(key, "a context key")
        if value is not None and not isinstance(value, str | int | float):
            raise ValidationError(
                f"context[{key!r}] must be a string, number, boolean or None to filter by, "
                f"got {type(value).__name__}")
        if value is not None:
            dumps(value, f"context[{key!r}]")
    return {k: v for k, v in context.items() if v is not None}


def _kind(value: str | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "number" if isinstance(value, int | float) else "text"


def _context_filters(sql: SqlDialect, signature: ContextSignature
                     ) -> list[ColumnElement[bool]]:
    """One equality per key, through SQLAlchemy's JSON operators; keys and values are
    bound (value i as parameter p_value_i)."""
    return [sql.json_key_equals(_entries.c.context_json, key, kind, bindparam(f"p_value_{i}"))
            for i, (key, kind) in enumerate(signature)]


def _substring_match(sql: SqlDialect, trigram: bool) -> list[ColumnElement[bool] | TextClause]:
    """error_pattern LIKE p_like: case-blind for ASCII letters only, as SQLite's LIKE;
    narrowed by the trigram index where the dialect has it."""
    conditions: list[ColumnElement[bool] | TextClause] = [
        sql.ascii_like(_entries.c.error_pattern, bindparam("p_like"))]
    narrowed = sql.trigram_filter() if trigram else None
    if narrowed is not None:
        conditions.append(narrowed)
    return conditions


@functools.lru_cache(maxsize=256)
def find_statements(sql: SqlDialect, signature: ContextSignature,
                    trigram: bool) -> tuple[Prepared, Prepared]:
    """The exact and the substring query for these filter keys, built once."""
    where = _context_filters(sql, signature)
    exact = (select(_entries).where(_entries.c.error_pattern == bindparam("p_pattern"),
                                    *where).order_by(*_by_confidence))
    substring = (select(_entries).where(*_substring_match(sql, trigram), *where)
                 .order_by(*_by_confidence).limit(SUBSTRING_LIMIT))
    return Prepared(exact, _entries), Prepared(substring, _entries)


def recalc(hit_count: int, success_count: int) -> float:
    """The reference's confidence, clamped to 0..1."""
    value = recalc_confidence({"hit_count": hit_count, "success_count": success_count})
    return max(0.0, min(1.0, value))


_LIST_ORDER = (_entries.c.confidence.desc(), _entries.c.updated_at_ms.desc(), _entries.c.id)
#: What patch_reflexion may set (10.17.4's patchReflexion writes exactly these columns).
PATCHABLE = ("type", "error_pattern", "error_message", "context", "solution", "solution_code",
             "adaptive_state", "confidence", "hit_count", "success_count", "last_hit_ms",
             "updated_at_ms")
_INT64 = (-(2**63), 2**63 - 1)
_COLUMN_OF = {"context": "context_json", "adaptive_state": "adaptive_state_json"}
_DELETE = Prepared(delete(_entries).where(_entries.c.id == bindparam("p_id")))


def _list_filters(sql: SqlDialect, by_type: bool, by_confidence: bool, by_slug: bool
                  ) -> list[ColumnElement[bool]]:
    """list_reflexion's filters, their values bound (see :func:`list_parameters`)."""
    where: list[ColumnElement[bool]] = []
    if by_type:
        where.append(_entries.c.type == bindparam("p_type"))
    if by_confidence:
        where.append(_entries.c.confidence >= bindparam("p_min", type_=Float))
    if by_slug:
        where.append(sql.project_slug() == sql.project_slug_param("p_slug"))
    return where


@functools.lru_cache(maxsize=16)
def list_statement(sql: SqlDialect, by_type: bool, by_confidence: bool, by_slug: bool
                   ) -> Prepared:
    """list_reflexion's query for this combination of filters, built once."""
    return Prepared(select(_entries).where(*_list_filters(sql, by_type, by_confidence, by_slug))
                    .order_by(*_LIST_ORDER), _entries)


#: A page starts after the cursor's entry, in list_reflexion's order; the confidence
#: bound alone too, so that idx_reflexion_confidence serves it.
_AFTER_C = bindparam("p_after_c", type_=Float)
_AFTER_U = bindparam("p_after_u", type_=BigInteger)
_AFTER_ID = bindparam("p_after_id", type_=Text)
_AFTER = (_entries.c.confidence <= _AFTER_C,
          or_(_entries.c.confidence < _AFTER_C,
              and_(_entries.c.confidence == _AFTER_C,
                   or_(_entries.c.updated_at_ms < _AFTER_U,
                       and_(_entries.c.updated_at_ms == _AFTER_U, _entries.c.id > _AFTER_ID)))))


@functools.lru_cache(maxsize=32)
def page_statement(sql: SqlDialect, by_type: bool, by_confidence: bool, by_slug: bool,
                   after: bool) -> Prepared:
    """page_reflexion's query for this combination of filters and cursor, built once:
    ``p_limit`` rows in list_reflexion's order."""
    where = _list_filters(sql, by_type, by_confidence, by_slug)
    return Prepared(select(_entries).where(*where, *(_AFTER if after else ()))
                    .order_by(*_LIST_ORDER).limit(bindparam("p_limit", type_=Integer)),
                    _entries)


@functools.lru_cache(maxsize=256)
def patch_statement(columns: tuple[str, ...]) -> Prepared:
    """UPDATE these columns (bound by column name) of one row, returning the row."""
    return Prepared(update(_entries).where(_entries.c.id == bindparam("p_id"))
                    .values({c: bindparam(c, type_=_entries.c[c].type) for c in columns})
                    .returning(*_entries.c), _entries)


def check_patch(patch: Mapping[str, Any]) -> dict[str, Any]:
    """patch_reflexion's keyword arguments checked, as column name -> value.

    ``context=None`` and ``adaptive_state=None`` mean "keep" (left out here);
    ``updated_at_ms=None`` means now (filled in by the caller).
    """
    for key in patch:
        if key in ("id", "created_at_ms"):
            raise ValidationError(f"{key} cannot be patched")
    refuse_unknown(patch, PATCHABLE, "patch_reflexion")
    values: dict[str, Any] = {}
    for key, value in patch.items():
        if key in ("context", "adaptive_state"):
            if value is not None:
                values[_COLUMN_OF[key]] = json_object(value, key)
        elif key == "type":
            values[key] = require_enum(value, REFLEXION_TYPES, key)
        elif key in ("error_pattern", "error_message", "solution"):
            values[key] = require_text(value, key)
        elif key == "solution_code":
            values[key] = None if value is None else require_text(value, key)
        elif key == "confidence":
            values[key] = require_number(value, key)
        elif key != "updated_at_ms" or value is not None:
            values[key] = require_int(value, key, minimum=_INT64[0], maximum=_INT64[1])
    return values


def add_reflexion(scope: Scope, error_pattern: str, error_message: str, solution: str,
                  context: dict[str, Any] | None = None, solution_code: str | None = None,
                  type: ReflexionType = "reflexion",
                  adaptive_state: dict[str, Any] | None = None) -> ReflexionEntry:
    """A new entry with confidence 0.5 and one hit."""
    require_key(error_pattern, "error_pattern", MAX_PATTERN_BYTES)
    require_text(error_message, "error_message")
    require_text(solution, "solution")
    ctx = json_object(context, "context")
    if solution_code is not None:
        require_text(solution_code, "solution_code")
    require_enum(type, REFLEXION_TYPES, "type")
    state = json_object(adaptive_state, "adaptive_state")
    with scope.transaction() as tx:
        now = now_ms()
        row = {
            "id": uuidv7(), "type": type, "error_pattern": error_pattern,
            "error_message": error_message, "context_json": ctx, "solution": solution,
            "solution_code": solution_code, "adaptive_state_json": state,
            "confidence": 0.5, "hit_count": 1, "success_count": 0, "last_hit_ms": now,
            "created_at_ms": now, "updated_at_ms": now,
        }
        _INSERT.run(tx, row)
        return from_row(ReflexionEntry, row)


def get_reflexion(scope: Scope, id: str) -> ReflexionEntry | None:
    """The entry, or None."""
    lookup_key(id, "id")
    with scope.transaction(write=False) as tx:
        return get(tx, ReflexionEntry, id)


def find_reflexion(scope: Scope, error_pattern: str,
                   context: dict[str, Any] | None = None) -> list[ReflexionEntry]:
    """Entries with exactly this pattern; failing that, up to 10 that contain it.

    Both by confidence, highest first. Every non-None context value is an equality
    filter on that key of the stored context (True never matches 1).
    """
    return find_matching(scope, error_pattern, context, substring=True)


def find_reflexion_exact(scope: Scope, error_pattern: str,
                         context: dict[str, Any] | None = None) -> list[ReflexionEntry]:
    """find_reflexion without the substring fallback: the entries with exactly this
    pattern (learn_from_error's lookup: no substring match is the entry it wants,
    and on SQLite the trigram search costs more than the rest of a learn)."""
    return find_matching(scope, error_pattern, context, substring=False)


def find_matching(scope: Scope, error_pattern: str, context: dict[str, Any] | None, *,
                    substring: bool) -> list[ReflexionEntry]:
    lookup_key(error_pattern, "error_pattern")
    filters = check_context_filter(context)
    signature = tuple((key, _kind(value)) for key, value in filters.items())
    needle = first_utf16_units(error_pattern, NEEDLE_UTF16_UNITS)
    with scope.one_read() as tx:  # the exact SELECT
        sql = tx.sql
        params: dict[str, Any] = {"p_pattern": error_pattern,
                                  "p_like": "%" + like_escape(sql.like_needle(needle)) + "%",
                                  "p_phrase": '"' + needle.replace('"', '""') + '"'}
        for i, value in enumerate(filters.values()):
            bound = sql.json_filter_value(value)
            if bound is not None:
                params[f"p_value_{i}"] = bound
        trigram = tx.db.features.reflexion_fts and len(needle) >= 3
        exact, contains = find_statements(sql, signature, trigram)
        found = exact.instances(tx, params, ReflexionEntry)
    if found or not substring:
        return found
    with scope.one_read() as tx:  # no exact match: the substring SELECT
        return contains.instances(tx, params, ReflexionEntry)


def update_reflexion_hit(scope: Scope, id: str, success: bool = False) -> ReflexionEntry | None:
    """One more hit (and success): confidence is recalculated."""
    require_id(id, "id")
    with scope.transaction() as tx:
        # Read under the row lock (SQLite: the write lock), then one guarded write.
        found = _LOCK_COUNTS.first(tx, {"p_id": id})
        if found is None:
            return None
        hits = found["hit_count"] + 1
        successes = found["success_count"] + (1 if success else 0)
        now = now_ms()
        [entry] = _RECORD_HIT.instances(tx, {
            "p_id": id, "p_hits": hits, "p_successes": successes, "p_now": now,
            "p_confidence": recalc(hits, successes)}, ReflexionEntry)
        return entry


def prune_reflexion(scope: Scope, max_age_ms: int = THIRTY_DAYS_MS, min_confidence: float = 0.2,
                    now_ms: int | None = None) -> int:
    """Delete entries both older than max_age and below min_confidence."""
    require_duration(max_age_ms, "max_age_ms")
    threshold = require_number(min_confidence, "min_confidence")
    now = resolve_now(now_ms)
    with scope.transaction() as tx:
        result = execute(tx,
            delete(_entries).where(_entries.c.updated_at_ms < now - max_age_ms,
                                   _entries.c.confidence < threshold))
        return int(result.rowcount)


@dataclass(frozen=True)
class _ListFilters:
    """list_reflexion's filters, checked (ValidationError otherwise, before any read)."""

    type: str | None
    min_confidence: float | None
    project_slug: str | None
    encoded: str

    @classmethod
    def of(cls, type: object, min_confidence: object, project_slug: object) -> _ListFilters:
        kind = slug = minimum = None
        encoded = ""
        if type is not None and type != "":
            kind = require_enum(type, REFLEXION_TYPES, "type")
        if min_confidence is not None:
            minimum = require_number(min_confidence, "min_confidence", infinite=True)
        if project_slug is not None and project_slug != "":
            # checked as JSON on both dialects (U+0000 is refused on both)
            slug = require_text(project_slug, "project_slug")
            encoded = dumps(slug, "project_slug")
        return cls(kind, minimum, slug, encoded)

    def params(self, sql: SqlDialect) -> dict[str, Any]:
        """The filters' bound values, by parameter name (a filter not given: none)."""
        params: dict[str, Any] = {}
        if self.type is not None:
            params["p_type"] = self.type
        if self.min_confidence is not None:
            params["p_min"] = self.min_confidence
        if self.project_slug is not None:
            params["p_slug"] = sql.project_slug_value(self.project_slug, self.encoded)
        return params

    @staticmethod
    def shape(params: Mapping[str, Any]) -> tuple[bool, bool, bool]:
        """Which filters the statement has: by type, by confidence, by project slug."""
        return "p_type" in params, "p_min" in params, "p_slug" in params


def list_reflexion(scope: Scope, type: str | None = None, min_confidence: float | None = None,
                   project_slug: str | None = None) -> list[ReflexionEntry]:
    """Every entry, filtered, as 10.17.4's ``listReflexion``.

    Ordered by confidence, then updated_at_ms, both descending, then id. ``type``:
    that type only; ``min_confidence``: confidence at least this (inclusive);
    ``project_slug``: ``adaptive_state["project_slug"]`` is exactly this string (as
    JavaScript's ``===``: the number 1 does not match "1"). None or "" for type or
    project_slug means no filter.

    The project_slug filter is index-backed: revision 0005's expression index on the
    JSON path ``project_slug`` of ``adaptive_state_json`` (SQLite: a B-tree on the
    extracted string; PostgreSQL: a hash index on ``adaptive_state_json ->
    'project_slug'``), so it stays fast on 100,000 entries.
    """
    checked = _ListFilters.of(type, min_confidence, project_slug)
    with scope.transaction(write=False) as tx:
        params = checked.params(tx.sql)
        statement = list_statement(tx.sql, *checked.shape(params))
        return [from_row(ReflexionEntry, row) for row in statement.rows(tx, params)]


def reflexion_cursor(entry: ReflexionEntry) -> str:
    """The cursor of the page that starts after ``entry``."""
    return f"{entry.confidence!r}:{entry.updated_at_ms}:{entry.id}"


def _cursor_params(cursor: object) -> dict[str, Any]:
    """The bound values of the rows after ``cursor`` (ValidationError for a bad one)."""
    match = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    try:
        confidence = float(match.group(1)) if match is not None else math.nan
    except ValueError:
        confidence = math.nan
    if match is None or math.isnan(confidence):
        raise ValidationError(f"after must be a cursor that page_reflexion returned, not "
                              f"{describe(cursor)}")
    return {"p_after_c": confidence,
            "p_after_u": require_time(int(match.group(2)), "after's time"),
            "p_after_id": match.group(3)}


def page_reflexion(scope: Scope, type: str | None = None, min_confidence: float | None = None,
                   project_slug: str | None = None, limit: int = 50,
                   after: str | None = None) -> ReflexionPage:
    """A page of ``list_reflexion``'s entries (the same filters, the same order):
    ``limit`` entries (1..MAX_PAGE) after the cursor ``after`` (None: from the first),
    and the cursor of the next page (None after the last). A page reads ``limit`` entries
    past the cursor, however many match: a list of any length, a page at a time."""
    checked = _ListFilters.of(type, min_confidence, project_slug)
    size = require_int(limit, "limit", minimum=1, maximum=MAX_PAGE)
    keyset = _cursor_params(after) if after is not None else {}
    with scope.transaction(write=False) as tx:
        params = {**checked.params(tx.sql), **keyset, "p_limit": size + 1}
        statement = page_statement(tx.sql, *checked.shape(params), bool(keyset))
        rows = [from_row(ReflexionEntry, row) for row in statement.rows(tx, params)]
    entries = rows[:size]
    return ReflexionPage(entries, reflexion_cursor(entries[-1]) if len(rows) > size else None)


def patch_reflexion(scope: Scope, id: str, **patch: Unpack[ReflexionPatch]
                    ) -> ReflexionEntry | None:
    """Set the given fields of an entry, as 10.17.4's ``patchReflexion``; None if missing.

    ``context=None`` and ``adaptive_state=None`` keep the current value;
    ``updated_at_ms`` defaults to now. Counts and confidence are stored as given
    (confidence is not recalculated). ``id`` and ``created_at_ms`` cannot be patched;
    an unknown field, like any bad value, is a ValidationError, and nothing is written.
    """
    require_id(id, "id")
    values = check_patch(patch)
    if values.get("updated_at_ms") is None:
        values["updated_at_ms"] = now_ms()
    statement = patch_statement(tuple(sorted(values)))
    with scope.transaction() as tx:
        rows = statement.rows(tx, {**values, "p_id": id})
        return from_row(ReflexionEntry, rows[0]) if rows else None


def delete_reflexion(scope: Scope, id: str) -> bool:
    """Delete an entry; True when there was one (10.17.4's ``deleteReflexion``)."""
    require_id(id, "id")
    with scope.transaction() as tx:
        return _DELETE.run(tx, {"p_id": id}) > 0
