"""The console's sessions and signing keys, in the hub's database (revision 0018).

A session is a random value in the operator's cookie; the database keeps only a keyed
hash of it (``console_sessions``: its HMAC-SHA-256 under a key derived from the operator
token, so that a session of another token is none here) and when it ends, so that
every console process of the hub, and one restarted, agree on who is signed in, and
signing out ends the session everywhere. A console's CSRF key, when no operator token
derives one, is kept in ``console_keys``. Each function is one short unit of work of
the sync store (the console calls them on the async store's lanes, off the event loop).
"""

from __future__ import annotations

import secrets

from sqlalchemy import delete, insert, select

from hubstore.errors import DuplicateKey, HubStoreError
from hubstore.execution import execute
from hubstore.ids import now_ms
from hubstore.models import ConsoleKey, ConsoleSession, table_of
from hubstore.store import HubStore

_sessions = table_of(ConsoleSession)
_keys = table_of(ConsoleKey)


def add_session(store: HubStore, digest: str, lifetime_ms: int) -> None:
    """Keep a new session (``digest``: what the database keeps of its cookie value),
    ending in ``lifetime_ms``; sessions already ended are pruned in the same unit of
    work."""
    now = now_ms()
    with store.transaction() as uow:
        execute(uow, delete(_sessions).where(_sessions.c.expires_at_ms <= now))
        execute(uow, insert(_sessions).values(session_hash=digest, created_at_ms=now,
                                              expires_at_ms=now + lifetime_ms))


def session_open(store: HubStore, digest: str) -> bool:
    """Whether the session ``digest`` is open (signed in, not ended)."""
    with store.one_read() as uow:
        ends = execute(uow, select(_sessions.c.expires_at_ms).where(
            _sessions.c.session_hash == digest)).scalar_one_or_none()
    return ends is not None and int(ends) > now_ms()


def close_session(store: HubStore, digest: str) -> None:
    """End the session ``digest`` (nothing when there is none)."""
    with store.one_statement() as uow:
        execute(uow, delete(_sessions).where(_sessions.c.session_hash == digest))


def signing_key(store: HubStore, name: str) -> bytes:
    """The key ``name``, made the first time (whichever process asks first)."""
    for _ in range(3):
        with store.one_read() as uow:
            found = execute(uow, select(_keys.c.secret).where(_keys.c.name == name)
                            ).scalar_one_or_none()
        if found is not None:
            return bytes.fromhex(str(found))
        try:
            with store.one_statement() as uow:
                execute(uow, insert(_keys).values(name=name, secret=secrets.token_hex(32),
                                                  created_at_ms=now_ms()))
        except DuplicateKey:  # another process made it first: read theirs
            continue
    raise HubStoreError(f"the console key {name!r} could not be read or made")
