"""The hub's console: a web application to watch and operate the hub (``hubstore[web]``).

``create_app(store, token=None, read_only=None)`` returns an ASGI application; ``hubstore
web`` serves one with uvicorn. See docs/console.md.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import prometheus_client  # noqa: F401
    import python_multipart  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    raise ImportError(
        f'hubstore.web needs the web extra ({exc.name} is missing): '
        f'pip install "hubstore[web]"') from exc

from hubstore.web.app import create_app

__all__ = ["create_app"]
