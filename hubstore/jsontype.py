"""Strict JSON encoding and the JSON column type.

On SQLite the column is TEXT holding the exact JSON text, so a bare ``123``, ``"123"``,
``[]``, ``true`` or ``null`` keeps its form (a column declared JSON would get NUMERIC
affinity and turn ``123`` into an integer). On PostgreSQL it is JSONB. Python ``None``
is SQL NULL; NOT NULL columns get their default from the services instead.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy import Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from hubstore.errors import ValidationError

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def check_json(value: Any, what: str = "value") -> None:
    """Raise ValidationError unless ``value`` is strict, portable JSON.

    Refused: NaN and infinities, non-string object keys, U+0000 in a string (JSONB
    cannot hold it), and anything that is not None, bool, int, float, str, list, tuple
    or dict.
    """
    stack: list[tuple[Any, str]] = [(value, what)]
    while stack:
        item, where = stack.pop()
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValidationError(f"{where} is {item!r}, which is not valid JSON")
        elif isinstance(item, str):
            if "\x00" in item:
                raise ValidationError(f"{where} holds the character U+0000, which hubstore "
                                      "does not store in JSON")
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            for key, v in item.items():
                if not isinstance(key, str):
                    raise ValidationError(
                        f"{where} has the key {key!r} ({type(key).__name__}); "
                        "JSON object keys must be strings")
                if "\x00" in key:
                    raise ValidationError(f"{where} has a key holding U+0000")
                stack.append((v, f"{where}[{key!r}]"))
        else:
            raise ValidationError(
                f"{where} holds a {type(item).__name__}, which JSON cannot encode")


def dumps(value: Any, what: str = "value") -> str:
    """Strict, compact JSON text (the same form as JavaScript's JSON.stringify)."""
    check_json(value, what)
    return _encoder.encode(value)


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
            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "postgresql":
            check_json(value)
            return value
        return dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        try:
            return json.loads(value)
        except (TypeError, ValueError):
            return json.loads(self.fallback)

    def copy(self, **kw: Any) -> JSONText:
        return JSONText(self.fallback)
