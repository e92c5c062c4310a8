"""The overview: agents with their lease, jobs per worker, the assign limits (quotas), the
hub's figures."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.ids import now_ms
from hubstore.services.console_reads import with_worker_depths
from hubstore.web.console import console_of, render


async def _context(request: Request) -> dict[str, Any]:
    store = console_of(request).store
    snap, depths = await store.run_sync(with_worker_depths)
    agents = await store.list_all_agents()
    limits = [limit.to_dict() for limit in (await store.get_assign_limits()).values()]
    return {"snap": snap, "agents": agents, "depths": depths, "limits": limits,
            "now": now_ms(), "jobs": snap.jobs_by_status, "figures": snap.figures}


async def overview(request: Request) -> Response:
    return await render(request, "overview.html", await _context(request))


async def overview_live(request: Request) -> Response:
    return await render(request, "overview_live.html", await _context(request))


routes = [
    Route("/", overview, name="overview"),
    Route("/live/overview", overview_live, name="overview_live"),
]
