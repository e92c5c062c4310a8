"""recalc_confidence: success ratio pulled towards 0.5 while hits are few; counts that
are not numbers are refused, and NaN, booleans and huge counts still give one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from hubstore.errors import ValidationError
from hubstore.reflexion import recalc_confidence


@dataclass
class _Entry:
    hit_count: int
    success_count: int


def test_no_entry() -> None:
    assert recalc_confidence(None) == 0.5


@pytest.mark.parametrize("hits", [0, -3, None])
def test_no_hits(hits: int | None) -> None:
    assert recalc_confidence({"hit_count": hits, "success_count": 2}) == 0.5


def test_mapping() -> None:
    assert recalc_confidence({"hit_count": 5, "success_count": 5}) == pytest.approx(0.75)


def test_object() -> None:
    assert recalc_confidence(_Entry(hit_count=5, success_count=5)) == pytest.approx(0.75)
    assert recalc_confidence(_Entry(hit_count=0, success_count=0)) == 0.5


def test_full_decay_after_ten_hits() -> None:
    assert recalc_confidence({"hit_count": 20, "success_count": 5}) == pytest.approx(0.25)
    assert recalc_confidence(_Entry(hit_count=10, success_count=10)) == pytest.approx(1.0)


def test_small_sample_leans_to_half() -> None:
    assert recalc_confidence({"hit_count": 1, "success_count": 0}) == pytest.approx(0.45)


@pytest.mark.parametrize("entry", [{"hit_count": "5"}, {"hit_count": 5, "success_count": []},
                                   {"hit_count": [1]}, {"success_count": "1", "hit_count": 2}])
def test_recalc_confidence_refuses_non_numbers(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="must be a number"):
        recalc_confidence(entry)


def test_recalc_confidence_of_huge_and_odd_numbers() -> None:
    assert recalc_confidence({"hit_count": math.nan}) == 0.5
    assert recalc_confidence({"hit_count": True, "success_count": True}) == pytest.approx(0.55)
    assert recalc_confidence({"hit_count": 10**400, "success_count": 1}) == 0.0
