"""Revision 0018 (the console's sessions and keys in the database): down to 0017 and up
again on both dialects; the tables go and come back empty, the hub's rows stay."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from hubstore import HubStore, migrations
from tests.reference_ddl import table_names


def test_down_to_0017_and_up_again(db_url: URL) -> None:
    with HubStore.open(db_url) as store:
        job = store.create_assign("lead", "w1", task="kept")
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO console_sessions (session_hash, created_at_ms, "
                              "expires_at_ms) VALUES ('h', 1, 2)"))
            conn.execute(text("INSERT INTO console_keys (name, secret, created_at_ms) "
                              "VALUES ('csrf', 's', 1)"))
        migrations.downgrade(db_url, "0017")
        with engine.connect() as conn:
            assert not {"console_sessions", "console_keys"} & table_names(conn)
        migrations.upgrade(db_url)
        with engine.connect() as conn:
            assert {"console_sessions", "console_keys"} <= table_names(conn)
            assert conn.execute(text("SELECT count(*) FROM console_sessions")).scalar_one() == 0
            assert conn.execute(text("SELECT count(*) FROM console_keys")).scalar_one() == 0
    finally:
        engine.dispose()
    with HubStore.open(db_url) as store:
        kept = store.get_assign(job.job_id)
        assert kept is not None and kept.task == "kept"
