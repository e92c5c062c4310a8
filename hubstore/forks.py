"""Which process this is, told without a system call.

Connections, the writers' lock and waiter threads of a parent must not be used by a
forked child. Checking ``os.getpid()`` on every unit of work cost a system call each
time (two per write); :func:`generation` is a number that changes in every forked
child (an ``os.register_at_fork`` hook), read as a plain global.
"""

from __future__ import annotations

import os

_generation = 0


def generation() -> int:
    """A number that differs in a forked child from its parent's."""
    return _generation


def _forked() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork()
    os.register_at_fork(after_in_child=_forked)
