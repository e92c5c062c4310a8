"""Errors raised by hubstore. Every one carries a stable ``code``; :func:`describe`
shows a caller's value in their messages."""

from __future__ import annotations

import builtins
import reprlib
from itertools import islice
from typing import Any


class HubStoreError(Exception):
    """Base class of every hubstore error."""

    code: str = "HUBSTORE"


class ValidationError(HubStoreError, ValueError):
    """Bad input, refused before anything is written."""

    code = "VALIDATION"


class AssignNotFound(HubStoreError, LookupError):
    """No assign job has that id."""

    code = "ASSIGN_NOT_FOUND"


class WorkerMismatch(HubStoreError):
    """A worker reported on a job that belongs to another worker."""

    code = "ASSIGN_WORKER_MISMATCH"


class StaleAttempt(HubStoreError):
    """A result for an attempt other than the job's current one."""

    code = "ASSIGN_ATTEMPT_MISMATCH"


class AssignCancelled(HubStoreError):
    """A worker reported on, or touched, a job that was cancelled (``cancel_assign``):
    the job is no longer its to run."""

    code = "ASSIGN_CANCELLED"


class RetryExhausted(HubStoreError):
    """A retry was asked for but the job has used all its retries."""

    code = "ASSIGN_RETRY_EXHAUSTED"


class IllegalTransition(HubStoreError):
    """A status move that the assign state machine does not allow."""

    code = "ASSIGN_ILLEGAL_TRANSITION"


class SchemaNotCurrent(HubStoreError):
    """The database is not migrated to the head revision."""

    code = "SCHEMA_NOT_CURRENT"


class UnknownSchema(HubStoreError):
    """The database holds hub tables that hubstore cannot identify."""

    code = "SCHEMA_UNKNOWN"


class ReadOnlyUnitOfWork(HubStoreError):
    """A write was attempted inside a read-only unit of work (``write=False``)."""

    code = "READ_ONLY"


class DuplicateKey(HubStoreError):
    """A row with that key exists already (for example a job_id given twice)."""

    code = "DUPLICATE_KEY"


class StoreClosed(HubStoreError):
    """A call on a store after ``close()`` (or after its ``with`` block): nothing is
    read or written; open a new store."""

    code = "STORE_CLOSED"

    def __init__(self, message: str = "this store is closed (by close() or at the end "
                 "of its with block): open a new one") -> None:
        super().__init__(message)


class DatabaseBusy(HubStoreError):
    """The write lock was not free within the busy timeout."""

    code = "DATABASE_BUSY"


class DatabaseUnavailable(HubStoreError):
    """The database cannot be used: the server refused, timed out or went away, or the
    file is read-only or its disk is full. The message says which.

    ``outcome_unknown`` is True when the connection was lost while the server was
    committing (a COMMIT, or the one statement of a call that runs in autocommit): the
    call's writes may be committed or not. Retry it with the same caller-chosen key
    (``job_id=``): a retry whose first try had committed raises DuplicateKey, which says
    the row exists. False whenever the call is known to have written nothing."""

    code = "DATABASE_UNAVAILABLE"
    #: Whether the call's writes may have been committed (see the class docstring).
    outcome_unknown: bool = False


class _Short(reprlib.Repr):
    """reprlib's bounded repr (a few levels, a few items each), made safe for any value:
    an int too long for ``str()``, a subclass of a container (shown through its base,
    never its own ``__repr__``, which could recurse), a ``__repr__`` that fails."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxtuple = self.maxlist = self.maxset = self.maxfrozenset = 8
        self.maxdeque = self.maxarray = 8
        self.maxdict = 6
        self.maxstring = self.maxother = 60
        self.maxlong = 100

    def repr1(self, x: Any, level: int) -> str:
        for base in (list, tuple, dict, set, frozenset):
            if isinstance(x, base):
                shown: str = getattr(self, f"repr_{base.__name__}")(x, level)
                return shown if type(x) is base else f"{type(x).__name__}({shown})"
        if isinstance(x, int) and not isinstance(x, bool):
            return self.repr_int(x, level)
        return super().repr1(x, level)

    # reprlib sorts sets and dicts first (all of their items): shown here in their own
    # order, the first few items only, as repr() shows them.
    def _first(self, x: Any, level: int, left: str, right: str, most: int) -> str:
        if level <= 0:
            return left + self.fillvalue + right
        pieces = [self.repr1(item, level - 1) for item in islice(x, most)]
        if len(x) > most:
            pieces.append(self.fillvalue)
        return left + ", ".join(pieces) + right

    def repr_set(self, x: Any, level: int) -> str:
        return self._first(x, level, "{", "}", self.maxset) if x else "set()"

    def repr_frozenset(self, x: Any, level: int) -> str:
        return (self._first(x, level, "frozenset({", "})", self.maxfrozenset) if x
                else "frozenset()")

    def repr_dict(self, x: Any, level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{" + self.fillvalue + "}"
        pieces = [f"{self.repr1(key, level - 1)}: {self.repr1(x[key], level - 1)}"
                  for key in islice(x, self.maxdict)]
        if len(x) > self.maxdict:
            pieces.append(self.fillvalue)
        return "{" + ", ".join(pieces) + "}"

    def repr_int(self, x: int, level: int) -> str:
        try:
            shown = builtins.repr(x)
        except ValueError:  # more digits than sys.get_int_max_str_digits() allows
            return f"<an integer of {x.bit_length():,} bits>"
        if len(shown) > self.maxlong:
            return f"<an integer of {len(str(int(x))):,} digits>"
        return shown

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            shown = builtins.repr(x)
        except Exception:  # any failure of a caller's __repr__ (RecursionError too)
            return f"<{type(x).__name__} object>"
        if len(shown) > self.maxother:
            half = max(0, (self.maxother - 3) // 2)
            shown = shown[:half] + "..." + shown[len(shown) - (self.maxother - 3 - half):]
        return shown


_SHORT = _Short()
_CONTAINERS = (list, tuple, dict, set, frozenset)
#: Items walked to tell how deeply a value nests (a bound on the work done).
_NESTING_WALK = 20_000


def _nesting(value: Any) -> tuple[int, bool]:
    """How many levels of lists, tuples, dicts and sets ``value`` nests (a scalar: 0),
    walked without recursion, depth first, over at most _NESTING_WALK items; True when
    the walk stopped early (then it nests at least that deep)."""
    if not isinstance(value, _CONTAINERS):
        return 0, False
    stack: list[Any] = [iter(value.values() if isinstance(value, dict) else value)]
    deepest, seen = 1, 0
    while stack:
        for child in stack[-1]:
            seen += 1
            if seen > _NESTING_WALK:
                return deepest, True
            if isinstance(child, _CONTAINERS):
                stack.append(iter(child.values() if isinstance(child, dict) else child))
                deepest = max(deepest, len(stack))
                break
        else:
            stack.pop()
    return deepest, False


def describe(value: object, width: int = 80) -> str:
    """``value`` shown for an error message: its repr, shortened to about ``width``
    characters, computed without recursion limits or unbounded work. A value nested
    deeper than the shown levels says how deep: ``[[[[...]]]] (a list nested 1,000
    levels deep)``. Never raises (whatever the value and its ``__repr__``)."""
    try:
        shown = _SHORT.repr(value)
        if len(shown) > width:
            shown = shown[:max(width - 3, 1)] + "..."
        if isinstance(value, _CONTAINERS):
            depth, more = _nesting(value)
            if depth > _SHORT.maxlevel:
                shown += (f" (a {type(value).__name__} nested {'at least ' if more else ''}"
                          f"{depth:,} levels deep)")
    except Exception:  # a container subclass whose iteration fails, ...
        return f"<{type(value).__name__} object>"
    return shown


__all__ = [
    "AssignCancelled",
    "AssignNotFound",
    "DatabaseBusy",
    "DatabaseUnavailable",
    "DuplicateKey",
    "HubStoreError",
    "IllegalTransition",
    "ReadOnlyUnitOfWork",
    "RetryExhausted",
    "SchemaNotCurrent",
    "StaleAttempt",
    "StoreClosed",
    "UnknownSchema",
    "ValidationError",
    "WorkerMismatch",
]
