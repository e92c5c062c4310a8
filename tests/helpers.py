"""Small test helpers shared by several test modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from hubstore.models import AssignJob
    from hubstore.types import AssignEvent

T = TypeVar("T")
#: What the assign status listeners were told: (event, job) per status change.
Heard = list[tuple["AssignEvent", "AssignJob"]]


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
