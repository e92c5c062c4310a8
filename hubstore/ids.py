"""UUIDv7 ids (RFC 9562), monotonic within a process."""

from __future__ import annotations

import os
import threading
import time

from hubstore import forks

_lock = threading.Lock()
_last_ms = 0
_seq = 0
#: Random bytes read from the OS 4 KiB at a time (one system call per 512 ids instead
#: of one per id); dropped in a forked child, which must not repeat its parent's ids.
_POOL_BYTES = 4096
_pool = b""
_pool_at = 0
_pool_fork = -1


def now_ms() -> int:
    """Milliseconds since the epoch, as the hub stores times."""
    return time.time_ns() // 1_000_000


def uuidv7() -> str:
    """A new UUIDv7 string.

    48 bits of millisecond time, then a 12-bit counter in ``rand_a`` that goes up while
    the clock has not moved past the last id; on overflow the time moves on by 1 ms. Ids
    made in one process therefore sort by creation, as strings too.
    """
    global _last_ms, _seq, _pool, _pool_at, _pool_fork
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
        if _pool_at >= len(_pool) or _pool_fork != forks.generation():
            _pool, _pool_at, _pool_fork = os.urandom(_POOL_BYTES), 0, forks.generation()
        rand = int.from_bytes(_pool[_pool_at:_pool_at + 8], "big")
        _pool_at += 8
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76
    value |= seq << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
