"""Input checks shared by the services. Each raises ValidationError before any write."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from hubstore.errors import ValidationError
from hubstore.jsontype import check_json


def require_id(value: object, what: str) -> str:
    """A non-empty string id."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{what} must be a non-empty string, got {value!r}")
    return value


def optional_id(value: object, what: str) -> str | None:
    """None, or a non-empty string id ('' counts as None, as in the reference)."""
    if value is None or value == "":
        return None
    return require_id(value, what)


def require_text(value: object, what: str) -> str:
    """A string (possibly empty)."""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, got {type(value).__name__}")
    return value


def require_enum(value: object, allowed: Iterable[str], what: str) -> str:
    """One of the allowed strings."""
    choices = tuple(allowed)
    if value not in choices:
        raise ValidationError(f"{what} must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


def require_int(value: object, what: str, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
    """An int (not a bool) within the given bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{what} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValidationError(f"{what} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValidationError(f"{what} must be at most {maximum}, got {value}")
    return value


def optional_int(value: object, what: str) -> int | None:
    """None or an int."""
    return None if value is None else require_int(value, what)


def as_number(value: object) -> float | None:
    """JavaScript's Number(value) where it is finite, else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value.strip() or "0")
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def clamp(value: object, fallback: int, low: int, high: int) -> int:
    """The reference's clamp: a finite number truncated into [low, high], else fallback."""
    number = as_number(value)
    if number is None:
        return fallback
    return max(low, min(int(number), high))


def json_value(value: Any, what: str, *, default: Any = None) -> Any:
    """A strict JSON value; None becomes ``default``."""
    if value is None:
        return default
    check_json(value, what)
    return value


def json_object(value: Any, what: str) -> dict[str, Any]:
    """A strict JSON object; None becomes {}."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{what} must be a JSON object (a dict), got {type(value).__name__}")
    obj = dict(value)
    check_json(obj, what)
    return obj


def string_list(value: Any, what: str) -> list[str]:
    """A list of strings; None becomes []."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a list of strings, got {value!r}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise ValidationError(f"{what} must hold only strings, got {item!r}")
    check_json(items, what)
    return items


def json_list(value: Any, what: str) -> list[Any]:
    """A JSON array; None becomes []."""
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a list, got {type(value).__name__}")
    items = list(value)
    check_json(items, what)
    return items
