"""Small test helpers shared by several test modules."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def present(value: T | None) -> T:
    """What a getter returned, asserted to be there (a row the test expects to exist)."""
    assert value is not None
    return value


def record_calls(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[Any]:
    """Wrap the method ``owner.name`` for this test: the list of the first argument each
    call passed (the statement, for Connection.execute and exec_driver_sql)."""
    calls: list[Any] = []
    real = getattr(owner, name)

    def recording(self: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(first)
        return real(self, first, *args, **kwargs)

    monkeypatch.setattr(owner, name, recording)
    return calls
