"""Reflexion (error learning): pure pattern and confidence helpers, and store-level helpers.

``normalize_error`` is a byte-for-byte port of the reference's JavaScript ``normalizeError``
(REFERENCE.md section 2). JavaScript's regular expressions differ from Python's in ways that
matter here, so the patterns below are not a literal copy:

- ``\\w``, ``\\d`` and ``\\b`` are ASCII-only in JavaScript: every pattern uses ``re.ASCII``.
- ``\\s`` (and ``String.prototype.trim``) is JavaScript's own set, ``_JS_SPACE``: Unicode
  ``Zs`` plus tab, line terminators, VT, FF and U+FEFF, but not U+001C..U+001F nor U+0085.
- ``$`` without the ``m`` flag is the end of input only: ``\\Z``, never Python's ``$``.
- The ``i`` flag is spelled out as ``[0-9a-fA-F]``.
- ``toLowerCase`` is ``str.lower`` (both apply the full, locale-free Unicode mappings and the
  Final_Sigma rule), corrected where Python's Unicode data is older than V8's (see
  ``_js_lower``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from hubstore.validation import JS_SPACE_CHARS

if TYPE_CHECKING:
    from hubstore.models import ReflexionEntry
    from hubstore.results import LookupResult

__all__ = [
    "JS_SPACE_CHARS",
    "ReflexionStore",
    "learn_from_error",
    "lookup_solution",
    "normalize_error",
    "recalc_confidence",
    "report_outcome",
]

_JS_SPACE_CHARS = JS_SPACE_CHARS
_JS_SPACE = f"[{_JS_SPACE_CHARS}]"

# The reference's replacements, in order; each comment is the JavaScript original.
_REPLACEMENTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.ASCII), replacement)
    for pattern, replacement in (
        # /[A-Za-z]:\\[\w\\.\-/]+/g
        (r"[A-Za-z]:\\[\w\\.\-/]+", "<FILE>"),
        # /(?:\/[\w.\-]+){2,}/g
        (r"(?:/[\w.\-]+){2,}", "<FILE>"),
        # /:(\d+)(:\d+)?(?=[\s,)\]]|$)/g
        (rf":(\d+)(:\d+)?(?=[{_JS_SPACE_CHARS},)\]]|\Z)", ":<LINE>"),
        # /\b[Ll]ine\s+\d+/g
        (rf"\b[Ll]ine{_JS_SPACE}+\d+", "line <LINE>"),
        # /\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}[\w.+-]*/g
        (r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}[\w.+-]*", "<TIME>"),
        # /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi
        (
            r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
            "<ID>",
        ),
        # /\b[0-9a-f]{32,}\b/gi
        (r"\b[0-9a-fA-F]{32,}\b", "<ID>"),
        # /\b\d{10,13}\b/g
        (r"\b\d{10,13}\b", "<TIME>"),
        # /\b\d{4,}\b/g
        (r"\b\d{4,}\b", "<NUM>"),
    )
)
_JS_SPACE_RUN = re.compile(f"{_JS_SPACE}+")


# Where Python 3.11's Unicode 14 data and V8's (Node 20: ICU 78, Unicode 17) disagree, found by
# comparing every code point. Hex code points, "first-last" for a range.
def _code_points(spec: str) -> list[int]:
    """Expand "0897 1ACF-1ADD ..." into code points."""
    points: list[int] = []
    for item in spec.split():
        first, _, last = item.partition("-")
        points.extend(range(int(first, 16), int(last or first, 16) + 1))
    return points


def _mappings(spec: str) -> dict[int, int]:
    """Expand "A7CB:0264 10D50-10D65:10D70 ..." (a range maps onto the range from its target)."""
    mappings: dict[int, int] = {}
    for item in spec.split():
        source, target = item.split(":")
        for offset, point in enumerate(_code_points(source)):
            mappings[point] = int(target, 16) + offset
    return mappings


# Lower-case mappings, "upper:lower".
_LOWER_FIXES = _mappings(
    "1C89:1C8A A7CB:0264 A7CC:A7CD A7CE:A7CF A7D2:A7D3 A7D4:A7D5 A7DA:A7DB A7DC:019B"
    " 10D50-10D65:10D70 16EA0-16EB8:16EBB"
)

# Final_Sigma context classes: what a code point is when looking around a capital sigma.
_CASED, _IGNORABLE, _OTHER = 0, 1, 2
_CLASS_FIXES: dict[int, int] = {
    point: cls
    for cls, spec in (
        (
            _CASED,
            "1C89-1C8A A7CB-A7CF A7D2 A7D4 A7DA-A7DC 10D50-10D65 10D70-10D85 16EA0-16EB8"
            " 16EBB-16ED3 1DF25-1DF2A",
        ),
        (
            _IGNORABLE,
            "0897 0ECE 1ACF-1ADD 1AE0-1AEB A7F1 10D4E 10D69-10D6D 10D6F 10EC5 10EFA-10EFF 11241"
            " 113BB-113C0 113CE 113D0 113D2 113E1-113E2 11B60 11B62-11B64 11B66 11DD9"
            " 11F00-11F01 11F36-11F3A 11F40 11F42 11F5A 13439-13440 13447-13455 1611E-16129"
            " 1612D-1612F 16D40-16D42 16D6B-16D6C 16FF2-16FF3 1E030-1E06D 1E08F 1E4EB-1E4EF"
            " 1E5EE-1E5EF 1E6E3 1E6E6 1E6EE-1E6EF 1E6F5 1E6FF",
        ),
        (_OTHER, "0295 1171E"),
    )
    for point in _code_points(spec)
}


@lru_cache(maxsize=4096)
def _case_class(ch: str) -> int:
    """Whether ``ch`` is cased, case-ignorable (skipped) or neither, as V8 sees it."""
    fixed = _CLASS_FIXES.get(ord(ch))
    if fixed is not None:
        return fixed
    # Python's own view, read off its Final_Sigma rule (the same rule as V8's).
    if ("1" + ch + "\u03a3").lower().endswith("\u03c2"):
        return _CASED
    if ("A" + ch + "\u03a3").lower().endswith("\u03c2"):
        return _IGNORABLE
    return _OTHER


def _is_final_sigma(text: str, index: int) -> bool:
    """Unicode's Final_Sigma: a cased letter before, none after (skipping ignorables)."""
    for i in range(index - 1, -1, -1):
        cls = _case_class(text[i])
        if cls != _IGNORABLE:
            if cls != _CASED:
                return False
            break
    else:
        return False
    for i in range(index + 1, len(text)):
        cls = _case_class(text[i])
        if cls != _IGNORABLE:
            return cls != _CASED
    return True


def _js_lower(text: str) -> str:
    """JavaScript's ``toLowerCase``: ``str.lower`` with V8's newer Unicode data."""
    text = text.translate(_LOWER_FIXES)
    if "\u03a3" not in text:
        return text.lower()
    return "".join(
        ("\u03c2" if _is_final_sigma(text, i) else "\u03c3") if ch == "\u03a3" else ch.lower()
        for i, ch in enumerate(text)
    )


def normalize_error(msg: object) -> str:
    """Turn an error message into its pattern; '' for a non-string or empty message."""
    if not isinstance(msg, str) or not msg:
        return ""
    pattern = msg
    for regex, replacement in _REPLACEMENTS:
        pattern = regex.sub(replacement, pattern)
    return _JS_SPACE_RUN.sub(" ", _js_lower(pattern)).strip(_JS_SPACE_CHARS)


def recalc_confidence(entry: object) -> float:
    """Success ratio, pulled towards 0.5 while there are fewer than 10 hits."""
    if isinstance(entry, Mapping):
        hits, successes = entry.get("hit_count"), entry.get("success_count")
    else:
        hits = getattr(entry, "hit_count", None)
        successes = getattr(entry, "success_count", None)
    hit_count, success_count = _count(hits, "hit_count"), _count(successes, "success_count")
    if not hit_count > 0:  # "not >" also sends NaN to 0.5, as JavaScript's !NaN does
        return 0.5
    decay = min(1.0, hit_count / 10)
    return success_count / hit_count * decay + 0.5 * (1 - decay)


def _count(value: object, what: str) -> float:
    """A count for recalc_confidence as a float (None is 0); ValidationError for
    anything that is not a number (a string, a list...)."""
    from hubstore.errors import ValidationError, describe

    if value is None:
        return 0.0
    if not isinstance(value, int | float):
        raise ValidationError(f"{what} must be a number, got {type(value).__name__} "
                              f"{describe(value)}")
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


class ReflexionStore(Protocol):
    """What the store-level helpers need: a HubStore or a unit of work."""

    def find_reflexion(
        self, error_pattern: str, context: dict[str, Any] | None = None, /
    ) -> Sequence[ReflexionEntry]: ...

    def add_reflexion(
        self,
        *,
        error_pattern: str,
        error_message: str,
        solution: str,
        context: dict[str, Any] | None = None,
    ) -> ReflexionEntry: ...

    def update_reflexion_hit(
        self, entry_id: str, success: bool = False, /
    ) -> ReflexionEntry | None: ...

    def unit_of_work(self) -> AbstractContextManager[ReflexionStore]: ...


def lookup_solution(
    store: ReflexionStore, error_message: object, context: dict[str, Any] | None = None
) -> LookupResult:
    """Entries for this message's pattern, best (highest confidence) first."""
    from hubstore.results import LookupResult

    pattern = normalize_error(error_message)
    entries = list(store.find_reflexion(pattern, context)) if pattern else []
    if not entries:
        return LookupResult(False, [], None)
    return LookupResult(True, entries, entries[0])


def learn_from_error(
    store: ReflexionStore,
    error: str,
    solution: str,
    context: dict[str, Any] | None = None,
    success: bool = False,
) -> ReflexionEntry | None:
    """Record a hit on this error's entry, or add one; None without a pattern or solution."""
    pattern = normalize_error(error)
    if not pattern or not solution:
        return None
    with store.unit_of_work() as uow:
        # Only an entry with exactly this pattern is updated: the substring fallback of
        # find_reflexion could not find it, so a store that offers the exact lookup
        # alone is asked that (the same entries, without the trigram search).
        exact = getattr(uow, "find_reflexion_exact", None)
        existing = (exact or uow.find_reflexion)(pattern, context)
        if existing and existing[0].error_pattern == pattern:
            return uow.update_reflexion_hit(existing[0].id, success)
        entry = uow.add_reflexion(
            error_pattern=pattern, error_message=error, solution=solution, context=context
        )
        if success:
            return uow.update_reflexion_hit(entry.id, True)
        return entry


def report_outcome(store: ReflexionStore, entry_id: str, success: bool) -> ReflexionEntry | None:
    """Record whether applying an entry's solution worked (a hit)."""
    return store.update_reflexion_hit(entry_id, success)
