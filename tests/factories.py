"""factory-boy factories for every hub row, inserted through the store's engine."""

from __future__ import annotations

import factory
from factory.alchemy import SQLAlchemyModelFactory
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
    Session.remove()


class _Base(SQLAlchemyModelFactory):
    class Meta:
        abstract = True
        sqlalchemy_session = Session
        sqlalchemy_session_persistence = "commit"


class AgentFactory(_Base):
    class Meta:
        model = Agent

    agent_id = factory.Sequence(lambda n: f"agent-{n}")
    cli = "codex"
    pid = None
    capabilities = factory.LazyFunction(list)
    topics = factory.LazyFunction(list)
    last_seen_ms = factory.LazyFunction(now_ms)
    lease_expires_ms = factory.LazyAttribute(lambda o: o.last_seen_ms + 30_000)
    status = "online"
    meta = factory.LazyFunction(dict)


class MessageFactory(_Base):
    class Meta:
        model = Message

    id = factory.LazyFunction(uuidv7)
    type = "event"
    from_agent = "sender"
    to_agent = "receiver"
    topic = "t.a"
    priority = 5
    ttl_ms = 300_000
    created_at_ms = factory.LazyFunction(now_ms)
    expires_at_ms = factory.LazyAttribute(lambda o: o.created_at_ms + o.ttl_ms)
    correlation_id = factory.LazyFunction(uuidv7)
    trace_id = factory.LazyFunction(uuidv7)
    payload = factory.LazyFunction(dict)
    status = "queued"


class MessageInboxFactory(_Base):
    class Meta:
        model = MessageInbox

    message_id = factory.LazyAttribute(lambda o: MessageFactory().id)
    agent_id = "receiver"
    delivered_at_ms = factory.LazyFunction(now_ms)
    acked_at_ms = None
    attempts = 0


class HumanRequestFactory(_Base):
    class Meta:
        model = HumanRequest

    request_id = factory.LazyFunction(uuidv7)
    requester_agent = "codex-1"
    kind = "approval"
    prompt = "Deploy?"
    schema = factory.LazyFunction(dict)
    state = "pending"
    deadline_ms = factory.LazyFunction(lambda: now_ms() + 60_000)
    default_action = "decline"
    correlation_id = factory.LazyFunction(uuidv7)
    trace_id = factory.LazyFunction(uuidv7)
    response = None


class DeadLetterFactory(_Base):
    class Meta:
        model = DeadLetter

    message_id = factory.LazyFunction(uuidv7)
    reason = "ttl_expired"
    failed_at_ms = factory.LazyFunction(now_ms)
    last_error = None


class AssignJobFactory(_Base):
    class Meta:
        model = AssignJob

    job_id = factory.LazyFunction(uuidv7)
    supervisor_agent = "lead"
    worker_agent = "worker"
    topic = "assign.job"
    task = factory.Sequence(lambda n: f"task {n}")
    payload = factory.LazyFunction(dict)
    status = "queued"
    attempt = 1
    retry_count = 0
    max_retries = 0
    priority = 5
    ttl_ms = 600_000
    timeout_ms = 600_000
    deadline_ms = factory.LazyFunction(lambda: now_ms() + 600_000)
    trace_id = factory.LazyFunction(uuidv7)
    correlation_id = factory.LazyFunction(uuidv7)
    last_message_id = None
    result = None
    error = None
    created_at_ms = factory.LazyFunction(now_ms)
    updated_at_ms = factory.LazyAttribute(lambda o: o.created_at_ms)
    started_at_ms = None
    completed_at_ms = None
    last_retry_at_ms = None


class PipelineStateFactory(_Base):
    class Meta:
        model = PipelineState

    team_name = factory.Sequence(lambda n: f"team-{n}")
    phase = "plan"
    fix_attempt = 0
    fix_max = 3
    ralph_iteration = 0
    ralph_max = 10
    artifacts = factory.LazyFunction(dict)
    phase_history = factory.LazyFunction(list)
    created_at = factory.LazyFunction(now_ms)
    updated_at = factory.LazyAttribute(lambda o: o.created_at)


class ReflexionEntryFactory(_Base):
    class Meta:
        model = ReflexionEntry

    id = factory.LazyFunction(uuidv7)
    type = "reflexion"
    error_pattern = factory.Sequence(lambda n: f"typeerror: cannot read x{n} of undefined")
    error_message = factory.LazyAttribute(lambda o: o.error_pattern)
    context = factory.LazyFunction(dict)
    solution = "guard it"
    solution_code = None
    adaptive_state = factory.LazyFunction(dict)
    confidence = 0.5
    hit_count = 1
    success_count = 0
    last_hit_ms = factory.LazyFunction(now_ms)
    created_at_ms = factory.LazyAttribute(lambda o: o.last_hit_ms)
    updated_at_ms = factory.LazyAttribute(lambda o: o.last_hit_ms)
