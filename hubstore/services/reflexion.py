"""Reflexion entries: learned errors and their solutions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Text,
    TextClause,
    and_,
    bindparam,
    cast,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from hubstore.errors import ValidationError
from hubstore.ids import now_ms, uuidv7
from hubstore.jsontype import dumps
from hubstore.models import REFLEXION_TYPES, ReflexionEntry, table_of
from hubstore.services.base import Operations, const, resolve_now
from hubstore.validation import (
    json_object,
    require_enum,
    require_id,
    require_int,
    require_text,
)

if TYPE_CHECKING:
    from hubstore.uow import UnitOfWork

THIRTY_DAYS_MS = 30 * 24 * 60 * 60 * 1000
SUBSTRING_LIMIT = 10
NEEDLE_UTF16_UNITS = 100
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = _UPPER.lower()
_ASCII_LOWER = str.maketrans(_UPPER, _LOWER)
_entries = table_of(ReflexionEntry)
_by_confidence = (ReflexionEntry.confidence.desc(), ReflexionEntry.id)


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
            raise ValidationError(f"context keys must be strings, got {key!r}")
        if value is not None and not isinstance(value, str | int | float):
            raise ValidationError(
                f"context[{key!r}] must be a string, number, boolean or None to filter by, "
                f"got {type(value).__name__}")
        if value is not None:
            dumps(value, f"context[{key!r}]")
    return {k: v for k, v in context.items() if v is not None}


def _json_type(value: str | int | float) -> tuple[str, ...]:
    if isinstance(value, bool):
        return ("true",) if value else ("false",)
    if isinstance(value, int | float):
        return ("integer", "real")
    return ("text",)


def _sqlite_key_equals(key: str, value: str | int | float) -> ColumnElement[bool]:
    column = _entries.c.context_json
    if '"' in key:
        # SQLite's JSON paths cannot name a key holding a double quote: look it up
        # through json_each instead, still with the key bound.
        each = func.json_each(column).table_valued("key", "value", "type")
        conditions = [each.c.key == key, each.c.type.in_(_json_type(value))]
        if not isinstance(value, bool):
            conditions.append(each.c.value == value)
        return exists(select(1).select_from(each).where(*conditions))
    element = type_coerce(column, JSON)[key]  # SQLAlchemy binds the path '$."key"'
    type_ok = func.json_type(column, bindparam(None, f'$."{key}"', Text)).in_(_json_type(value))
    if isinstance(value, bool):
        return type_ok
    if isinstance(value, int | float):
        return and_(type_ok, element.as_float() == value)
    return and_(type_ok, element.as_string() == value)


def context_filters(uow: UnitOfWork, context: dict[str, Any]) -> list[ColumnElement[bool]]:
    """One equality per key, through SQLAlchemy's JSON operators; keys are bound."""
    if uow.dialect == "postgresql":
        column = type_coerce(_entries.c.context_json, JSONB)
        return [column[key] == cast(bindparam(None, dumps(value), Text), JSONB)
                for key, value in context.items()]
    return [_sqlite_key_equals(key, value) for key, value in context.items()]


def _substring_match(uow: UnitOfWork, needle: str) -> list[ColumnElement[bool] | TextClause]:
    """error_pattern contains needle, ignoring case for ASCII letters only (SQLite LIKE)."""
    if uow.dialect == "postgresql":
        folded = func.translate(_entries.c.error_pattern, const(_UPPER), const(_LOWER))
        pattern = "%" + like_escape(needle.translate(_ASCII_LOWER)) + "%"
        return [folded.like(pattern, escape="\\")]
    conditions: list[ColumnElement[bool] | TextClause] = [
        _entries.c.error_pattern.like("%" + like_escape(needle) + "%", escape="\\")]
    if uow.store.features.reflexion_fts and len(needle) >= 3:
        # The trigram index narrows the rows; LIKE above keeps the exact semantics.
        phrase = '"' + needle.replace('"', '""') + '"'
        conditions.append(text(
            "reflexion_entries.rowid IN (SELECT rowid FROM reflexion_entries_fts "
            "WHERE reflexion_entries_fts MATCH :fts_phrase)").bindparams(fts_phrase=phrase))
    return conditions


def recalc(hit_count: int, success_count: int) -> float:
    """The reference's confidence, clamped to 0..1."""
    from hubstore.reflexion import recalc_confidence

    value = recalc_confidence({"hit_count": hit_count, "success_count": success_count})
    return max(0.0, min(1.0, value))


class ReflexionOps(Operations):
    """Error learning."""

    def add_reflexion(self, error_pattern: str, error_message: str, solution: str,
                      context: dict[str, Any] | None = None, solution_code: str | None = None,
                      type: str = "reflexion",
                      adaptive_state: dict[str, Any] | None = None) -> ReflexionEntry:
        """A new entry with confidence 0.5 and one hit."""
        require_text(error_pattern, "error_pattern")
        require_text(error_message, "error_message")
        require_text(solution, "solution")
        ctx = json_object(context, "context")
        if solution_code is not None:
            require_text(solution_code, "solution_code")
        require_enum(type, REFLEXION_TYPES, "type")
        state = json_object(adaptive_state, "adaptive_state")
        with self.unit_of_work() as uow:
            now = now_ms()
            row = {
                "id": uuidv7(), "type": type, "error_pattern": error_pattern,
                "error_message": error_message, "context_json": ctx, "solution": solution,
                "solution_code": solution_code, "adaptive_state_json": state,
                "confidence": 0.5, "hit_count": 1, "success_count": 0, "last_hit_ms": now,
                "created_at_ms": now, "updated_at_ms": now,
            }
            uow.connection.execute(insert(_entries).values(row))
            row["context"] = row.pop("context_json")
            row["adaptive_state"] = row.pop("adaptive_state_json")
            return ReflexionEntry(**row)

    def get_reflexion(self, id: str) -> ReflexionEntry | None:
        """The entry, or None."""
        with self.unit_of_work(write=False) as uow:
            return uow.session.get(ReflexionEntry, id)

    def find_reflexion(self, error_pattern: str,
                       context: dict[str, Any] | None = None) -> list[ReflexionEntry]:
        """Entries with exactly this pattern; failing that, up to 10 that contain it.

        Both by confidence, highest first. Every non-None context value is an equality
        filter on that key of the stored context (True never matches 1).
        """
        require_text(error_pattern, "error_pattern")
        filters = check_context_filter(context)
        with self.unit_of_work(write=False) as uow:
            where = context_filters(uow, filters)
            exact = list(uow.session.scalars(
                select(ReflexionEntry).where(ReflexionEntry.error_pattern == error_pattern,
                                             *where).order_by(*_by_confidence)))
            if exact:
                return exact
            needle = first_utf16_units(error_pattern, NEEDLE_UTF16_UNITS)
            return list(uow.session.scalars(
                select(ReflexionEntry).where(*_substring_match(uow, needle), *where)
                .order_by(*_by_confidence).limit(SUBSTRING_LIMIT)))

    def update_reflexion_hit(self, id: str, success: bool = False) -> ReflexionEntry | None:
        """One more hit (and success): confidence is recalculated."""
        require_id(id, "id")
        with self.unit_of_work() as uow:
            entry = uow.session.get(ReflexionEntry, id, with_for_update=True,
                                    populate_existing=True)
            if entry is None:
                return None
            hits = entry.hit_count + 1
            successes = entry.success_count + (1 if success else 0)
            now = now_ms()
            return uow.session.scalars(
                update(ReflexionEntry).where(ReflexionEntry.id == id)
                .values(hit_count=hits, success_count=successes, last_hit_ms=now,
                        updated_at_ms=now, confidence=recalc(hits, successes))
                .returning(ReflexionEntry),
                execution_options={"populate_existing": True}).one()

    def prune_reflexion(self, max_age_ms: int = THIRTY_DAYS_MS, min_confidence: float = 0.2,
                        now_ms: int | None = None) -> int:
        """Delete entries both older than max_age and below min_confidence."""
        require_int(max_age_ms, "max_age_ms", minimum=0)
        if isinstance(min_confidence, bool) or not isinstance(min_confidence, int | float):
            raise ValidationError(f"min_confidence must be a number, got {min_confidence!r}")
        now = resolve_now(now_ms)
        with self.unit_of_work() as uow:
            result = uow.connection.execute(
                delete(_entries).where(_entries.c.updated_at_ms < now - max_age_ms,
                                       _entries.c.confidence < min_confidence))
            return int(result.rowcount)
