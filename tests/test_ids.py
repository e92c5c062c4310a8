"""UUIDv7 ids."""

from __future__ import annotations

import uuid

from hubstore import uuidv7
from hubstore.ids import now_ms


def test_five_thousand_ids_are_unique_and_sorted() -> None:
    ids = [uuidv7() for _ in range(5000)]
    assert len(set(ids)) == 5000
    assert ids == sorted(ids)


def test_layout_per_rfc_9562() -> None:
    before = now_ms()
    value = uuid.UUID(uuidv7())
    assert value.version == 7 and value.variant == uuid.RFC_4122
    ms = value.int >> 80
    assert before <= ms <= now_ms() + 1
