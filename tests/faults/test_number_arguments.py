"""Number arguments are read as JavaScript's ``Number()`` reads them, as the reference
store does: white space around, hex, octal and binary literals, booleans, null and ""
(0); anything else is NaN, which takes the argument's default. Whole-number arguments
refuse a fraction.
"""

from __future__ import annotations

import math

import pytest

from hubstore import HubStore
from hubstore.errors import ValidationError
from hubstore.validation import as_number, js_number


@pytest.mark.parametrize(("value", "number"), [
    ("12", 12.0), (" 12 ", 12.0), ("\t\n12\u00a0", 12.0), ("-1.5", -1.5), (".5", 0.5),
    ("5.", 5.0), ("1e3", 1000.0), ("+2E-3", 0.002), ("0x1F", 31.0), ("0X1f", 31.0),
    ("0o17", 15.0), ("0b101", 5.0), ("", 0.0), ("   ", 0.0), (None, 0.0), (True, 1.0),
    (False, 0.0), (7, 7.0), (2.5, 2.5), ("Infinity", math.inf), ("-Infinity", -math.inf),
    (10**400, math.inf),
])
def test_js_number_of_numbers(value: object, number: float) -> None:
    assert js_number(value) == number


@pytest.mark.parametrize("value", [
    "1_000", "12px", "0x", "-0x10", "+0x10", "inf", "nan", "NaN", "infinity", "1e", "e3",
    "1,5", "٣", "0x1G", "--1", [], [5], {}, b"5", object(),
])
def test_js_number_of_non_numbers_is_nan(value: object) -> None:
    assert math.isnan(js_number(value))
    assert as_number(value) is None


def test_number_arguments_follow_number_semantics(store: HubStore) -> None:
    for i in range(30):
        store.audit_log("event", "a", "poller", "t", payload={"i": i})
    assert len(store.poll_for_agent("poller", "1_000")) == 20  # NaN: the default
    assert len(store.poll_for_agent("poller", "0x10")) == 16
    assert len(store.poll_for_agent("poller", " 7 ")) == 7
    assert len(store.poll_for_agent("poller", None)) == 1  # Number(null) is 0: at least 1
    assert len(store.poll_for_agent("poller", "")) == 1  # Number("") is 0
    assert len(store.poll_for_agent("poller", [])) == 20
    job = store.create_assign("lead", "w", priority="7", timeout_ms="1_000", ttl_ms="0x10")
    assert job.priority == 7
    assert job.timeout_ms == 600_000  # NaN: the default
    assert job.ttl_ms == 1_000  # clamped to at least 1 s, as the reference does
    with pytest.raises(ValidationError, match="whole number"):
        store.create_assign("lead", "w", attempt=2.7)  # type: ignore[arg-type]
    assert store.create_assign("lead", "w", attempt="3").attempt == 3  # type: ignore[arg-type]
