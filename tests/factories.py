"""The factories, from the package (hubstore.testing.factories), for the tests' imports."""

from hubstore.testing.factories import (
    AgentFactory,
    AssignJobFactory,
    DeadLetterFactory,
    HumanRequestFactory,
    MessageFactory,
    MessageInboxFactory,
    PipelineStateFactory,
    ReflexionEntryFactory,
    bind,
    unbind,
)

__all__ = [
    "AgentFactory",
    "AssignJobFactory",
    "DeadLetterFactory",
    "HumanRequestFactory",
    "MessageFactory",
    "MessageInboxFactory",
    "PipelineStateFactory",
    "ReflexionEntryFactory",
    "bind",
    "unbind",
]
