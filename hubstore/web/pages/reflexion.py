"""Reflexion entries: list and filter (page_reflexion: list_reflexion's entries and order,
a page at a time), search by error text (lookup_solution), edit (patch_reflexion) and
delete (delete_reflexion)."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hubstore.errors import HubStoreError, ValidationError
from hubstore.models import REFLEXION_TYPES, ReflexionEntry
from hubstore.reflexion import lookup_solution
from hubstore.store import HubStore
from hubstore.web.console import (
    back,
    checked_form,
    console_of,
    failed,
    field,
    kept_query,
    render,
)

log = logging.getLogger("hubstore.web")
#: Entries a page shows (page_reflexion: list_reflexion's order, a page at a time).
PAGE = 50
#: The fields the edit form sets (patch_reflexion's).
TEXT_FIELDS = ("error_pattern", "error_message", "solution")


def _float(value: str, what: str) -> float | None:
    if not value.strip():
        return None
    try:
        return float(value)
    except ValueError:
        raise ValidationError(f"{what} must be a number, got {value!r}") from None


async def reflexion(request: Request) -> Response:
    q = request.query_params
    search = q.get("q", "").strip()
    kind = q.get("type", "")
    slug = q.get("project_slug", "").strip()
    minimum = q.get("min_confidence", "")
    cursor = q.get("after") or None
    store = console_of(request).store
    next_url = None
    try:
        if search:
            found = await store.run_sync(lambda s: lookup_solution(s, search))
            entries: list[ReflexionEntry] = found.entries
        else:
            page = await store.page_reflexion(
                type=kind if kind in REFLEXION_TYPES else None,
                min_confidence=_float(minimum, "min_confidence"), project_slug=slug or None,
                limit=PAGE, after=cursor)
            entries = page.entries
            if page.next is not None:
                filters = {k: v for k, v in (("type", kind), ("project_slug", slug),
                                             ("min_confidence", minimum)) if v}
                next_url = request.url_for("reflexion").include_query_params(
                    **filters, after=page.next)
    except HubStoreError as exc:
        return await failed(request, exc)
    return await render(request, "reflexion.html", {
        "entries": entries, "q": search, "type": kind, "types": REFLEXION_TYPES,
        "project_slug": slug, "min_confidence": minimum, "next_url": next_url,
        "first_page": cursor is None,
        "first_url": request.url_for("reflexion").include_query_params(
            **kept_query(request, "after"))})


async def entry(request: Request) -> Response:
    entry_id = request.query_params.get("id", "")
    found = await console_of(request).store.get_reflexion(entry_id) if entry_id else None
    if found is None:
        return await render(request, "missing.html", {"what": "reflexion entry"},
                            status_code=404)
    return await render(request, "reflexion_entry.html", {"entry": found})


def _text(value: str) -> str:
    """A textarea's value as typed: browsers send its line ends as CRLF."""
    return value.replace("\r\n", "\n")


def _patch(form: Any) -> dict[str, Any]:
    patch: dict[str, Any] = {name: _text(field(form, name)) for name in TEXT_FIELDS}
    code = _text(field(form, "solution_code"))
    patch["solution_code"] = code or None
    confidence = _float(field(form, "confidence"), "confidence")
    if confidence is not None:
        patch["confidence"] = confidence
    return patch


def changes(entry: ReflexionEntry, patch: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``patch`` that differ from ``entry``'s: a text that differs only by
    its line ends (stored with CRLF, sent back with CRLF or LF) is the same."""
    changed = {}
    for name, value in patch.items():
        now = getattr(entry, name)
        same = (_text(now) == value) if isinstance(now, str) and isinstance(value, str) \
            else now == value
        if not same:
            changed[name] = value
    return changed


async def edit(request: Request) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    entry_id = field(form, "id")
    try:
        patch = _patch(form)
        done = await console_of(request).store.run_sync(
            lambda s: _patched(s, entry_id, patch))
    except HubStoreError as exc:
        return await failed(request, exc)
    if not done:
        return await render(request, "missing.html", {"what": "reflexion entry"},
                            status_code=404)
    log.info("console: reflexion entry %s edited", entry_id)
    return back(request, "reflexion_entry", "saved", id=entry_id)


def _patched(store: HubStore, entry_id: str, patch: dict[str, Any]) -> bool:
    """Patch what the form changed (nothing, updated_at_ms kept, for an unchanged save);
    False when the entry is gone."""
    entry = store.get_reflexion(entry_id)
    if entry is None:
        return False
    changed = changes(entry, patch)
    return not changed or store.patch_reflexion(entry_id, **changed) is not None


async def delete(request: Request) -> Response:
    form = await checked_form(request)
    if isinstance(form, Response):
        return form
    entry_id = field(form, "id")
    try:
        done = await console_of(request).store.delete_reflexion(entry_id)
    except HubStoreError as exc:
        return await failed(request, exc)
    log.info("console: reflexion entry %s deleted", entry_id)
    return back(request, "reflexion", "deleted" if done else "already gone")


routes = [
    Route("/reflexion", reflexion, name="reflexion"),
    Route("/reflexion/entry", entry, name="reflexion_entry"),
    Route("/reflexion/edit", edit, methods=["POST"], name="reflexion_edit"),
    Route("/reflexion/delete", delete, methods=["POST"], name="reflexion_delete"),
]
