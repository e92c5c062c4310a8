"""JSON columns keep every value's form (floats stay floats, ints stay ints, a
payload is stored as the reference stores it), and refuse what is not strict JSON;
SQLite's lean reader gives what the column type's own reading gives."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.dialects import sqlite

from hubstore import HubStore, ValidationError
from hubstore.jsontype import JSONText, dumps
from tests.faults.test_hostile_inputs import same

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


# --- exact values, and payloads as the reference stores them ----------------------


@pytest.mark.parametrize("value", [
    {"f": 1e16}, {"f": 1e300}, [1e16, -1e16, 123456789012345678.0], {"f": 1.5e-300},
    {"f": 2.0**70, "i": 2**62, "neg": -(2**63)}, 1e16, [0.1, 1.0, 0, -0.0],
])
def test_floats_stay_floats_and_ints_stay_ints(store: HubStore, value: Any) -> None:
    expected = [0.1, 1.0, 0, 0.0] if value == [0.1, 1.0, 0, -0.0] else value
    message = store.audit_log("event", "a", "b", "t", payload=value)
    job = store.create_assign("lead", "w", payload=value, result=value)
    request = store.insert_human_request("a", "text", "?", requested_schema=value)
    stored_message = store.get_message(message.id)
    stored_job = store.get_assign(job.job_id)
    stored_request = store.get_human_request(request_id=request.request_id)
    assert stored_message is not None and stored_job is not None
    assert stored_request is not None
    for got in (stored_message.payload, stored_job.payload, stored_job.result,
                stored_request.schema):
        assert same(expected, got), got


@pytest.mark.parametrize(("payload", "stored"), [
    ([], []), ({}, {}), (None, {}), (0, {}), ("", {}), (False, {}), ([0], [0]),
    ("x", "x"), (True, True), (1, 1),
])
def test_create_assign_payload_as_the_reference_stores_it(
        store: HubStore, payload: Any, stored: Any) -> None:
    job = store.create_assign("lead", "w", payload=payload)
    again = store.get_assign(job.job_id)
    assert again is not None and same(stored, again.payload) and same(stored, job.payload)


def test_audit_log_payload_none_is_an_empty_object_and_a_list_stays(store: HubStore) -> None:
    for payload, stored in ((None, {}), ([], []), (False, False), (0, 0)):
        message = store.audit_log("event", "a", "b", "t", payload=payload)
        again = store.get_message(message.id)
        assert again is not None and same(stored, again.payload)


# --- SQLite's reader (the JSON decoder's scanner) ---------------------------------


TEXTS = ['{"a":1,"b":[1,2.5,null,true]}', "[]", "123", '"123"', "null", " {} ", "{}\n",
         "not json", "", '{"a":', "NaN", "-0.0", '{"k":"\\u00e9\\ud83d\\ude00"}', "[1] [2]",
         "1e400", '{"a":{"b":{"c":[[[]]]}}}']


@pytest.mark.parametrize("fallback", ["{}", "[]", "null"])
def test_the_sqlite_reader_reads_every_text_as_process_result_value(fallback: str) -> None:
    column = JSONText(fallback)
    read = column.sqlite_reader()
    dialect = sqlite.dialect()
    for raw in [*TEXTS, None]:
        expected = column.process_result_value(raw, dialect)
        got = read(raw)
        assert got == expected or (got != got and expected != expected), raw  # NaN
        assert type(got) is type(expected), raw
