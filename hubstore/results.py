"""Small frozen results returned by store methods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hubstore.models import AssignJob, Message, ReflexionEntry


@dataclass(frozen=True, slots=True)
class Lease:
    """An agent's lease; ``lease_id`` is None for a refresh."""

    agent_id: str
    lease_id: str | None
    lease_expires_ms: int
    server_time_ms: int


@dataclass(frozen=True, slots=True)
class LookupResult:
    """What reflexion's lookup found: entries by confidence, the first as best match."""

    found: bool
    entries: list[ReflexionEntry]
    best_match: ReflexionEntry | None


@dataclass(frozen=True, slots=True)
class AssignOutcome:
    """A reported result: the job afterwards and the supervisor event recorded."""

    job: AssignJob
    event: str
    message: Message | None = None


@dataclass(frozen=True, slots=True)
class AssignPage:
    """One page of jobs (``page_assigns``): the jobs, most recently updated first, and
    the cursor of the page after it (None when this one is the last)."""

    jobs: list[AssignJob]
    next: str | None


@dataclass(frozen=True, slots=True)
class MessagePage:
    """One page of a trace's messages (``page_messages_by_trace``): the messages, oldest
    first, and the cursor of the page after it (None when this one is the last)."""

    messages: list[Message]
    next: str | None


@dataclass(frozen=True, slots=True)
class ReflexionPage:
    """One page of reflexion entries (``page_reflexion``): the entries, in
    ``list_reflexion``'s order, and the cursor of the page after it (None when this one
    is the last)."""

    entries: list[ReflexionEntry]
    next: str | None
