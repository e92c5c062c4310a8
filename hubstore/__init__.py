"""hubstore: the triflux hub store as a typed SQLAlchemy 2 data layer.

SQLite is the embedded default; PostgreSQL (psycopg 3) serves hubs that outgrow one
machine. See README.md and the docs/ folder.

``import hubstore`` is cheap: it loads the error classes only. The names below that need
SQLAlchemy (HubStore, UnitOfWork...) are imported on first use (PEP 562), and so is
``__version__`` (importlib.metadata is slow to import); ``from hubstore import HubStore``
pays for SQLAlchemy then. See benchmarks/bench_import.py.
"""

from __future__ import annotations

import logging
from importlib import import_module
from typing import TYPE_CHECKING, Any

from hubstore.errors import (
    AssignCancelled,
    AssignNotFound,
    DatabaseBusy,
    DatabaseUnavailable,
    DuplicateKey,
    HubStoreError,
    IllegalTransition,
    ReadOnlyUnitOfWork,
    RetryExhausted,
    SchemaNotCurrent,
    StaleAttempt,
    StoreClosed,
    UnknownSchema,
    ValidationError,
    WorkerMismatch,
)

if TYPE_CHECKING:
    from hubstore.ids import uuidv7
    from hubstore.results import (
        AssignOutcome,
        AssignPage,
        Lease,
        LookupResult,
        MessagePage,
        ReflexionPage,
    )
    from hubstore.services.waiting import MessageFeed
    from hubstore.store import HubStore
    from hubstore.types import AssignEvent
    from hubstore.uow import UnitOfWork

    #: The installed distribution's version (pyproject.toml's ``version``).
    __version__: str

# A library logs through its logger and leaves the handlers to the application.
logging.getLogger("hubstore").addHandler(logging.NullHandler())

#: The public names imported on first use: name -> the module that defines it.
_LAZY = {
    "AssignEvent": "hubstore.types",
    "AssignOutcome": "hubstore.results",
    "AssignPage": "hubstore.results",
    "HubStore": "hubstore.store",
    "Lease": "hubstore.results",
    "LookupResult": "hubstore.results",
    "MessageFeed": "hubstore.services.waiting",
    "MessagePage": "hubstore.results",
    "ReflexionPage": "hubstore.results",
    "UnitOfWork": "hubstore.uow",
    "uuidv7": "hubstore.ids",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hubstore")
    except PackageNotFoundError:  # pragma: no cover - imported from a bare source tree
        return "0+unknown"


def __getattr__(name: str) -> Any:
    """The lazily imported names (PEP 562); each is kept as an attribute once read."""
    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


__all__ = [
    "AssignCancelled",
    "AssignEvent",
    "AssignNotFound",
    "AssignOutcome",
    "AssignPage",
    "DatabaseBusy",
    "DatabaseUnavailable",
    "DuplicateKey",
    "HubStore",
    "HubStoreError",
    "IllegalTransition",
    "Lease",
    "LookupResult",
    "MessageFeed",
    "MessagePage",
    "ReadOnlyUnitOfWork",
    "ReflexionPage",
    "RetryExhausted",
    "SchemaNotCurrent",
    "StaleAttempt",
    "StoreClosed",
    "UnitOfWork",
    "UnknownSchema",
    "ValidationError",
    "WorkerMismatch",
    "__version__",
    "uuidv7",
]
