"""Errors raised by hubstore. Every one carries a stable ``code``."""

from __future__ import annotations


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


class DatabaseBusy(HubStoreError):
    """The write lock was not free within the busy timeout."""

    code = "DATABASE_BUSY"


class DatabaseUnavailable(HubStoreError):
    """The database cannot be used: the server refused, timed out or went away, or the
    file is read-only or its disk is full. The message says which."""

    code = "DATABASE_UNAVAILABLE"


__all__ = [
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
    "UnknownSchema",
    "ValidationError",
    "WorkerMismatch",
]
