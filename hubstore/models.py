"""Declarative models of the hub's eight tables, in the reference's on-disk format.

Column attributes keep the column names, except JSON columns, which hold parsed
Python values under shorter names (``Agent.topics`` maps ``topics_json``).
``to_dict()`` returns exactly what the reference store's getters return for a row.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast, get_args

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hubstore import types
from hubstore.ids import now_ms
from hubstore.jsontype import JSONText

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The allowed values, from the Literal types of the public signatures (hubstore.types).
AGENT_CLIS: tuple[str, ...] = get_args(types.AgentCli)
AGENT_STATUSES: tuple[str, ...] = get_args(types.AgentStatus)
MESSAGE_TYPES: tuple[str, ...] = get_args(types.MessageType)
MESSAGE_STATUSES: tuple[str, ...] = get_args(types.MessageStatus)
HUMAN_KINDS: tuple[str, ...] = get_args(types.HumanKind)
HUMAN_STATES: tuple[str, ...] = get_args(types.HumanState)
HUMAN_DEFAULT_ACTIONS: tuple[str, ...] = get_args(types.HumanDefaultAction)
ASSIGN_STATUSES: tuple[str, ...] = get_args(types.AssignStatus)
REFLEXION_TYPES: tuple[str, ...] = get_args(types.ReflexionType)

Millis = BigInteger  # every time is integer milliseconds since the epoch
#: Column info of hubstore's own columns in the reference's tables (not in to_dict()).
HUBSTORE_ONLY = {"hubstore_only": True}
#: Counts and ids the reference can make large: 64-bit on both dialects (revision 0006).
Counter = BigInteger().with_variant(Integer, "sqlite")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    _column_keys: ClassVar[dict[str, str]]
    _key_attr: ClassVar[str]

    @classmethod
    def column_keys(cls) -> dict[str, str]:
        """The attribute key of each column name (``payload_json`` -> ``payload``)."""
        keys = cls.__dict__.get("_column_keys")
        if keys is None:
            keys = {str(attr.columns[0].name): attr.key for attr in cls.__mapper__.column_attrs}
            cls._column_keys = keys
            cls._key_attr = cls.__mapper__.get_property_by_column(
                cls.__mapper__.primary_key[0]).key
        return keys

    @classmethod
    def key_attr(cls) -> str:
        """The attribute key of the (single) primary key column."""
        cls.column_keys()
        return cls._key_attr

    @classmethod
    def key_column(cls) -> str:
        """The name of the (single) primary key column."""
        return str(cls.__mapper__.primary_key[0].name)

    def to_dict(self) -> dict[str, Any]:
        """The row as the reference store's getter returns it (hubstore's own columns,
        which the reference does not know, left out)."""
        return {attr.key: getattr(self, attr.key) for attr in self.__mapper__.column_attrs
                if not attr.columns[0].info.get("hubstore_only")}

    def __repr__(self) -> str:
        pk = ", ".join(str(getattr(self, str(c.key))) for c in self.__mapper__.primary_key)
        return f"<{type(self).__name__} {pk}>"


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (
        CheckConstraint(_in("cli", AGENT_CLIS), name="cli"),
        CheckConstraint(_in("status", AGENT_STATUSES), name="status"),
        Index("idx_agents_status", "status"),
        Index("idx_agents_lease", "lease_expires_ms"),
    )

    agent_id: Mapped[str] = mapped_column(Text, primary_key=True)
    cli: Mapped[str] = mapped_column(Text)
    pid: Mapped[int | None] = mapped_column(Counter)
    capabilities: Mapped[Any] = mapped_column(
        "capabilities_json", JSONText("[]"), server_default=text("'[]'"))
    topics: Mapped[Any] = mapped_column(
        "topics_json", JSONText("[]"), server_default=text("'[]'"))
    last_seen_ms: Mapped[int] = mapped_column(Millis)
    lease_expires_ms: Mapped[int] = mapped_column(Millis)
    status: Mapped[str] = mapped_column(Text)
    meta: Mapped[Any] = mapped_column(
        "metadata_json", JSONText("{}"), server_default=text("'{}'"))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["metadata"] = d.pop("meta")
        return d


#: The instance attribute behind the models' ``deduplicated`` (set by the calls that
#: return a row already written instead of writing a second one).
DEDUPLICATED = "_hubstore_deduplicated"


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        CheckConstraint(_in("type", MESSAGE_TYPES), name="type"),
        CheckConstraint("priority BETWEEN 1 AND 9", name="priority"),
        CheckConstraint(_in("status", MESSAGE_STATUSES), name="status"),
        Index("idx_messages_status", "status"),
        # The reference's names, with hubstore's definitions since revision 0011: the
        # poll's direct branch, newest first, and the expiry sweep's queued messages.
        Index("idx_messages_to_agent", "to_agent", "created_at_ms", "id"),
        Index("idx_messages_correlation", "correlation_id"),
        Index("idx_messages_trace", "trace_id"),
        Index("idx_messages_expires", "expires_at_ms",
              sqlite_where=text("status = 'queued'"), postgresql_where=text("status = 'queued'")),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    type: Mapped[str] = mapped_column(Text)
    from_agent: Mapped[str] = mapped_column(Text)
    to_agent: Mapped[str] = mapped_column(Text)
    topic: Mapped[str] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer)
    ttl_ms: Mapped[int] = mapped_column(Millis)
    created_at_ms: Mapped[int] = mapped_column(Millis)
    expires_at_ms: Mapped[int] = mapped_column(Millis)
    correlation_id: Mapped[str] = mapped_column(Text)
    trace_id: Mapped[str] = mapped_column(Text)
    payload: Mapped[Any] = mapped_column(
        "payload_json", JSONText("{}"), server_default=text("'{}'"))
    status: Mapped[str] = mapped_column(Text)

    @property
    def deduplicated(self) -> bool:
        """True when the audit_log call that returned this message was given an ``id``
        already recorded (a retry) and wrote nothing; False otherwise."""
        return bool(self.__dict__.get(DEDUPLICATED, False))


# A descending index must be written with .desc() on the column, or Alembic's
# comparison sees it as dropped and re-added.
Index("idx_messages_priority", Message.priority.desc(), Message.created_at_ms.asc())


class MessageInbox(Base):
    __tablename__ = "message_inbox"
    __table_args__ = (
        UniqueConstraint("message_id", "agent_id"),
        Index("idx_inbox_agent", "agent_id", "delivered_at_ms"),
        Index("idx_inbox_message", "message_id"),
        {"sqlite_autoincrement": True},
    )

    # INTEGER PRIMARY KEY AUTOINCREMENT (a rowid alias) on SQLite, BIGSERIAL elsewhere.
    delivery_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(
        Text, ForeignKey("messages.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(Text)
    delivered_at_ms: Mapped[int | None] = mapped_column(Millis)
    acked_at_ms: Mapped[int | None] = mapped_column(Millis)
    attempts: Mapped[int] = mapped_column(Counter, server_default=text("0"))


class HumanRequest(Base):
    __tablename__ = "human_requests"
    __table_args__ = (
        CheckConstraint(_in("kind", HUMAN_KINDS), name="kind"),
        CheckConstraint(_in("state", HUMAN_STATES), name="state"),
        CheckConstraint(_in("default_action", HUMAN_DEFAULT_ACTIONS), name="default_action"),
        Index("idx_human_requests_state", "state"),
    )

    request_id: Mapped[str] = mapped_column(Text, primary_key=True)
    requester_agent: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    prompt: Mapped[str] = mapped_column(Text)
    schema: Mapped[Any] = mapped_column(
        "schema_json", JSONText("{}"), server_default=text("'{}'"))
    state: Mapped[str] = mapped_column(Text)
    deadline_ms: Mapped[int] = mapped_column(Millis)
    default_action: Mapped[str] = mapped_column(Text)
    correlation_id: Mapped[str] = mapped_column(Text)
    trace_id: Mapped[str] = mapped_column(Text)
    response: Mapped[Any] = mapped_column("response_json", JSONText(), nullable=True)

    @property
    def deduplicated(self) -> bool:
        """True when the insert_human_request call that returned this request was given
        a ``request_id`` already recorded (a retry) and wrote nothing; False otherwise."""
        return bool(self.__dict__.get(DEDUPLICATED, False))


class DeadLetter(Base):
    __tablename__ = "dead_letters"

    message_id: Mapped[str] = mapped_column(Text, primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    failed_at_ms: Mapped[int] = mapped_column(Millis)
    last_error: Mapped[str | None] = mapped_column(Text)


# Revision 0015: the newest dead letters first (get_dead_letters), without a sort.
Index("ix_dead_letters_failed", DeadLetter.failed_at_ms.desc(), DeadLetter.message_id.desc())


class AssignJob(Base):
    __tablename__ = "assign_jobs"
    __table_args__ = (
        CheckConstraint(_in("status", ASSIGN_STATUSES), name="status"),
        CheckConstraint("priority BETWEEN 1 AND 9", name="priority"),
    )

    job_id: Mapped[str] = mapped_column(Text, primary_key=True)
    supervisor_agent: Mapped[str] = mapped_column(Text)
    worker_agent: Mapped[str] = mapped_column(Text)
    topic: Mapped[str] = mapped_column(Text, server_default=text("'assign.job'"))
    task: Mapped[str] = mapped_column(Text, server_default=text("''"))
    payload: Mapped[Any] = mapped_column(
        "payload_json", JSONText("{}"), server_default=text("'{}'"))
    status: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Counter, server_default=text("1"))
    retry_count: Mapped[int] = mapped_column(Counter, server_default=text("0"))
    max_retries: Mapped[int] = mapped_column(Counter, server_default=text("0"))
    priority: Mapped[int] = mapped_column(Integer, server_default=text("5"))
    ttl_ms: Mapped[int] = mapped_column(Millis, server_default=text("600000"))
    timeout_ms: Mapped[int] = mapped_column(Millis, server_default=text("600000"))
    deadline_ms: Mapped[int | None] = mapped_column(Millis)
    trace_id: Mapped[str] = mapped_column(Text)
    correlation_id: Mapped[str] = mapped_column(Text)
    last_message_id: Mapped[str | None] = mapped_column(Text)
    result: Mapped[Any] = mapped_column("result_json", JSONText(), nullable=True)
    error: Mapped[Any] = mapped_column("error_json", JSONText(), nullable=True)
    created_at_ms: Mapped[int] = mapped_column(Millis)
    updated_at_ms: Mapped[int] = mapped_column(Millis)
    started_at_ms: Mapped[int | None] = mapped_column(Millis)
    completed_at_ms: Mapped[int | None] = mapped_column(Millis)
    last_retry_at_ms: Mapped[int | None] = mapped_column(Millis)
    # hubstore's own (revision 0012), left out of to_dict() as the reference's getters
    # know nothing of them:
    #: The job is not claimed before this time (None: at once).
    not_before_ms: Mapped[int | None] = mapped_column(Millis, info=dict(HUBSTORE_ONLY))
    #: The first retry waits this long, each later one twice the one before.
    retry_backoff_ms: Mapped[int] = mapped_column(Millis, server_default=text("0"),
                                                  info=dict(HUBSTORE_ONLY))
    # hubstore's own (revision 0014):
    #: The quota the job counts against (an AssignLimit's key; None: unlimited).
    limit_key: Mapped[str | None] = mapped_column(Text, info=dict(HUBSTORE_ONLY))
    #: While the job is queued or running, no other job has this key (None: no key).
    unique_key: Mapped[str | None] = mapped_column(Text, info=dict(HUBSTORE_ONLY))
    # hubstore's own (revision 0017):
    #: The share of its limit the claim that started the job took its room from (None:
    #: never claimed under a limit; a start outside claims counts on share 0).
    limit_share: Mapped[int | None] = mapped_column(Integer, info=dict(HUBSTORE_ONLY))
    # hubstore's own (revision 0020):
    #: When the job's timeout starts: "create" (the reference's meaning: its deadline is
    #: set when it is made, so time queued counts), or "claim" (a run timeout: no
    #: deadline while queued; each claim sets it to the start + timeout_ms).
    timeout_from: Mapped[str] = mapped_column(Text, server_default=text("'create'"),
                                              info=dict(HUBSTORE_ONLY))
    #: Who made the latest claim of the job: the claimer's own id, else host:pid (None:
    #: never claimed).
    claimed_by: Mapped[str | None] = mapped_column(Text, info=dict(HUBSTORE_ONLY))

    @property
    def deduplicated(self) -> bool:
        """True when the assign call that returned this job found it queued or running
        under its ``unique_key`` and wrote no new one; False for a job it wrote (and for
        every job read otherwise)."""
        return bool(self.__dict__.get(DEDUPLICATED, False))


#: When an assign job's timeout starts (revision 0020's ``timeout_from``).
TIMEOUT_FROM = ("create", "claim")
#: The statuses a unique key holds in (revision 0014's partial unique index).
LIVE_WHERE = "unique_key IS NOT NULL AND status IN ('queued', 'running')"
Index("ux_assign_jobs_unique_key", AssignJob.unique_key, unique=True,
      sqlite_where=text(LIVE_WHERE), postgresql_where=text(LIVE_WHERE))
Index("ix_assign_jobs_limit_key", AssignJob.limit_key, AssignJob.started_at_ms,
      sqlite_where=text("limit_key IS NOT NULL"), postgresql_where=text("limit_key IS NOT NULL"))
Index("idx_assign_jobs_status", AssignJob.status, AssignJob.updated_at_ms.desc())
Index("idx_assign_jobs_supervisor", AssignJob.supervisor_agent, AssignJob.updated_at_ms.desc())
Index("idx_assign_jobs_worker", AssignJob.worker_agent, AssignJob.updated_at_ms.desc())
Index("idx_assign_jobs_deadline", AssignJob.deadline_ms, AssignJob.status,
      postgresql_where=text("deadline_ms IS NOT NULL"))


class AssignLimit(Base):
    """A quota (revision 0014): at most ``max_running`` of the jobs whose ``limit_key`` is
    ``key`` running at once, and at most ``max_starts`` of them started in any
    ``per_ms``. Claims skip a job whose key has no room (services/assigns/claims.py).

    Its running room is split in ``shares`` (:class:`AssignLimitShare`, revision 0017),
    so that claims of one key run side by side, each locking one share; each share
    counts the jobs started in it, the key's release rows (:class:`AssignLimitRelease`)
    the jobs that stopped. ``starts`` (the start times of the key's recent jobs) is kept
    on this row. Triggers on assign_jobs keep every count, whoever moves a job;
    ``set_assign_limit`` counts them again from the jobs.
    """

    __tablename__ = "assign_limits"
    __table_args__ = (
        CheckConstraint("max_running IS NULL OR max_running >= 1", name="max_running"),
        CheckConstraint("(max_starts IS NULL) = (per_ms IS NULL)", name="rate"),
        CheckConstraint("max_starts IS NULL OR (max_starts >= 1 AND per_ms >= 1)",
                        name="rate_positive"),
    )

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    max_running: Mapped[int | None] = mapped_column(BigInteger)
    max_starts: Mapped[int | None] = mapped_column(BigInteger)
    per_ms: Mapped[int | None] = mapped_column(Millis)
    #: How many shares the running room is split in (rows 0 .. shares - 1).
    shares: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    #: The start times (ms) of the key's most recent starts: on PostgreSQL sorted, the
    #: ``max_starts`` newest; on SQLite those of the last two windows.
    starts: Mapped[Any] = mapped_column("starts_json", JSONText("[]"),
                                        server_default=text("'[]'"))
    created_at_ms: Mapped[int] = mapped_column(Millis)
    updated_at_ms: Mapped[int] = mapped_column(Millis)

    @property
    def started(self) -> int:
        """How many of the key's jobs started running since the limit was last set (its
        shares' counts, as ``get_assign_limits`` and ``set_assign_limit`` read them)."""
        return int(self.__dict__.get("_started", 0))

    @property
    def running(self) -> int:
        """The key's jobs running now: ``started`` less the releases (as
        ``get_assign_limits`` and ``set_assign_limit`` read them)."""
        return int(self.__dict__.get("_running", 0))

    def counted(self, started: int, released: int) -> AssignLimit:
        """This limit, with ``started`` starts and ``released`` ends counted."""
        self.__dict__["_started"] = started
        self.__dict__["_running"] = started - released
        return self

    def recent_starts(self, now: int) -> int:
        """How many of the key's jobs started in the ``per_ms`` before ``now`` (0 when
        the limit has no rate)."""
        if self.per_ms is None:
            return 0
        since = now - self.per_ms
        return sum(1 for at in self.starts or [] if isinstance(at, int) and at > since)

    def fullness(self, now: int) -> tuple[bool, bool, int | None]:
        """Whether the limit is full at ``now``, and when it reopens: (no running room,
        no rate room, when the rate has room again: None when it has room or no rate).
        Room under ``max_running`` comes back when a job ends (no time says when). The
        one reading of "full" that the waits and the pages share (the claim's SQL,
        services/assigns/claims.py's ``_rooms``, computes the same room)."""
        running_full = self.max_running is not None and self.running >= self.max_running
        if self.max_starts is None or self.per_ms is None:
            return running_full, False, None
        since = now - self.per_ms
        recent = sorted(at for at in self.starts or [] if isinstance(at, int) and at > since)
        if len(recent) < self.max_starts:
            return running_full, False, None
        # room when all but max_starts - 1 of the recent starts have left the window
        return running_full, True, recent[len(recent) - self.max_starts] + self.per_ms

    def to_dict(self) -> dict[str, Any]:
        """The limit and its state now: key, max_running, max_starts, per_ms, running,
        recent_starts."""
        return {"key": self.key, "max_running": self.max_running,
                "max_starts": self.max_starts, "per_ms": self.per_ms,
                "running": self.running, "recent_starts": self.recent_starts(now_ms())}


class AssignLimitShare(Base):
    """A share of a limit's running room (revision 0017): claims of the key each lock
    one share with room (PostgreSQL: skipping shares other claims hold), so that they
    run side by side. ``budget`` is the share's part of ``max_running`` (None: no such
    bound); ``started`` counts the jobs started in it. Its running count is ``started``
    less the releases of the release rows whose stripe falls to it (stripe modulo the
    limit's ``shares``): never more than ``budget`` after a claim, so the shares together
    never hold more than ``max_running``. Kept by triggers on assign_jobs."""

    __tablename__ = "assign_limit_shares"

    key: Mapped[str] = mapped_column(
        Text, ForeignKey("assign_limits.key", ondelete="CASCADE"), primary_key=True)
    share: Mapped[int] = mapped_column(Integer, primary_key=True)
    budget: Mapped[int | None] = mapped_column(BigInteger)
    started: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class AssignLimitRelease(Base):
    """How many of a limit's jobs stopped running, and when the latest did (revision
    0014): a few rows per key, each finishing job counted on the one its transaction's
    id picks (PostgreSQL: 8; SQLite: 1), so that finishing jobs never wait for the key's
    row, which claims lock. Kept by triggers on assign_jobs."""

    __tablename__ = "assign_limit_releases"

    key: Mapped[str] = mapped_column(
        Text, ForeignKey("assign_limits.key", ondelete="CASCADE"), primary_key=True)
    stripe: Mapped[int] = mapped_column(Integer, primary_key=True)
    released: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    #: When the latest of them stopped running: a job started in the room it left is
    #: stamped no earlier (services/assigns/claims.py).
    released_at_ms: Mapped[int | None] = mapped_column(Millis)


class AssignSchedule(Base):
    """A periodic job (revision 0014): an assign queued at every tick of ``cron`` (a
    five-field cron expression, UTC) or every ``every_ms``, by the hub's maintenance
    (``run_due_schedules``), once per tick whatever the number of hub processes. After
    downtime, the missed ticks are one job (see docs/quotas.md)."""

    __tablename__ = "assign_schedules"
    __table_args__ = (
        CheckConstraint("(cron IS NULL) <> (every_ms IS NULL)", name="one_rule"),
        CheckConstraint("every_ms IS NULL OR every_ms >= 1000", name="every_ms"),
    )

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    cron: Mapped[str | None] = mapped_column(Text)
    every_ms: Mapped[int | None] = mapped_column(Millis)
    supervisor_agent: Mapped[str] = mapped_column(Text)
    worker_agent: Mapped[str] = mapped_column(Text)
    #: assign_async's keyword arguments for each job (task, payload, priority, ...).
    job: Mapped[Any] = mapped_column("job_json", JSONText("{}"), server_default=text("'{}'"))
    #: The next tick: when the next job is queued.
    next_due_ms: Mapped[int] = mapped_column(Millis)
    #: The tick of the last job queued, and that job.
    last_due_ms: Mapped[int | None] = mapped_column(Millis)
    last_job_id: Mapped[str | None] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(Millis)
    updated_at_ms: Mapped[int] = mapped_column(Millis)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (
            "name", "cron", "every_ms", "supervisor_agent", "worker_agent", "job",
            "next_due_ms", "last_due_ms", "last_job_id")}


Index("ix_assign_schedules_due", AssignSchedule.next_due_ms)


class ConsoleSession(Base):
    """An operator's session of the console (revision 0018): the SHA-256 of the cookie's
    random value (never the value itself), and when it ends. Signing out deletes the row;
    a session past ``expires_at_ms`` is refused and pruned at the next sign-in. In the
    database, so that every console process of the hub, and a restarted one, agree."""

    __tablename__ = "console_sessions"

    session_hash: Mapped[str] = mapped_column(Text, primary_key=True)
    created_at_ms: Mapped[int] = mapped_column(Millis)
    expires_at_ms: Mapped[int] = mapped_column(Millis)


Index("ix_console_sessions_expires_at_ms", ConsoleSession.expires_at_ms)


class ConsoleKey(Base):
    """A console's signing key (revision 0018), by name: the CSRF key of a console whose
    application decides who may act (an ``auth`` hook), kept so that a page rendered
    before a restart, or by another console process, still submits."""

    __tablename__ = "console_keys"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    secret: Mapped[str] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(Millis)


class PipelineState(Base):
    __tablename__ = "pipeline_state"

    team_name: Mapped[str] = mapped_column(Text, primary_key=True)
    phase: Mapped[str] = mapped_column(Text, server_default=text("'plan'"))
    fix_attempt: Mapped[int | None] = mapped_column(Counter, server_default=text("0"))
    fix_max: Mapped[int | None] = mapped_column(Counter, server_default=text("3"))
    ralph_iteration: Mapped[int | None] = mapped_column(Counter, server_default=text("0"))
    ralph_max: Mapped[int | None] = mapped_column(Counter, server_default=text("10"))
    artifacts: Mapped[Any] = mapped_column(JSONText("{}"), server_default=text("'{}'"),
                                           nullable=True)
    phase_history: Mapped[Any] = mapped_column(JSONText("[]"), server_default=text("'[]'"),
                                               nullable=True)
    created_at: Mapped[int | None] = mapped_column(Millis)
    updated_at: Mapped[int | None] = mapped_column(Millis)


class ReflexionEntry(Base):
    __tablename__ = "reflexion_entries"
    __table_args__ = (Index("idx_reflexion_pattern", "error_pattern"),)

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    type: Mapped[str] = mapped_column(Text, server_default=text("'reflexion'"))
    error_pattern: Mapped[str] = mapped_column(Text)
    error_message: Mapped[str] = mapped_column(Text)
    context: Mapped[Any] = mapped_column(
        "context_json", JSONText("{}"), server_default=text("'{}'"))
    solution: Mapped[str] = mapped_column(Text)
    solution_code: Mapped[str | None] = mapped_column(Text)
    adaptive_state: Mapped[Any] = mapped_column(
        "adaptive_state_json", JSONText("{}"), server_default=text("'{}'"))
    confidence: Mapped[float] = mapped_column(Float, server_default=text("0.5"))
    hit_count: Mapped[int] = mapped_column(Counter, server_default=text("1"))
    success_count: Mapped[int] = mapped_column(Counter, server_default=text("0"))
    last_hit_ms: Mapped[int] = mapped_column(Millis)
    created_at_ms: Mapped[int] = mapped_column(Millis)
    updated_at_ms: Mapped[int] = mapped_column(Millis)


Index("idx_reflexion_confidence", ReflexionEntry.confidence.desc())


class MessageLog(Base):
    """Revision 0007: every message's position in commit order (message feeds).

    Written only by the trigger on messages (see alembic/versions/0007_message_feed.py);
    seq is never handed out twice: a sequence on PostgreSQL; on SQLite the rowid
    (max(seq) + 1, revision 0008), and the newest row is never deleted (the prune's trim
    keeps it as the high-water mark). On SQLite the table also has ``queue_at_insert``
    (revision 0009: the row counts its insert in the figures), left out here like the
    other objects of one dialect (``migrations.MIGRATION_OWNED``).
    """

    __tablename__ = "message_log"

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=False)
    message_id: Mapped[str] = mapped_column(Text)


class HubMeta(Base):
    """The reference's ``_meta`` table: its ``schema_version`` row says '3' or '4'.

    Kept up to date by the migrations so that the reference store can open a hubstore
    database and find the layout it knows.
    """

    __tablename__ = "_meta"

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[str | None] = mapped_column(Text)


# Revision 0003: indexes that make polling, the figures and claiming index-backed (its
# to_agent and queued-expiry ones became the two redefined above, in revision 0011).
# Partial-index predicates are constant SQL; queries repeat them literally.
#: Messages sent to a topic. The poll query repeats this predicate (services/messages.py),
#: so that the planner can use the partial index.
TOPIC_FEED_WHERE = "substr(to_agent, 1, 6) = 'topic:'"
_TOPIC_FEED = text(TOPIC_FEED_WHERE)
_QUEUED = text("status = 'queued'")
_ACKED = text("status = 'acked'")
Index("ix_messages_topic_feed", Message.topic, Message.created_at_ms, Message.id,
      sqlite_where=_TOPIC_FEED, postgresql_where=_TOPIC_FEED)
Index("ix_messages_acked_created", Message.created_at_ms,
      sqlite_where=_ACKED, postgresql_where=_ACKED)
# PostgreSQL (revision 0019): the queued jobs without a limit key only; those with one
# are in ix_assign_jobs_claim_keyed, which the migrations own (the claim reads each key
# with room apart, services/claims.py).
Index("ix_assign_jobs_claim", AssignJob.worker_agent, AssignJob.priority.desc(),
      AssignJob.created_at_ms, AssignJob.job_id,
      sqlite_where=_QUEUED, postgresql_where=text("status = 'queued' AND limit_key IS NULL"))

metadata = Base.metadata


def table_of(model: type[Base]) -> Table:
    """A model's Table, typed as one (``__table__`` is typed as a plain FromClause)."""
    return cast(Table, model.__table__)


__all__ = [
    "Agent",
    "AssignJob",
    "AssignLimit",
    "AssignLimitRelease",
    "AssignSchedule",
    "Base",
    "ConsoleKey",
    "ConsoleSession",
    "DeadLetter",
    "HubMeta",
    "HumanRequest",
    "Message",
    "MessageInbox",
    "PipelineState",
    "ReflexionEntry",
    "metadata",
]
