"""normalize_error against the reference JavaScript normalizeError.

``data/normalize_error_vectors.json`` holds [input, expected] pairs whose expected values were
produced by the reference function itself under Node.js 20 (V8, ICU 78): paths, line:col,
timestamps, ids, numbers, and the Unicode traps (JavaScript's own whitespace set, ASCII-only
``\\w``/``\\d``/``\\b``, ``$`` as end of input, final sigma, newer Unicode case mappings).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hubstore.reflexion import normalize_error

DATA = Path(__file__).parents[1] / "data"
VECTORS: list[list[str]] = json.loads(
    (DATA / "normalize_error_vectors.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("message", "expected"), VECTORS, ids=[str(i) for i in range(len(VECTORS))]
)
def test_matches_reference_vectors(message: str, expected: str) -> None:
    assert normalize_error(message) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("ECONNREFUSED /tmp/x/y.sock", "econnrefused <file>"),
        (
            'TypeError: Cannot read property "foo" of undefined',
            'typeerror: cannot read property "foo" of undefined',
        ),
        ("    at main (C:\\app\\src\\main.js:12:5)\n", "at main (<file>:<line>)"),
        ("failed at line 42", "failed at line <line>"),
        ("at 2024-03-15T12:34:56.789Z", "at <time>"),
        ("job 0190F3A2-7B4C-7DEF-8A12-3456789ABCDE", "job <id>"),
        ("after 1712345678901 ms, port 8080", "after <time> ms, port <num>"),
        # JavaScript's \s: U+FEFF counts, U+0085 and U+001C do not.
        ("a\ufeffb\u0085c\u001cd", "a b\u0085c\u001cd"),
        # x:10 followed by a newline: JavaScript's $ is the end of input only.
        ("x:10\n", "x:<line>"),
        # ASCII-only \b and \d: Hangul is not a word character, Arabic digits are not digits.
        ("에러12345 ١٢٣٤٥", "에러<num> ١٢٣٤٥"),
        ("ΟΔΟΣ ΣΦΑΛΜΑ", "οδος σφαλμα"),
        ("İ", "i\u0307"),
    ],
)
def test_readable_cases(message: str, expected: str) -> None:
    assert normalize_error(message) == expected


@pytest.mark.parametrize("message", [None, "", 0, 123, 1.5, True, b"bytes", ["x"], {"a": 1}])
def test_non_string_or_empty_gives_empty(message: object) -> None:
    assert normalize_error(message) == ""
