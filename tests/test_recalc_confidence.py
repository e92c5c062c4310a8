"""recalc_confidence: success ratio pulled towards 0.5 while hits are few."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

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
