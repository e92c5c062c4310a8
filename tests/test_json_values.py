"""JSON columns keep every value's form, and refuse what is not strict JSON."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

from hubstore import HubStore, ValidationError
from hubstore.jsontype import dumps

ODD_VALUES = [123, "123", [], True, False, 0, "", 1.5, -0.25, 10 ** 15, {}, "null",
              {"nested": {"deep": [1, 2.5, None, {"x": None}]}}, "한글 ✓ \u2028", [[]],
              {"": ""}, "\\\"quoted\""]


@pytest.mark.parametrize("payload", ODD_VALUES, ids=repr)
def test_payload_round_trips(store: HubStore, payload: object) -> None:
    msg = store.audit_log("event", "a", "b", "t", payload=payload)
    stored = store.get_message(msg.id)
    assert stored is not None
    got = stored.payload
    assert got == payload and type(got) is type(payload)


def test_sqlite_stores_the_exact_json_text(store: HubStore, backend: str) -> None:
    if backend != "sqlite":
        return
    msg = store.audit_log("event", "a", "b", "t", payload={"text": "한글", "n": 123})
    num = store.audit_log("event", "a", "b", "t", payload=123)
    with store.unit_of_work(write=False) as uow:
        rows: dict[str, str] = dict(uow.session.execute(text(
            "SELECT id, payload_json FROM messages WHERE typeof(payload_json) = 'text'")).all())
    assert rows == {msg.id: '{"text":"한글","n":123}', num.id: "123"}


def test_none_is_the_default_for_payloads_and_sql_null_for_results(store: HubStore) -> None:
    msg = store.audit_log("event", "a", "b", "t", payload=None)
    stored = store.get_message(msg.id)
    assert stored is not None and stored.payload == {}
    job = store.create_assign("lead", "w", result=None, error=None)
    stored_job = store.get_assign(job.job_id)
    assert stored_job is not None and stored_job.result is None


@pytest.mark.parametrize("bad, fragment", [
    (math.nan, "not valid JSON"), (math.inf, "not valid JSON"), ({1: "x"}, "keys must be"),
    ({"a": {2.5: 1}}, "keys must be"), (object(), "JSON cannot encode"), ({1, 2}, "JSON"),
    (b"bytes", "JSON cannot encode"), ("nul\x00", r"U\+0000"),
])
def test_non_strict_json_is_refused_before_writing(store: HubStore, bad: object,
                                                   fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        store.audit_log("event", "a", "b", "t", payload=bad)
    with pytest.raises(ValidationError, match=fragment):
        store.create_assign("lead", "w", result=bad)
    assert store.get_hub_stats()["total_messages"] == 0
    assert store.list_assigns() == []


def test_dumps_is_compact_and_keeps_unicode() -> None:
    assert dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'
