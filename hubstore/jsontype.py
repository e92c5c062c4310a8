"""Strict JSON encoding and the JSON column type.

On SQLite the column is TEXT holding the exact JSON text, so a bare ``123``, ``"123"``,
``[]``, ``true`` or ``null`` keeps its form (a column declared JSON would get NUMERIC
affinity and turn ``123`` into an integer). On PostgreSQL it is JSONB. Python ``None``
is SQL NULL; NOT NULL columns get their default from the services instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from hubstore.errors import ValidationError, describe

#: The scanner json.loads itself ends in (value, end index).
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

#: How deeply arrays and objects may nest in a value given to hubstore (a scalar is at
#: depth 0, ``[[1]]`` at depth 2). Deeper values are refused, so that no encoder, decoder
#: or filter ever recurses far.
MAX_JSON_DEPTH = 200
#: What the columns accept: the hub wraps a caller's value in its own envelope (a handoff
#: message holds the job's payload), so stored values may nest a little deeper.
_STORED_DEPTH = MAX_JSON_DEPTH + 8
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Integral floats from this magnitude on print without a fraction ("1e+16"), which JSONB
#: reads as an integer. dumps writes them as "<digits>.0" so that they stay floats.
_BIG_FLOAT = 1e16
_FLOAT_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?e\+\d+|-0\.0(?![\d.e])')


def _path(where: Any) -> str:
    """'payload[0]["key"]' from the walk's (parent, key) chain."""
    parts: list[str] = []
    while isinstance(where, tuple):
        where, key = where
        parts.append(f"[{describe(key, 40)}]")
    return str(where) + "".join(reversed(parts))


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text on both dialects, or None.

    U+0000 (PostgreSQL's text and JSONB cannot hold it) and lone surrogates (not
    encodable as UTF-8) are refused everywhere.
    """
    if "\x00" in value:
        return "holds the character U+0000 (NUL), which hubstore does not store"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"holds a lone surrogate ({value[exc.start]!r} at index {exc.start}), "
                    "which is not valid Unicode text")
    return None


def _walk(value: Any, what: str, max_depth: int) -> bool:
    """Raise ValidationError unless ``value`` is portable JSON; True when it holds a float
    that dumps must spell out (see _BIG_FLOAT) or a negative zero."""
    special = False
    stack: list[tuple[Any, Any, int]] = [(value, what, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, where, depth = pop()
        kind = type(item)
        if kind is str:
            if "\x00" in item or not item.isascii():
                problem = text_problem(item)
                if problem:
                    raise ValidationError(f"{_path(where)} {problem}")
        elif item is None or kind is bool:
            continue
        elif kind is int:
            if not INT64_MIN <= item <= INT64_MAX:
                raise ValidationError(f"{_path(where)} is {describe(item)}, outside the "
                                      "64-bit integers hubstore stores")
        elif kind is float:
            if not -_BIG_FLOAT < item < _BIG_FLOAT:
                if not math.isfinite(item):
                    raise ValidationError(f"{_path(where)} is {item!r}, which is not valid JSON")
                special = special or item.is_integer()
            elif item == 0.0 and math.copysign(1.0, item) < 0:
                special = True
        elif kind is list or kind is tuple or kind is dict:
            if depth >= max_depth:
                raise ValidationError(
                    f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep")
            if kind is dict:
                for key, v in item.items():
                    if type(key) is not str:
                        raise ValidationError(
                            f"{_path(where)} has the key {describe(key)} ({type(key).__name__}); "
                            "JSON object keys must be strings")
                    if "\x00" in key or not key.isascii():
                        problem = text_problem(key)
                        if problem:
                            raise ValidationError(f"{_path(where)} has a key that {problem}")
                    push((v, (where, key), depth + 1))
            else:
                for i, v in enumerate(item):
                    push((v, (where, i), depth + 1))
        elif isinstance(item, bool | int | float | str | list | tuple | dict):
            # Subclasses (IntEnum, str enums, ...): checked as their base value.
            base: Any = next(t for t in (bool, int, float, str, list, tuple, dict)
                             if isinstance(item, t))
            push((base(item), where, depth))
        else:
            raise ValidationError(
                f"{_path(where)} holds a {type(item).__name__}, which JSON cannot encode")
    return special


def check_json(value: Any, what: str = "value", *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ValidationError unless ``value`` is strict, portable JSON.

    Refused: NaN and infinities, non-string object keys, U+0000 and lone surrogates in
    strings and keys (JSONB cannot hold the one, UTF-8 cannot encode the other),
    integers outside 64 bits, nesting deeper than MAX_JSON_DEPTH, and anything that is
    not None, bool, int, float, str, list, tuple or dict.
    """
    _walk(value, what, max_depth)


def _spell_float(match: re.Match[str]) -> str:
    token = match.group()
    if token[0] == '"':
        return token
    if token == "-0.0":
        return "0.0"  # JSONB has no negative zero (and JSON.stringify(-0) is "0")
    return f"{int(float(token))}.0"


def dumps(value: Any, what: str = "value", *, max_depth: int = _STORED_DEPTH) -> str:
    """Strict, compact JSON text (the same form as JavaScript's JSON.stringify).

    Floats stay floats on both dialects: an integral float of magnitude 1e16 or more is
    written with its digits and ".0" (``1e16`` -> ``10000000000000000.0``), since JSONB
    would read ``1e+16`` as an integer; -0.0 is written 0.0, as JSONB stores it.
    """
    special = _walk(value, what, max_depth)
    text = _encoder.encode(value)
    return _FLOAT_TOKEN.sub(_spell_float, text) if special else text


class JSONText(TypeDecorator[Any]):
    """JSON as TEXT on SQLite and JSONB on PostgreSQL; None is SQL NULL.

    ``fallback`` (JSON text, so that the type stays hashable for SQLAlchemy's statement
    cache) is what an unreadable legacy text reads as, like the reference's
    ``parseJson(text, fallback)``.
    """

    impl = Text
    cache_ok = True

    def __init__(self, fallback: str = "null") -> None:
        super().__init__()
        self.fallback = fallback

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            # (imported here: a SQLite-only process need not load the PostgreSQL dialect)
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "postgresql":
            # The engine's json_serializer (dumps) writes the text; check here so that a
            # bad value is a ValidationError whichever path binds it.
            check_json(value, max_depth=_STORED_DEPTH)
            return value
        return dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return self._parse(value)

    def _parse(self, value: Any) -> Any:
        """The JSON text read on SQLite (the fallback's value if it is not JSON)."""
        try:
            return json.loads(value)
        except (TypeError, ValueError, RecursionError):
            return json.loads(self.fallback)

    def copy(self, **kw: Any) -> JSONText:
        return JSONText(self.fallback)

    def sqlite_reader(self) -> Callable[[Any], Any]:
        """process_result_value on SQLite, for the hot read paths: the standard decoder's
        scanner called directly (json.loads adds a few checks around it); any text it
        does not take whole (whitespace around it, an error) goes through
        process_result_value's parsing, so the values read are the same."""
        scan = _scan_once
        slow = self._parse

        def read(value: Any) -> Any:
            if value is None:
                return None
            try:
                result, end = scan(value, 0)
            except Exception:  # StopIteration, JSONDecodeError, TypeError, RecursionError
                return slow(value)
            return result if end == len(value) else slow(value)

        return read
