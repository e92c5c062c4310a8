"""OpenTelemetry spans for store calls (the ``otel`` extra: ``pip install "hubstore[otel]"``).

:func:`instrument` wraps each store method of one :class:`~hubstore.store.HubStore`
(every one :class:`~hubstore.operations.HubOperations` lists) so that a call runs inside a
span named ``hubstore.<method>``, with the dialect and the method as attributes; a
failing call records its exception and marks the span as an error. Calls a method makes
inside the store are not spans of their own. Without an SDK configured, the API's spans cost next
to nothing; where the span goes (an exporter, a collector) is the application's choice.
:class:`~hubstore.aio.AsyncHubStore` runs the sync store's methods, so an instrumented
store traces its async calls too, inside the awaiting task's current span.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hubstore.operations import store_methods

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from hubstore.store import HubStore

__all__ = ["INSTRUMENTED", "available", "instrument", "traced_methods"]

#: The attribute an instrumented store carries (instrumenting twice changes nothing).
INSTRUMENTED = "_hubstore_traced"


def available() -> bool:
    """True when the OpenTelemetry API is installed (the ``otel`` extra)."""
    return importlib.util.find_spec("opentelemetry") is not None


def traced_methods() -> list[str]:
    """The store methods :func:`instrument` wraps, in the facade's order."""
    return list(store_methods())


def instrument(store: HubStore, tracer_provider: TracerProvider | None = None) -> HubStore:
    """Trace ``store``'s method calls (see the module's docstring); returns ``store``."""
    try:
        from opentelemetry import trace
    except ImportError as exc:  # pragma: no cover - the extra's own message
        raise ImportError('OpenTelemetry spans need the otel extra: '
                          'pip install "hubstore[otel]"') from exc
    if getattr(store, INSTRUMENTED, False):
        return store
    from hubstore import __version__

    tracer = trace.get_tracer("hubstore", __version__, tracer_provider=tracer_provider)
    system = store.dialect
    for name in traced_methods():
        method = getattr(store, name)
        setattr(store, name, _traced(tracer, system, name, method))
    setattr(store, INSTRUMENTED, True)
    return store


def _traced(tracer: Any, system: str, name: str, method: Callable[..., Any]
            ) -> Callable[..., Any]:
    span_name = f"hubstore.{name}"
    attributes = {"db.system": system, "db.system.name": system, "hubstore.method": name}

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(span_name, attributes=attributes):
            return method(*args, **kwargs)

    return call
