"""UUIDv7 ids."""

from __future__ import annotations

import uuid

import pytest

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


def _random_bits(ids: list[str]) -> set[int]:
    return {uuid.UUID(i).int & ((1 << 62) - 1) for i in ids}


def test_a_forked_child_does_not_repeat_its_parents_random_bits() -> None:
    """The random bytes are read from the OS in blocks: a forked child must not go on
    with the parent's block, or both would make ids with the same random part."""
    import os

    uuidv7()  # the parent has a block of random bytes in hand
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.write(write_end, " ".join(uuidv7() for _ in range(20)).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child = pipe.read().split()
    os.waitpid(pid, 0)
    parent = [uuidv7() for _ in range(20)]
    assert len(child) == 20
    assert not _random_bits(child) & _random_bits(parent)


def test_ids_keep_coming_past_a_block_of_random_bytes() -> None:
    ids = [uuidv7() for _ in range(2_000)]  # 16,000 random bytes: several blocks
    assert len(_random_bits(ids)) == 2_000


def test_ids_within_one_millisecond_count_up_then_move_the_time_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen clock: the 12-bit counter goes 0..4095, then the time moves on by 1 ms
    (and the text of the time with it); every id stays canonical, unique and sorted."""
    from hubstore import ids as module

    frozen = now_ms() + 10_000  # past any id made so far in this process
    monkeypatch.setattr(module, "now_ms", lambda: frozen)
    made = [uuidv7() for _ in range(5_000)]
    assert made == sorted(made) and len(set(made)) == 5_000
    parsed = [uuid.UUID(i) for i in made]
    assert all(str(u) == i and u.version == 7 for u, i in zip(parsed, made, strict=True))
    assert [u.int >> 80 for u in parsed[:4096]] == [frozen] * 4096
    assert [u.int >> 64 & 0xFFF for u in parsed[:4096]] == list(range(4096))
    assert {u.int >> 80 for u in parsed[4096:]} == {frozen + 1}
