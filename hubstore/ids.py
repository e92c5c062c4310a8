"""UUIDv7 ids (RFC 9562), monotonic within a process."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def now_ms() -> int:
    """Milliseconds since the epoch, as the hub stores times."""
    return time.time_ns() // 1_000_000


def uuidv7() -> str:
    """A new UUIDv7 string.

    48 bits of millisecond time, then a 12-bit counter in ``rand_a`` that goes up while
    the clock has not moved past the last id; on overflow the time moves on by 1 ms. Ids
    made in one process therefore sort by creation, as strings too.
    """
    global _last_ms, _seq
    with _lock:
        ms = now_ms()
        if ms <= _last_ms:
            ms = _last_ms
            _seq += 1
            if _seq > 0xFFF:
                ms += 1
                _seq = 0
        else:
            _seq = 0
        _last_ms = ms
        seq = _seq
    rand = int.from_bytes(os.urandom(8), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76
    value |= seq << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
