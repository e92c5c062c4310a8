"""The console as an operator works in it all day (issue 38), over HTTP on both dialects:
the job page pages its trace, an unchanged reflexion save changes nothing, human
requests past their deadline, visible bidi text, choice labels, the answered history,
and /metrics' queue age, latency and finished counter."""

from __future__ import annotations

import html
import re
import time
from typing import cast

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.sql import ClauseElement
from starlette.testclient import TestClient

from hubstore import HubStore, ValidationError
from hubstore.ids import now_ms
from hubstore.services import job_metrics
from tests.console.web_helpers import TOKEN, csrf, post
from tests.factories import AssignJobFactory, MessageFactory
from tests.helpers import analyzed, present, query_plan


def _next_link(page: str) -> str | None:
    found = re.search(r'href="([^"]*)" rel="next"', page)
    return None if found is None else html.unescape(found.group(1))


def test_page_messages_by_trace_pages_a_trace_oldest_first(store: HubStore) -> None:
    trace = "trace-long"
    for i in range(25):
        MessageFactory.create(trace_id=trace, created_at_ms=1_000 + i // 3)  # ties
    MessageFactory.create()  # another trace
    seen, cursor = [], None
    while True:
        page = store.page_messages_by_trace(trace, after=cursor, limit=10)
        assert len(page.messages) <= 10
        seen += [m.id for m in page.messages]
        cursor = page.next
        if cursor is None:
            break
    assert seen == [m.id for m in store.get_messages_by_trace(trace)]
    assert store.page_messages_by_trace("no-such-trace").messages == []
    with pytest.raises(ValidationError, match="cursor"):
        store.page_messages_by_trace(trace, after="nonsense")
    with pytest.raises(ValidationError, match="limit"):
        store.page_messages_by_trace(trace, limit=0)


def test_the_job_page_holds_one_page_of_its_trace_and_links_the_next(
        operator: TestClient, store: HubStore) -> None:
    client = operator
    job = store.create_assign("lead", "w1", task="t")
    ids = [MessageFactory.create(trace_id=job.trace_id, created_at_ms=1_000 + i).id
           for i in range(230)]
    shown: list[str] = []
    url: str | None = f"/job?id={job.job_id}"
    pages = 0
    while url is not None:
        page = client.get(url)
        assert page.status_code == 200
        rows = page.text.count("data-message=")
        assert rows <= 100
        shown += re.findall(r"data-message=\"([^\"]+)\"", page.text)
        live = client.get(url.replace("/job?", "/live/job?")).text
        assert live.count("data-message=") == rows  # the live part refreshes that page only
        url = _next_link(page.text)
        pages += 1
    assert pages == 3 and shown == ids
    assert client.get(f"/job?id={job.job_id}&after=bad").status_code == 400


def test_the_messages_page_pages_a_trace(operator: TestClient, store: HubStore) -> None:
    client = operator
    trace = "trace-of-many"
    for i in range(110):
        MessageFactory.create(trace_id=trace, created_at_ms=1_000 + i)
    first = client.get(f"/messages?trace_id={trace}").text
    assert first.count("data-message=") == 100
    link = _next_link(first)
    assert link is not None
    second = client.get(link).text
    assert second.count("data-message=") == 10 and _next_link(second) is None
    assert "First messages" in second


def _form_as_a_browser_sends_it(page: str) -> dict[str, str]:
    """The edit form's fields as a browser submits them: a textarea's first newline
    dropped (HTML's rule), its line ends sent as CRLF."""
    form = page.split('class="edit">', 1)[1].split("</form>", 1)[0]
    fields = {name: html.unescape(value) for name, value in
              re.findall(r'<input (?:type="hidden" )?name="([^"]+)" value="([^"]*)"', form)}
    for name, value in re.findall(r'<textarea name="([^"]+)"[^>]*>(.*?)</textarea>', form,
                                  re.DOTALL):
        text = html.unescape(value)
        text = text[1:] if text.startswith("\n") else text
        fields[name] = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return fields


def test_saving_a_reflexion_entry_unchanged_changes_nothing(operator: TestClient,
                                                            store: HubStore) -> None:
    pattern = "\nTraceback (most recent call last):\n  File <x>\nKeyError: 'a'"
    entry = store.add_reflexion(pattern, "KeyError: 'a'\r\nat line 3", "\nuse .get()\n",
                                solution_code="d.get('a')\r\n")
    before = present(store.get_reflexion(entry.id))
    page = operator.get(f"/reflexion/entry?id={entry.id}").text
    form = _form_as_a_browser_sends_it(page)
    assert form["error_pattern"].startswith("\r\n")  # its leading newline kept
    saved = operator.post("/reflexion/edit", data=form, follow_redirects=False)
    assert saved.status_code == 303
    after = present(store.get_reflexion(entry.id))
    assert after.to_dict() == before.to_dict()  # every field, updated_at_ms too
    assert [e.id for e in store.find_reflexion_exact(pattern)] == [entry.id]
    # a real change is saved, with the textarea's CRLF line ends as LF
    form["solution"] = "use dict.get()\r\nor a default"
    assert operator.post("/reflexion/edit", data=form,
                         follow_redirects=False).status_code == 303
    changed = present(store.get_reflexion(entry.id))
    assert changed.solution == "use dict.get()\nor a default"
    assert (changed.error_pattern, changed.error_message) == (pattern, before.error_message)
    assert changed.updated_at_ms >= before.updated_at_ms
    assert post(operator, "/reflexion/edit", {"id": "gone", **{
        k: v for k, v in form.items() if k not in ("id", "csrf")}}) == 404
    assert csrf(operator)


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_tell_queue_age_claim_to_finish_and_a_finished_counter(
        client: TestClient, store: HubStore) -> None:
    now = now_ms()
    for priority, age_s in ((9, 30), (1, 120), (5, 60)):
        AssignJobFactory.create(worker_agent="w1", status="queued", priority=priority,
                                created_at_ms=now - age_s * 1000)
    AssignJobFactory.create(worker_agent="w2", status="queued", created_at_ms=now - 5_000)
    # w4's oldest has a limit key (PostgreSQL indexes those apart: revision 0019)
    AssignJobFactory.create(worker_agent="w4", status="queued", created_at_ms=now - 20_000)
    for key, age_s in (("codex", 300), ("gemini", 200)):
        AssignJobFactory.create(worker_agent="w4", status="queued", limit_key=key,
                                priority=7, created_at_ms=now - age_s * 1000)
    AssignJobFactory.create(worker_agent="w3", status="running")  # nothing queued

    def finish(status: str, took_ms: int) -> None:
        at = now_ms()
        AssignJobFactory.create(worker_agent="w3", status=status, started_at_ms=at - took_ms,
                                completed_at_ms=at, updated_at_ms=at)

    finish("succeeded", 3_000)
    first = _samples(client)
    ages = {labels: value for (name, labels), value in first.items()
            if name == "hubstore_worker_queue_age_seconds"}
    assert set(ages) == {(("worker", "w1"),), (("worker", "w2"),), (("worker", "w4"),)}
    assert 120 <= ages[(("worker", "w1"),)] < 130 and 5 <= ages[(("worker", "w2"),)] < 15
    assert 300 <= ages[(("worker", "w4"),)] < 310
    done = ("hubstore_assign_jobs_finished_total", (("status", "succeeded"),))
    assert first[done] == 1
    assert first[("hubstore_assign_jobs_finished_total", (("status", "failed"),))] == 0
    bucket = "hubstore_assign_job_claim_to_finish_seconds_bucket"
    assert first[(bucket, (("le", "2.5"), ("status", "succeeded")))] == 0
    assert first[(bucket, (("le", "5.0"), ("status", "succeeded")))] == 1
    assert not any(name.endswith("last_minute") for name, _ in first)
    finish("succeeded", 100)
    finish("failed", 700_000)
    second = _samples(client)
    assert second[done] == 2 and _samples(client)[done] == 2  # each finish counted once
    assert second[(bucket, (("le", "0.25"), ("status", "succeeded")))] == 1
    assert second[(bucket, (("le", "900.0"), ("status", "failed")))] == 1
    assert second[(bucket, (("le", "300.0"), ("status", "failed")))] == 0


def test_a_request_past_its_deadline_shows_as_expired_and_cannot_be_answered(
        operator: TestClient, store: HubStore) -> None:
    late = store.insert_human_request("a", "approval", "ship it late?", deadline_ms=1)
    live = store.insert_human_request("a", "approval", "ship it now?")
    time.sleep(0.01)
    page = operator.get("/human-requests").text
    expired = page.split('id="expired-h"', 1)[1].split("</section>", 1)[0]
    assert "ship it late?" in expired and "ship it now?" not in expired
    forms = re.findall(r'name="id" value="([^"]+)"', page)
    assert live.request_id in forms and late.request_id not in forms
    refused = operator.post("/human-requests/answer", data={
        "id": late.request_id, "decision": "accept", "csrf": csrf(operator)})
    assert refused.status_code == 409 and "deadline passed" in refused.text
    assert present(store.get_human_request(late.request_id)).state == "pending"


def test_invisible_characters_in_a_request_show_as_code_points(operator: TestClient,
                                                               store: HubStore) -> None:
    store.insert_human_request("lead\u202eevil", "choice", "approve\u200b it?\u2066",
                               requested_schema={"enum": ["yes\u200d"]})
    page = operator.get("/human-requests").text
    for code in ("U+202E", "U+200B", "U+2066", "U+200D"):
        assert f"⟨{code}⟩" in page, code
    main = page.split("<main", 1)[1]
    assert not any(c in main for c in "\u202e\u200b\u2066") and 'value="yes\u200d"' in main


def test_choice_labels_text_answers_and_the_answered_history(operator: TestClient,
                                                             store: HubStore) -> None:
    choice = store.insert_human_request("a", "choice", "which?", requested_schema={
        "options": [{"value": "b1", "label": "The blue one"}, {"value": "r2"}]})
    text = store.insert_human_request("a", "text", "why?")
    secret = store.insert_human_request("a", "credential", "key?")
    page = operator.get("/human-requests").text
    assert 'value="b1" required> The blue one</label>' in page
    assert 'value="r2"> r2</label>' in page
    assert '<textarea name="value"' in page
    assert post(operator, "/human-requests/answer", {
        "id": choice.request_id, "decision": "accept", "choice": "b1"}) == 303
    assert post(operator, "/human-requests/answer", {
        "id": text.request_id, "decision": "accept", "value": "first\r\nsecond"}) == 303
    assert post(operator, "/human-requests/answer", {
        "id": secret.request_id, "decision": "accept", "value": "hunter2-xyz"}) == 303
    assert present(store.get_human_request(choice.request_id)).response == {"choice": "b1"}
    assert present(store.get_human_request(text.request_id)).response == {
        "text": "first\nsecond"}
    history = operator.get("/human-requests").text.split('id="history-h"', 1)[1]
    rows = re.findall(r'data-answered="([^"]+)"', history)
    assert rows == [secret.request_id, text.request_id, choice.request_id]  # newest first
    assert "hunter2-xyz" not in history and "never shown" in history
    assert '"text": "first\\nsecond"' in html.unescape(history)


def test_a_workers_queue_age_reads_a_few_index_entries(store: HubStore) -> None:
    """/metrics' queue age probes the claim indexes' first entries: with 600 queued jobs
    of one worker (half of them under two limit keys) it reads a few dozen index
    entries, not the worker's jobs (PostgreSQL's EXPLAIN ANALYZE; SQLite's plan)."""
    now = now_ms()
    AssignJobFactory.create_batch(300, worker_agent="w1", status="queued",
                                  created_at_ms=now - 1_000)
    for key in ("codex", "gemini"):
        AssignJobFactory.create_batch(150, worker_agent="w1", status="queued",
                                      limit_key=key, created_at_ms=now - 2_000)
    with store.unit_of_work(write=False) as uow:
        sqlite = uow.dialect == "sqlite"
        prepared = job_metrics.OLDEST_QUEUED[uow.sql.split_claim_indexes]
        statement = cast(ClauseElement, prepared.statement).params(p_worker="w1")
        if not sqlite:
            uow.connection.execute(text("ANALYZE assign_jobs"))  # it knows the 600 jobs
            sql = str(statement.compile(dialect=uow.connection.dialect,
                                        compile_kwargs={"literal_binds": True}))
            plan, read = analyzed(uow.connection, sql)
            assert read <= 60, plan
    if sqlite:
        plan = query_plan(store, statement)
        assert "ix_assign_jobs_claim" in plan and "SCAN assign_jobs" not in plan, plan
