"""Input checks shared by the services. Each raises ValidationError before any write."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from hubstore.errors import ValidationError, describe
from hubstore.jsontype import MAX_JSON_DEPTH, check_json, text_problem

#: JavaScript's WhiteSpace and LineTerminator code points: what \s and trim() mean there
#: (the reference's text checks and normalize_error).
JS_SPACE_CHARS = (
    "\t\n\v\f\r \u00a0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)

#: Ids and other keys that PostgreSQL indexes with a B-tree (agent ids, message, job,
#: request and entry ids, topics, trace and correlation ids, team names) are at most this
#: many UTF-8 bytes. A B-tree row holds about 2,700 bytes; the widest index here holds
#: two such keys (``ix_messages_topic_feed``: topic, time, id).
MAX_KEY_BYTES = 1_000
#: A reflexion pattern (indexed on its own) may be longer: error texts are long.
MAX_PATTERN_BYTES = 2_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Durations (ttl_ms, heartbeat_ttl_ms, max_age_ms...) and now_ms are within +-2**62, so
#: that a time plus or minus a duration still fits in 64 bits.
MAX_DURATION_MS = 2**62


def refuse_unknown(given: Iterable[object], known: Iterable[str], what: str) -> None:
    """Raise ValidationError when ``given`` (field names) holds one not in ``known``
    (a typo must not pass silently), naming them and the known ones. The names may be
    anything a mapping holds: each is shown by describe()."""
    allowed = set(known)
    unknown = sorted({describe(name, 60) for name in given if name not in allowed})
    if unknown:
        raise ValidationError(f"{what} got unknown field(s) {', '.join(unknown)}; "
                              f"it takes {', '.join(sorted(allowed))}")


def require_str(value: object, what: str) -> str:
    """A string that both dialects can store: no U+0000, no lone surrogate."""
    if not isinstance(value, str):
        raise ValidationError(
            f"{what} must be a string, got {type(value).__name__} {describe(value)}")
    if "\x00" in value or not value.isascii():
        problem = text_problem(value)
        if problem:
            raise ValidationError(f"{what} {problem}")
    return value


def _check_key_length(value: str, what: str, limit: int = MAX_KEY_BYTES) -> str:
    if len(value) * 4 > limit and len(value.encode("utf-8")) > limit:
        raise ValidationError(
            f"{what} is {len(value.encode('utf-8')):,} bytes long (UTF-8); "
            f"hubstore takes at most {limit:,}")
    return value


def require_id(value: object, what: str) -> str:
    """A non-empty string id, at most MAX_KEY_BYTES long."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{what} must be a non-empty string, got {describe(value)}")
    return _check_key_length(require_str(value, what), what)


def optional_id(value: object, what: str) -> str | None:
    """None, or a non-empty string id ('' counts as None, as in the reference)."""
    if value is None or value == "":
        return None
    return require_id(value, what)


def require_key(value: object, what: str, limit: int = MAX_KEY_BYTES) -> str:
    """A string (possibly empty) that is indexed: at most ``limit`` UTF-8 bytes."""
    return _check_key_length(require_str(value, what), what, limit)


def lookup_key(value: object, what: str) -> str:
    """A string to look a row up by (a getter's id): any length, '' finds nothing."""
    return require_str(value, what)


def optional_lookup(value: object, what: str) -> str | None:
    """None, or a string to filter by."""
    return None if value is None else require_str(value, what)


def require_text(value: object, what: str) -> str:
    """A string (possibly empty) for an unindexed text column."""
    return require_str(value, what)


def require_callable(value: object, what: str) -> None:
    """A function (or any callable): refused up front rather than failing when called."""
    if not callable(value):
        raise ValidationError(f"{what} must be callable, got {type(value).__name__} "
                              f"{describe(value)}")


def optional_listen_url(value: object, what: str = "listen_url") -> object:
    """None, a bool or a URL (an sqlalchemy URL or a string), as ``listen_url`` takes."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return require_str(value, what)
    from sqlalchemy.engine import URL

    if not isinstance(value, URL):
        raise ValidationError(f"{what} must be a URL (a string or an sqlalchemy URL), "
                              f"True, False or None; got {type(value).__name__} "
                              f"{describe(value)}")
    return value


def require_bool(value: object, what: str) -> bool:
    """True or False (not 1, 0 or a string)."""
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be True or False, got {describe(value)}")
    return value


def require_enum(value: object, allowed: Iterable[str], what: str) -> str:
    """One of the allowed strings."""
    choices = tuple(allowed)
    if not isinstance(value, str) or value not in choices:
        raise ValidationError(f"{what} must be one of {', '.join(choices)}; got {describe(value)}")
    return value


def require_int(value: object, what: str, *, minimum: int | None = INT64_MIN,
                maximum: int | None = INT64_MAX) -> int:
    """An int (not a bool) within the given bounds (by default: 64 bits)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{what} must be an integer, got {describe(value)}")
    low = INT64_MIN if minimum is None else minimum
    high = INT64_MAX if maximum is None else maximum
    if value < low:
        raise ValidationError(f"{what} must be at least {low}, got {describe(value)}")
    if value > high:
        raise ValidationError(f"{what} must be at most {high}, got {describe(value)}")
    return int(value)


def optional_int(value: object, what: str) -> int | None:
    """None or a 64-bit int."""
    return None if value is None else require_int(value, what)


def require_duration(value: object, what: str) -> int:
    """A duration in milliseconds: an int in 0..MAX_DURATION_MS."""
    return require_int(value, what, minimum=0, maximum=MAX_DURATION_MS)


def require_cron(value: object, what: str = "cron") -> str:
    """A cron expression of exactly five fields (minute, hour, day of month, month, day
    of week; UTC). croniter would also take six (read as a seconds field *last*:
    ``"0 0 3 * * *"`` would run on the 3rd of each month, not at 03:00), so anything
    but five fields is refused."""
    from croniter import croniter  # (imported on first use: the import costs ~10 ms)

    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{what} must be a cron expression of five fields (minute "
                              f"hour day-of-month month day-of-week, UTC, such as "
                              f"'*/5 * * * *'), not {describe(value)}")
    fields = value.split()
    if len(fields) != 5:
        raise ValidationError(
            f"{what} must have exactly five fields (minute hour day-of-month month "
            f"day-of-week, UTC, such as '0 3 * * *'), not {len(fields)}: {value!r} "
            "(hubstore has no seconds field)")
    if not croniter.is_valid(value):
        raise ValidationError(f"{what} is not a valid cron expression of five fields "
                              f"(such as '*/5 * * * *'): {value!r}")
    return value


def require_time(value: object, what: str) -> int:
    """A time in milliseconds: an int in -MAX_DURATION_MS..MAX_DURATION_MS."""
    return require_int(value, what, minimum=-MAX_DURATION_MS, maximum=MAX_DURATION_MS)


def require_number(value: object, what: str, *, infinite: bool = False) -> float:
    """A finite int or float (not a bool), as a float. ``infinite=True`` also takes the
    float infinities; an int too large for a float and NaN are refused either way."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{what} must be a number, got {describe(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ValidationError(f"{what} is too large for a float: {describe(value)}") from None
    if math.isnan(number) or (math.isinf(number) and not infinite):
        raise ValidationError(f"{what} must be a finite number, got {describe(value)}")
    return number


# JavaScript's Number(string): StringNumericLiteral after trimming JavaScript's white
# space. No underscores, no "inf"/"nan" spellings, no sign on 0x/0o/0b literals.
_JS_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_JS_RADIX = {"x": 16, "o": 8, "b": 2}


def js_number(value: object) -> float:
    """JavaScript's ``Number(value)`` for the values Python callers pass (NaN when it is
    not a number).

    None is JavaScript's null (0); True/False are 1/0; ints and floats are themselves
    (an int too large for a float is an infinity); a string is trimmed of JavaScript's
    white space, then "" is 0, "Infinity"/"+Infinity"/"-Infinity" are infinities,
    "0x1F"/"0o17"/"0b101" (any case, no sign) are hex/octal/binary, and decimal
    literals ("12", " 12 ", "-1.5", ".5", "5.", "1e3", "+2E-3") are their value;
    anything else ("1_000", "12px", "0x", "-0x10", "inf", "nan", "1e") is NaN.
    Every other object (lists, dicts, Decimals...) is NaN: hubstore does not apply
    JavaScript's toString/valueOf conversions.
    """
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value
    if not isinstance(value, str):
        return math.nan
    text = value.strip(JS_SPACE_CHARS)
    if not text:
        return 0.0
    if text in ("Infinity", "+Infinity"):
        return math.inf
    if text == "-Infinity":
        return -math.inf
    if len(text) > 2 and text[0] == "0" and text[1].lower() in _JS_RADIX:
        digits = text[2:]
        if not digits.isascii() or not digits.isalnum():
            return math.nan
        try:
            whole = int(digits, _JS_RADIX[text[1].lower()])
        except ValueError:
            return math.nan
        try:
            return float(whole)
        except OverflowError:
            return math.inf
    if _JS_DECIMAL.fullmatch(text):
        return float(text)
    return math.nan


def as_number(value: object) -> float | None:
    """JavaScript's Number(value) where it is finite, else None (see js_number)."""
    number = js_number(value)
    return number if math.isfinite(number) else None


def clamp(value: object, fallback: int, low: int, high: int) -> int:
    """The reference's clamp: a finite number truncated into [low, high], else fallback."""
    number = as_number(value)
    if number is None:
        return fallback
    return max(low, min(int(number), high))


def counter(value: object, what: str, *, default: int, minimum: int) -> int:
    """The reference's ``Math.max(minimum, Number(value) || default)`` for a count.

    A non-number or 0 means ``default``. A number that is not whole (2.7), infinite, or
    outside 64 bits is refused: the reference would store it as given (SQLite keeps a
    REAL in an INTEGER column), which an integer column on PostgreSQL cannot.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number: int | float = value
    else:
        number = js_number(value)
        if math.isnan(number):
            return max(minimum, default)
        if not math.isfinite(number) or not number.is_integer():
            raise ValidationError(f"{what} must be a whole number, got {describe(value)}")
    result = max(minimum, int(number) or default)
    return require_int(result, what)


def json_value(value: Any, what: str, *, default: Any = None,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A strict JSON value (nested at most ``max_depth`` deep); None becomes ``default``."""
    if value is None:
        return default
    check_json(value, what, max_depth=max_depth)
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
    """A list of strings; None becomes []. A str, bytes or a dict (whose keys would be
    taken silently) is refused."""
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a list of strings, got {describe(value)}")
    items = list(value)
    for index, item in enumerate(items):
        require_key(item, f"{what}[{index}]")
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
