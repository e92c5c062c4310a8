"""The console (hubstore.web) over HTTP, on both dialects: pages, who may act, every
action's effect on the hub, escaping, secrets, /metrics, paging, plans, live pulse."""

from __future__ import annotations

import asyncio
import html
import logging
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import URL
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from starlette.testclient import TestClient

from hubstore import HubStore, ValidationError
from hubstore.aio import AsyncHubStore
from hubstore.ids import now_ms
from hubstore.reflexion import normalize_error
from hubstore.services.console_reads import (
    AGENTS_BY_STATUS,
    LATEST,
    PENDING,
    finished_since,
    snapshot,
)
from hubstore.web import create_app
from hubstore.web.stream import Pulse
from tests.console.web_helpers import HOSTILE, TOKEN, csrf, post, sign_in
from tests.factories import AssignJobFactory, MessageFactory, ReflexionEntryFactory
from tests.helpers import present, query_plan

PAGES = ["/", "/jobs", "/dead-letters", "/human-requests", "/reflexion", "/messages",
         "/login", "/live/overview", "/live/jobs", "/live/dead-letters",
         "/live/human-requests"]


def _job(store: HubStore, status: str = "queued", **values: object) -> str:
    job = store.create_assign("lead", "w1", task="t", status=status, **values)  # type: ignore[arg-type]
    return job.job_id


def test_every_page_renders_and_escapes_hostile_text(operator: TestClient, store: HubStore
                                                     ) -> None:
    for text in HOSTILE:
        store.register_agent(f"agent {text[:40]}", "codex", topics=[text[:100]])
        job = store.create_assign(text[:100], "w1", task=text, payload={"k": text})
        message = store.audit_log("event", "lead", "w1", "t", payload={"text": text},
                                  trace_id=job.trace_id)
        store.move_to_dead_letter(message.id, text, text)
        store.insert_human_request("w1", "text", text, requested_schema={"t": text})
        store.add_reflexion(text, text, text, solution_code=text)
    pages = [*PAGES, f"/job?id={job.job_id}", f"/messages?trace_id={job.trace_id}"]
    for path in pages:
        page = operator.get(path)
        assert page.status_code == 200, (path, page.text)
        assert "<script>window" not in page.text and "<img src=x" not in page.text, path
        assert "<b>bold</b>" not in page.text, path
    detail = operator.get(f"/job?id={job.job_id}").text
    assert html.escape(HOSTILE[-1]) in detail and html.escape(HOSTILE[0]) in operator.get(
        "/human-requests").text


def test_pages_send_no_cache_and_a_strict_content_policy(client: TestClient) -> None:
    page = client.get("/login")
    assert page.headers["cache-control"] == "no-store"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")


def test_without_a_token_the_console_is_read_only(store: HubStore) -> None:
    job_id = _job(store, "failed", max_retries=3)
    with TestClient(create_app(store), base_url="http://127.0.0.1") as c:
        page = c.get(f"/job?id={job_id}").text
        assert "read-only" in page and "Retry" not in page
        assert post(c, "/job/retry", {"id": job_id}) == 403
        assert post(c, "/login", {"token": "anything"}, "/login") == 403
    assert present(store.get_assign(job_id)).status == "failed"
    with pytest.raises(ValidationError, match="token"):
        create_app(store, read_only=False)
    with pytest.raises(ValidationError, match="token"):
        create_app(store, token="short")


def test_an_action_without_the_token_or_the_csrf_check_is_refused(client: TestClient,
                                                                  store: HubStore) -> None:
    job_id = _job(store, "failed", max_retries=3)
    assert post(client, "/job/retry", {"id": job_id}, "/login") == 401  # not signed in
    refused = client.post("/login", data={"csrf": csrf(client, "/login"), "token": "wrong!!!"})
    assert refused.status_code == 403 and "not the operator token" in refused.text
    sign_in(client)
    no_csrf = client.post("/job/retry", data={"id": job_id}, follow_redirects=False)
    assert no_csrf.status_code == 403
    forged = client.post("/job/retry", data={"id": job_id, "csrf": "0" * 64},
                         follow_redirects=False)
    assert forged.status_code == 403
    other_site = client.post("/job/retry", data={"id": job_id, "csrf": csrf(client)},
                             headers={"Origin": "http://evil.example"}, follow_redirects=False)
    assert other_site.status_code == 403
    assert present(store.get_assign(job_id)).status == "failed"
    assert post(client, "/job/retry", {"id": job_id}) == 303
    assert present(store.get_assign(job_id)).status == "queued"
    # signed out: refused again
    assert post(client, "/logout", {}) == 303
    client.cookies.delete("hubstore_console")
    assert post(client, "/job/retry", {"id": job_id}, "/login") == 401


def test_a_session_from_another_token_is_refused(store: HubStore) -> None:
    job_id = _job(store, "failed", max_retries=3)
    with TestClient(create_app(store, token="another-token-x"),
                    base_url="http://127.0.0.1") as other:
        sign_in(other, "another-token-x")
        stolen = other.cookies.get("hubstore_console")
    with TestClient(create_app(store, token=TOKEN), base_url="http://127.0.0.1") as c:
        c.cookies.set("hubstore_console", str(stolen))
        assert post(c, "/job/retry", {"id": job_id}, "/login") == 401


def test_an_auth_hook_decides_who_may_act(store: HubStore) -> None:
    job_id = _job(store, "failed", max_retries=3)

    async def hook(request: Request) -> bool:
        return request.headers.get("x-operator") == "yes"

    with TestClient(create_app(store, auth=hook), base_url="http://127.0.0.1") as c:
        assert c.get("/").status_code == 403  # the hook decides who may read too
        assert c.post("/job/retry", data={"id": job_id}).status_code == 403
        c.headers["x-operator"] = "yes"
        assert post(c, "/job/retry", {"id": job_id}) == 303
    assert present(store.get_assign(job_id)).status == "queued"


def test_retry_and_cancel_change_the_job(operator: TestClient, store: HubStore) -> None:
    failed = _job(store, "failed", max_retries=1)
    running = _job(store, "running")
    assert post(operator, "/job/retry", {"id": failed}) == 303
    after = present(store.get_assign(failed))
    assert (after.status, after.attempt) == ("queued", 2)
    assert post(operator, "/job/cancel", {"id": running, "reason": "stop it"}) == 303
    cancelled = present(store.get_assign(running))
    assert cancelled.status == "cancelled"
    refused = operator.post("/job/retry", data={"id": running, "csrf": csrf(operator)})
    assert refused.status_code == 409  # a job whose retries are spent
    assert "ASSIGN_" in refused.text


def test_a_job_whose_retries_are_spent_is_retried_anyway(operator: TestClient,
                                                         store: HubStore) -> None:
    spent = _job(store, "failed", max_retries=0)
    page = operator.get(f"/job?id={spent}").text
    assert "retries are spent" in page and ">Retry anyway<" in page and ">Retry<" not in page
    assert '<input type="hidden" name="force" value="1">' in page
    refused = operator.post("/job/retry", data={"id": spent, "csrf": csrf(operator)})
    assert refused.status_code == 409 and "retry it anyway" in refused.text
    assert present(store.get_assign(spent)).status == "failed"
    assert post(operator, "/job/retry", {"id": spent, "force": "1"}) == 303
    after = present(store.get_assign(spent))
    assert (after.status, after.attempt) == ("queued", 2)


def _why(client: TestClient, job_id: str) -> str:
    page = client.get(f"/job?id={job_id}").text
    return html.unescape(page.split('id="job-waiting">', 1)[1].split("</dd>", 1)[0])


def test_a_queued_job_says_why_it_is_not_taken(operator: TestClient, store: HubStore) -> None:
    later = AssignJobFactory.create(status="queued",
                                    not_before_ms=now_ms() + 3_600_000).job_id
    assert _why(operator, later).startswith("scheduled: due ")
    store.assign_async("lead", "w2", max_retries=1, retry_backoff_ms=600_000)
    backing_off = present(store.claim_next_assign("w2"))
    store.finish_assign(backing_off, "failed")  # retried, after its back-off
    assert _why(operator, backing_off.job_id).startswith("back-off after retry 1: due ")
    now = _job(store)
    assert _why(operator, now) == "due: waiting for worker 'w1' to claim it"
    store.set_assign_limit("codex", max_running=1)
    store.assign_async("lead", "w3", limit_key="codex")
    present(store.claim_next_assign("w3"))
    held = store.assign_async("lead", "w3", limit_key="codex", unique_key="nightly")
    assert _why(operator, held.job_id) == "limit codex: 1/1 running"
    detail = operator.get(f"/job?id={held.job_id}").text
    assert ">codex (limit: 1/1 running)<" in detail and ">nightly<" in detail
    listed = operator.get("/jobs?status=queued").text
    assert "limit codex: 1/1 running" in listed and "back-off after retry 1" in listed
    assert operator.get("/job?id=missing").status_code == 404


def test_the_overview_shows_each_workers_queued_and_running_jobs(operator: TestClient,
                                                                 store: HubStore) -> None:
    store.assign_many("lead", "w1", [{}, {}, {}])
    store.assign_many("lead", "w2", [{}, {}])
    present(store.claim_next_assign("w2"))
    store.assign_async("lead", "w3")
    store.finish_assign(present(store.claim_next_assign("w3")), "succeeded")
    page = operator.get("/").text.split('id="workers-h"', 1)[1].split("</section>", 1)[0]
    rows = [row.split("</tr>", 1)[0] for row in page.split("<tr><td>")[1:]]
    assert [html.unescape(r).split(">", 2)[1].split("<", 1)[0] for r in rows] == ["w1", "w2"]
    assert rows[0].endswith("<td>3</td><td>0</td>") and rows[1].endswith("<td>1</td><td>1</td>")


def test_the_overview_lists_the_assign_limits(operator: TestClient, store: HubStore) -> None:
    assert "No assign limit is set" in operator.get("/").text
    store.set_assign_limit("gemini", max_starts=60, per_ms=60_000)
    store.set_assign_limit("codex", max_running=2)
    store.assign_async("lead", "w1", limit_key="codex")
    present(store.claim_next_assign("w1"))
    page = operator.get("/").text
    rows = {row.split('"', 1)[0]: row for row in page.split('data-limit="')[1:]}
    assert "<td>1</td><td>2</td>" in rows["codex"]
    assert "<td>0</td><td>60</td><td>1m</td>" in rows["gemini"]


def test_a_bad_cursor_or_filter_is_refused_with_a_reason(operator: TestClient) -> None:
    bad = operator.get("/jobs?after=not-a-cursor")
    assert bad.status_code == 400 and "cursor" in bad.text
    assert operator.get("/live/jobs?after=not-a-cursor").status_code == 400


def test_dead_letters_requeue_and_discard(operator: TestClient, store: HubStore) -> None:
    first, second = MessageFactory.create(), MessageFactory.create()
    store.move_to_dead_letter(first.id, "boom")
    store.move_to_dead_letter(second.id, "bang")
    page = operator.get("/dead-letters").text
    assert "boom" in page and "Requeue" in page
    assert post(operator, "/dead-letters/requeue", {"id": first.id}, "/dead-letters") == 303
    assert present(store.get_message(first.id)).status == "queued"
    assert post(operator, "/dead-letters/discard", {"id": second.id}, "/dead-letters") == 303
    assert store.get_dead_letters() == []
    again = operator.post("/dead-letters/discard", data={"id": second.id,
                                                         "csrf": csrf(operator)})
    assert "already gone" in again.text


def test_human_requests_are_answered_by_kind(operator: TestClient, store: HubStore) -> None:
    approval = store.insert_human_request("a", "approval", "ship?")
    choice = store.insert_human_request("a", "choice", "which?",
                                        requested_schema={"enum": ["red", "blue"]})
    text = store.insert_human_request("a", "text", "why?")
    captcha = store.insert_human_request("a", "captcha", "what does it say?")
    declined = store.insert_human_request("a", "approval", "delete prod?")
    page = operator.get("/human-requests").text
    for req in (approval, choice, text, captcha, declined):
        assert html.escape(req.prompt) in page
    answers = [(approval, {"decision": "accept"}, "accepted", {"approved": True}),
               (choice, {"decision": "accept", "choice": "blue"}, "accepted", {"choice": "blue"}),
               (text, {"decision": "accept", "value": "because"}, "accepted",
                {"text": "because"}),
               (captcha, {"decision": "accept", "value": "x7Yq"}, "accepted", {"text": "x7Yq"}),
               (declined, {"decision": "decline"}, "declined", None)]
    for req, form, state, response in answers:
        assert post(operator, "/human-requests/answer", {"id": req.request_id, **form},
                    "/human-requests") == 303
        stored = present(store.get_human_request(req.request_id))
        assert (stored.state, stored.response) == (state, response)
    assert store.get_pending_human_requests() == []


def test_an_answer_after_someone_elses_is_not_kept_and_says_so(operator: TestClient,
                                                               store: HubStore) -> None:
    request = store.insert_human_request("a", "approval", "ship?")
    token = csrf(operator, "/human-requests")  # the page shown while it was pending
    store.answer_human_request(request.request_id, "declined")  # another operator
    late = operator.post("/human-requests/answer", data={
        "id": request.request_id, "decision": "accept", "csrf": token})
    assert late.status_code == 200
    assert "someone else answered it first (it is declined): yours was not kept" in late.text
    stored = present(store.get_human_request(request.request_id))
    assert (stored.state, stored.response) == ("declined", None)


def test_a_choice_outside_the_options_is_refused(operator: TestClient, store: HubStore) -> None:
    choice = store.insert_human_request("a", "choice", "which?",
                                        requested_schema={"options": ["red", "blue"]})
    assert post(operator, "/human-requests/answer",
                {"id": choice.request_id, "decision": "accept", "choice": "green"},
                "/human-requests") == 400
    assert present(store.get_human_request(choice.request_id)).state == "pending"


def test_a_credential_is_never_shown_logged_or_put_in_a_url(
        operator: TestClient, store: HubStore, caplog: pytest.LogCaptureFixture) -> None:
    secret = "hunter2-Sup3r-s3cret"
    request = store.insert_human_request("a", "credential", "the database password?")
    form = operator.get("/human-requests").text
    assert 'type="password"' in form
    caplog.set_level(logging.DEBUG)
    answer = operator.post("/human-requests/answer", data={
        "id": request.request_id, "decision": "accept", "value": secret,
        "csrf": csrf(operator, "/human-requests")}, follow_redirects=False)
    assert answer.status_code == 303 and secret not in answer.headers["location"]
    assert present(store.get_human_request(request.request_id)).response == {
        "credential": secret}
    for path in PAGES:
        assert secret not in operator.get(path).text, path
    assert secret not in caplog.text and TOKEN not in caplog.text
    assert TOKEN not in operator.get("/").text


def test_reflexion_search_edit_and_delete(operator: TestClient, store: HubStore) -> None:
    entry = store.add_reflexion(normalize_error("ModuleNotFoundError: x"),
                                "ModuleNotFoundError: x", "pip install x")
    other = store.add_reflexion(normalize_error("TimeoutError: y"), "TimeoutError: y",
                                "wait longer")
    found = operator.get("/reflexion?q=ModuleNotFoundError: x").text
    assert "pip install x" in found and "wait longer" not in found
    listed = operator.get("/reflexion?min_confidence=0").text
    assert "pip install x" in listed and "wait longer" in listed
    assert post(operator, "/reflexion/edit", {
        "id": entry.id, "error_pattern": entry.error_pattern,
        "error_message": entry.error_message, "solution": "pip install x==2",
        "solution_code": "", "confidence": "0.9"}, "/reflexion") == 303
    edited = present(store.get_reflexion(entry.id))
    assert (edited.solution, edited.confidence, edited.solution_code) == (
        "pip install x==2", 0.9, None)
    bad = operator.post("/reflexion/edit", data={
        "id": entry.id, "error_pattern": "p", "error_message": "m", "solution": "s",
        "confidence": "lots", "csrf": csrf(operator)})
    assert bad.status_code == 400 and "confidence" in bad.text
    assert post(operator, "/reflexion/delete", {"id": other.id}, "/reflexion") == 303
    assert store.get_reflexion(other.id) is None


def test_the_reflexion_list_is_paged_in_list_reflexions_order(operator: TestClient,
                                                              store: HubStore) -> None:
    for i in range(55):
        ReflexionEntryFactory.create(confidence=(i % 7) / 7, type="adaptive")
    ReflexionEntryFactory.create(type="reflexion")
    listed = [e.id for e in store.list_reflexion(type="adaptive")]
    first = operator.get("/reflexion?type=adaptive").text
    link = first.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
    second = operator.get(html.unescape(link)).text
    assert "Next page" not in second and "First page" in second
    shown = [page.split("/reflexion/entry?id=")[1:] for page in (first, second)]
    assert [len(page) for page in shown] == [50, 5]
    assert [part.split('"', 1)[0] for page in shown for part in page] == listed


def test_metrics_are_the_hubs_figures(operator: TestClient, store: HubStore) -> None:
    store.register_agent("w1", "codex")
    for status in ("queued", "queued", "running", "failed"):
        _job(store, status)
    message = MessageFactory.create(priority=8)
    MessageFactory.create()
    store.move_to_dead_letter(MessageFactory.create().id, "x")
    store.insert_human_request("a", "text", "?")
    response = operator.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(response.text)
               for s in family.samples}
    assert samples[("hubstore_assign_jobs", (("status", "queued"),))] == 2
    assert samples[("hubstore_assign_jobs", (("status", "running"),))] == 1
    assert samples[("hubstore_assign_jobs", (("status", "failed"),))] == 1
    assert samples[("hubstore_assign_jobs_finished_total", (("status", "failed"),))] == 1
    assert samples[("hubstore_agents", (("status", "online"),))] == 1
    assert samples[("hubstore_dead_letters", ())] == 1
    assert samples[("hubstore_human_requests_pending", ())] == 1
    assert samples[("hubstore_messages", ())] == 3
    assert samples[("hubstore_messages_queued", (("urgency", "urgent"),))] == 1
    assert message.priority == 8
    depths = {labels: value for (name, labels), value in samples.items()
              if name == "hubstore_worker_assign_jobs"}
    assert depths == {(("status", "queued"), ("worker", "w1")): 2,
                      (("status", "running"), ("worker", "w1")): 1}


def test_the_jobs_page_links_its_next_page(operator: TestClient, store: HubStore) -> None:
    for _ in range(55):
        _job(store)
    first = operator.get("/jobs?status=queued").text
    assert first.count("data-job=") == 50 and "Next page" in first
    link = first.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
    second = operator.get(html.unescape(link)).text
    assert second.count("data-job=") == 5 and "Next page" not in second


def test_the_consoles_reads_use_indexes(store: HubStore, backend: str) -> None:
    statements = [AGENTS_BY_STATUS, PENDING, LATEST, finished_since(0)]
    for statement in statements:
        plan = query_plan(store, statement)
        assert "Seq Scan" not in plan, plan
        for table in ("assign_jobs", "human_requests", "agents", "messages"):
            assert f"SCAN {table} " not in plan + " " or f"SCAN {table} USING" in plan, plan


def test_the_console_mounts_inside_an_application(store: HubStore) -> None:
    outer = Starlette(routes=[Mount("/hub", app=create_app(store, token=TOKEN))])
    with TestClient(outer, base_url="http://127.0.0.1") as c:
        assert c.get("/hub/", follow_redirects=False).headers["location"] == (
            "http://127.0.0.1/hub/login")
        sign_in(c, root="/hub")
        page = c.get("/hub/").text
        assert 'href="http://127.0.0.1/hub/jobs"' in page
        assert 'src="http://127.0.0.1/hub/static/htmx.min.js"' in page
        assert c.get("/hub/static/htmx-ext-sse.min.js").status_code == 200
        assert "hubstore_assign_jobs" in c.get("/hub/metrics").text


def test_an_async_store_is_taken_as_it_is(db_url: URL) -> None:
    async def run() -> None:
        async with await AsyncHubStore.open(db_url) as astore:
            await astore.create_assign("lead", "w1", task="async one")
            app = create_app(astore)
            assert app.state.console.store is astore

    asyncio.run(run())
    with pytest.raises(ValidationError, match="HubStore"):
        create_app("sqlite:///x.db")  # type: ignore[arg-type]


def test_the_pulse_hears_a_job_finished_by_another_process(store: HubStore,
                                                           db_url: URL) -> None:
    job_id = _job(store, "running")

    async def run() -> float:
        astore = AsyncHubStore(store)
        pulse = Pulse(astore)
        async with pulse.listen() as listener:
            while pulse.latest is None:
                await asyncio.sleep(0.01)
            loop = asyncio.get_running_loop()
            finish = ("import sys; from hubstore import HubStore; "
                      "s = HubStore.open(sys.argv[1]); "
                      "s.update_assign_status(sys.argv[2], 'succeeded'); s.close()")
            await asyncio.to_thread(subprocess.run, [
                sys.executable, "-c", finish,
                db_url.render_as_string(hide_password=False), job_id], check=True)
            started = loop.time()
            version = await listener.next(timeout_s=5)
            assert version is not None
            assert present(pulse.latest).jobs_by_status["succeeded"] == 1
            return loop.time() - started

    assert asyncio.run(run()) < 1.0


def test_snapshot_counts_match_the_store(store: HubStore) -> None:
    _job(store, "succeeded")
    _job(store, "queued")
    snap = snapshot(store)
    stats = store.get_audit_stats()
    assert snap.jobs_by_status["queued"] == stats["assign_queued"] == 1
    assert snap.jobs_by_status["succeeded"] == 1 and snap.finished_last_minute == 1


def test_importing_the_console_without_its_extra_names_the_extra() -> None:
    code = ("import sys; sys.modules['starlette'] = None\n"
            "try:\n    import hubstore.web\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert 'pip install "hubstore[web]"' in out


def test_the_human_requests_status_says_when_the_list_changed(operator: TestClient,
                                                              store: HubStore) -> None:
    store.insert_human_request("a", "text", "first?")
    page = operator.get("/human-requests").text
    live = html.unescape(page.split('hx-get="', 2)[1].split('"')[0])  # the status's URL
    assert "/live/human-requests?shown=" in live
    assert "have changed" not in operator.get(live).text
    store.insert_human_request("a", "text", "second?")
    assert "have changed" in operator.get(live).text
