"""The batch calls' bounds: the most jobs one call takes, and a batch's items checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hubstore.errors import ValidationError, describe
from hubstore.validation import require_int

#: The most jobs one batch call takes.
MAX_BATCH = 1_000


def batch_size(value: object, what: str) -> int:
    """A batch's size: a whole number in 1..MAX_BATCH."""
    return require_int(value, what, minimum=1, maximum=MAX_BATCH)


def batch_items(items: object, what: str) -> list[dict[str, Any]]:
    """The batch as a list of dicts (refused unless a sequence of mappings, 1..MAX_BATCH)."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ValidationError(f"{what} must be a list of mappings, not {describe(items)}")
    batch_size(len(items), f"the number of {what}")
    for item in items:
        if not isinstance(item, Mapping):
            raise ValidationError(f"each of {what} must be a mapping, not {describe(item)}")
    return [dict(item) for item in items]
