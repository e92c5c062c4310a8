"""factory-boy factories for every hub row, named after their models.

`AgentFactory`, `MessageFactory`, `MessageInboxFactory`, `HumanRequestFactory`,
`DeadLetterFactory`, `AssignJobFactory`, `PipelineStateFactory` and
`ReflexionEntryFactory` insert rows directly (no store rules run) into the database of
the store given to `bind()`; the `hub_store` fixture of `hubstore.testing`
binds them to the store it yields. Each ``create()`` commits its row.

Needs factory-boy: `pip install "hubstore[testing]"`.
"""

from __future__ import annotations

try:
    import factory  # noqa: F401  (the optional dependency, checked once here)
except ModuleNotFoundError as missing:  # pragma: no cover - exercised in a bare venv
    raise ModuleNotFoundError(
        "hubstore.testing.factories needs factory-boy; install it with "
        "pip install \"hubstore[testing]\"", name="factory") from missing

from factory.alchemy import SQLAlchemyModelFactory
from factory.declarations import LazyAttribute, LazyFunction, Sequence
from sqlalchemy.orm import scoped_session, sessionmaker

from hubstore import HubStore, uuidv7
from hubstore.ids import now_ms
from hubstore.models import (
    Agent,
    AssignJob,
    DeadLetter,
    HumanRequest,
    Message,
    MessageInbox,
    PipelineState,
    ReflexionEntry,
)

Session = scoped_session(sessionmaker(expire_on_commit=False))


def bind(store: HubStore) -> None:
    """Point the factories at a store's database."""
    Session.remove()
    Session.configure(bind=store.engine)


def unbind() -> None:
    """Forget the bound store (its session is closed)."""
    Session.remove()


class _Base(SQLAlchemyModelFactory):
    """Rows committed through the session that :func:`bind` points at the store."""

    class Meta:
        abstract = True
        sqlalchemy_session = Session
        sqlalchemy_session_persistence = "commit"


class AgentFactory(_Base):
    """`Agent` rows: ids ``agent-N``, a codex agent online with a 30 s lease."""

    class Meta:
        model = Agent

    agent_id = Sequence(lambda n: f"agent-{n}")
    cli = "codex"
    pid = None
    capabilities = LazyFunction(list)
    topics = LazyFunction(list)
    last_seen_ms = LazyFunction(now_ms)
    lease_expires_ms = LazyAttribute(lambda o: o.last_seen_ms + 30_000)
    status = "online"
    meta = LazyFunction(dict)


class MessageFactory(_Base):
    """`Message` rows: a queued event from ``sender`` to ``receiver`` (no inbox row)."""

    class Meta:
        model = Message

    id = LazyFunction(uuidv7)
    type = "event"
    from_agent = "sender"
    to_agent = "receiver"
    topic = "t.a"
    priority = 5
    ttl_ms = 300_000
    created_at_ms = LazyFunction(now_ms)
    expires_at_ms = LazyAttribute(lambda o: o.created_at_ms + o.ttl_ms)
    correlation_id = LazyFunction(uuidv7)
    trace_id = LazyFunction(uuidv7)
    payload = LazyFunction(dict)
    status = "queued"


class MessageInboxFactory(_Base):
    """`MessageInbox` rows: a delivery to ``receiver`` of a new message."""

    class Meta:
        model = MessageInbox

    message_id = LazyAttribute(lambda o: MessageFactory.create().id)
    agent_id = "receiver"
    delivered_at_ms = LazyFunction(now_ms)
    acked_at_ms = None
    attempts = 0


class HumanRequestFactory(_Base):
    """`HumanRequest` rows: a pending approval, due in a minute."""

    class Meta:
        model = HumanRequest

    request_id = LazyFunction(uuidv7)
    requester_agent = "codex-1"
    kind = "approval"
    prompt = "Deploy?"
    schema = LazyFunction(dict)
    state = "pending"
    deadline_ms = LazyFunction(lambda: now_ms() + 60_000)
    default_action = "decline"
    correlation_id = LazyFunction(uuidv7)
    trace_id = LazyFunction(uuidv7)
    response = None


class DeadLetterFactory(_Base):
    """`DeadLetter` rows: a message that expired (``ttl_expired``)."""

    class Meta:
        model = DeadLetter

    message_id = LazyFunction(uuidv7)
    reason = "ttl_expired"
    failed_at_ms = LazyFunction(now_ms)
    last_error = None


class AssignJobFactory(_Base):
    """`AssignJob` rows: a queued job from ``lead`` to ``worker``, due in 10 minutes."""

    class Meta:
        model = AssignJob

    job_id = LazyFunction(uuidv7)
    supervisor_agent = "lead"
    worker_agent = "worker"
    topic = "assign.job"
    task = Sequence(lambda n: f"task {n}")
    payload = LazyFunction(dict)
    status = "queued"
    attempt = 1
    retry_count = 0
    max_retries = 0
    priority = 5
    ttl_ms = 600_000
    timeout_ms = 600_000
    deadline_ms = LazyFunction(lambda: now_ms() + 600_000)
    trace_id = LazyFunction(uuidv7)
    correlation_id = LazyFunction(uuidv7)
    last_message_id = None
    result = None
    error = None
    created_at_ms = LazyFunction(now_ms)
    updated_at_ms = LazyAttribute(lambda o: o.created_at_ms)
    started_at_ms = None
    completed_at_ms = None
    last_retry_at_ms = None


class PipelineStateFactory(_Base):
    """`PipelineState` rows: teams ``team-N`` in the ``plan`` phase."""

    class Meta:
        model = PipelineState

    team_name = Sequence(lambda n: f"team-{n}")
    phase = "plan"
    fix_attempt = 0
    fix_max = 3
    ralph_iteration = 0
    ralph_max = 10
    artifacts = LazyFunction(dict)
    phase_history = LazyFunction(list)
    created_at = LazyFunction(now_ms)
    updated_at = LazyAttribute(lambda o: o.created_at)


class ReflexionEntryFactory(_Base):
    """`ReflexionEntry` rows: a distinct error pattern each, confidence 0.5."""

    class Meta:
        model = ReflexionEntry

    id = LazyFunction(uuidv7)
    type = "reflexion"
    error_pattern = Sequence(lambda n: f"typeerror: cannot read x{n} of undefined")
    error_message = LazyAttribute(lambda o: o.error_pattern)
    context = LazyFunction(dict)
    solution = "guard it"
    solution_code = None
    adaptive_state = LazyFunction(dict)
    confidence = 0.5
    hit_count = 1
    success_count = 0
    last_hit_ms = LazyFunction(now_ms)
    created_at_ms = LazyAttribute(lambda o: o.last_hit_ms)
    updated_at_ms = LazyAttribute(lambda o: o.last_hit_ms)
