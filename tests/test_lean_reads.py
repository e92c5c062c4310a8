"""The lean read path (issue 11): JSON text read with the decoder's scanner, and poll
results made straight from the fetched rows, give what the general path gives."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect
from sqlalchemy.dialects import sqlite

from hubstore import HubStore
from hubstore.jsontype import JSONText

TEXTS = ['{"a":1,"b":[1,2.5,null,true]}', "[]", "123", '"123"', "null", " {} ", "{}\n",
         "not json", "", '{"a":', "NaN", "-0.0", '{"k":"\\u00e9\\ud83d\\ude00"}', "[1] [2]",
         "1e400", '{"a":{"b":{"c":[[[]]]}}}']


@pytest.mark.parametrize("fallback", ["{}", "[]", "null"])
def test_the_sqlite_reader_reads_every_text_as_process_result_value(fallback: str) -> None:
    column = JSONText(fallback)
    read = column.sqlite_reader()
    dialect = sqlite.dialect()
    for text in [*TEXTS, None]:
        expected = column.process_result_value(text, dialect)
        got = read(text)
        assert got == expected or (got != got and expected != expected), text  # NaN
        assert type(got) is type(expected), text


def test_polled_messages_are_the_stored_rows_detached(store: HubStore) -> None:
    store.register_agent("w", "codex", topics=["t.a"])
    sent = [store.audit_log("event", "lead", "w", "t.x", payload={"n": n, "f": 1.5})
            for n in range(3)]
    sent.append(store.audit_log("request", "lead", "topic:t.a", "t.a", payload=[1, "x"]))
    polled = store.poll_for_agent("w", 10)
    assert sorted(m.id for m in polled) == sorted(m.id for m in sent)
    for message in polled:
        stored = store.get_message(message.id)
        assert stored is not None and stored.to_dict() == message.to_dict()
        assert inspect(message).detached
    assert {m.id: m.payload for m in polled}[sent[-1].id] == [1, "x"]


def test_learning_a_new_pattern_runs_no_substring_search(store: HubStore) -> None:
    from sqlalchemy import event

    from hubstore.reflexion import learn_from_error

    first = learn_from_error(store, "TypeError: x is undefined at /src/a.js:1:2", "guard x")
    assert first is not None
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, statement, *_: seen.append(statement))
    # "x is undefined" contains the first pattern's text: a substring search would hit it
    other = learn_from_error(store, "TypeError: x is undefined at /src/a.js:1:2 in f",
                             "guard f")
    assert other is not None and other.id != first.id and other.hit_count == 1
    assert not [s for s in seen if " LIKE " in s or "MATCH" in s or "ILIKE" in s]
    again = learn_from_error(store, "TypeError: x is undefined at /src/a.js:9:9", "guard x")
    assert again is not None and again.id == first.id and again.hit_count == 2
    assert [e.id for e in store.find_reflexion(first.error_pattern)] == [first.id]
