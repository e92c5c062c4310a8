"""hubstore: the triflux hub store as a typed SQLAlchemy 2 data layer.

SQLite is the embedded default; PostgreSQL (psycopg 3) serves hubs that outgrow one
machine. See README.md.
"""

from hubstore.errors import (
    AssignNotFound,
    HubStoreError,
    IllegalTransition,
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

__all__ = [
    "AssignNotFound",
    "AssignOutcome",
    "HubStore",
    "HubStoreError",
    "IllegalTransition",
    "Lease",
    "LookupResult",
    "RetryExhausted",
    "SchemaNotCurrent",
    "StaleAttempt",
    "UnitOfWork",
    "UnknownSchema",
    "ValidationError",
    "WorkerMismatch",
    "uuidv7",
]
