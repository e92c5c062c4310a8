"""hubstore: the triflux hub store as a typed SQLAlchemy 2 data layer.

SQLite is the embedded default; PostgreSQL (psycopg 3) serves hubs that outgrow one
machine. See README.md and the docs/ folder.
"""

import logging
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

from hubstore.errors import (
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
    UnknownSchema,
    ValidationError,
    WorkerMismatch,
)
from hubstore.ids import uuidv7
from hubstore.results import AssignOutcome, Lease, LookupResult
from hubstore.store import HubStore
from hubstore.uow import UnitOfWork

# A library logs through its logger and leaves the handlers to the application.
logging.getLogger("hubstore").addHandler(logging.NullHandler())

try:
    #: The installed distribution's version (pyproject.toml's ``version``).
    __version__: str = _installed_version("hubstore")
except PackageNotFoundError:  # pragma: no cover - imported from a bare source tree
    __version__ = "0+unknown"

__all__ = [
    "AssignNotFound",
    "AssignOutcome",
    "DatabaseBusy",
    "DatabaseUnavailable",
    "DuplicateKey",
    "HubStore",
    "HubStoreError",
    "IllegalTransition",
    "Lease",
    "LookupResult",
    "ReadOnlyUnitOfWork",
    "RetryExhausted",
    "SchemaNotCurrent",
    "StaleAttempt",
    "UnitOfWork",
    "UnknownSchema",
    "ValidationError",
    "WorkerMismatch",
    "__version__",
    "uuidv7",
]
