"""Small test helpers shared by several test modules."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    """What a getter returned, asserted to be there (a row the test expects to exist)."""
    assert value is not None
    return value
