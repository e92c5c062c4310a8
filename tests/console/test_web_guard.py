"""The console's guard (issue 38): who may read, secrets kept out of logs, sessions that
end on the server, bounded bodies, the Host header, sign-in throttling, fixed notices,
and forms that outlive a restart. On both dialects."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from starlette.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.ids import now_ms
from hubstore.web import create_app, guard
from hubstore.web import stream as streams
from tests.console.web_helpers import TOKEN, csrf, post, sign_in
from tests.helpers import present

BASE = "http://127.0.0.1"


@pytest.fixture
def client(store: HubStore) -> Iterator[TestClient]:
    with TestClient(create_app(store, token=TOKEN), base_url=BASE) as c:
        yield c


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture,
         monkeypatch: pytest.MonkeyPatch) -> pytest.LogCaptureFixture:
    """caplog, with the loggers the tests read enabled again (a logging configuration
    with ``disable_existing_loggers``, run by an earlier test in the process, turns them
    off)."""
    for name in ("hubstore", "hubstore.web", "sqlalchemy", "sqlalchemy.engine",
                 "sqlalchemy.engine.Engine"):
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)
    return caplog


def test_no_secret_reaches_the_log_at_any_verbosity(db_url: URL,
                                                    logs: pytest.LogCaptureFixture) -> None:
    """What ``hubstore web -vv`` logs (its most: hubstore at DEBUG, SQLAlchemy's
    statements at INFO) while an operator signs in and answers a credential request."""
    secret = "hunter2-in-the-log?"
    logs.set_level(logging.DEBUG)
    logs.set_level(logging.DEBUG, logger="hubstore")
    logs.set_level(logging.INFO, logger="sqlalchemy.engine")
    with HubStore.open(db_url) as store:  # opened after logging is on (as -vv does)
        request = store.insert_human_request("a", "credential", "the password?")
        with TestClient(create_app(store, token=TOKEN), base_url=BASE) as c:
            sign_in(c)
            assert post(c, "/human-requests/answer", {
                "id": request.request_id, "decision": "accept", "value": secret},
                "/human-requests") == 303
            session = c.cookies.get("hubstore_console")
        assert present(store.get_human_request(request.request_id)).response == {
            "credential": secret}
    assert "UPDATE human_requests" in logs.text  # the statements were logged
    assert secret not in logs.text and TOKEN not in logs.text
    assert session and session not in logs.text


# -- 1. reading needs the session (or the hook's yes) ------------------------------------

GUARDED = ["/", "/jobs", "/job?id=x", "/human-requests", "/dead-letters", "/reflexion",
           "/reflexion/entry?id=x", "/messages?trace_id=t", "/live/overview", "/live/jobs",
           "/live/human-requests", "/events", "/events/messages?agent=a1", "/metrics"]


def test_with_a_token_nothing_is_read_without_a_session(client: TestClient,
                                                        store: HubStore) -> None:
    job = store.create_assign("lead", "w1", task="the secret task", payload={"k": "v"})
    for path in [*GUARDED, f"/job?id={job.job_id}"]:
        answer = client.get(path, follow_redirects=False)
        if path.startswith(("/live/", "/events", "/metrics")):
            assert answer.status_code == 401, path
        else:
            assert answer.status_code == 303, path
            assert answer.headers["location"] == f"{BASE}/login"
        assert "secret task" not in answer.text and "hubstore_" not in answer.text, path
    assert client.get("/metrics").headers["www-authenticate"] == "Bearer"
    assert client.get("/login").status_code == 200
    assert client.get("/static/htmx.min.js").status_code == 200
    sign_in(client)
    assert "the secret task" in client.get(f"/job?id={job.job_id}").text
    assert client.get("/metrics").status_code == 200


def test_metrics_take_the_token_as_a_bearer(client: TestClient) -> None:
    scraped = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200 and "hubstore_assign_jobs" in scraped.text
    for wrong in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN):
        assert client.get("/metrics", headers={"Authorization": wrong}).status_code == 401
    # the bearer opens /metrics only
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"},
                      follow_redirects=False).status_code == 303


def test_a_hook_that_says_no_refuses_reading(store: HubStore) -> None:
    store.insert_human_request("a", "text", "the secret question")
    with TestClient(create_app(store, auth=lambda r: False), base_url=BASE) as c:
        for path in GUARDED:
            answer = c.get(path, follow_redirects=False)
            assert answer.status_code in (401, 403), path
            assert "secret question" not in answer.text
    with TestClient(create_app(store, auth=lambda r: True), base_url=BASE) as c:
        assert "the secret question" in c.get("/human-requests").text


def test_without_a_token_the_console_reads_openly(store: HubStore) -> None:
    with TestClient(create_app(store), base_url=BASE) as c:
        assert c.get("/").status_code == 200 and c.get("/metrics").status_code == 200


# -- 3. sessions end on the server ---------------------------------------------------------

def _sessions(store: HubStore) -> list[tuple[str, int]]:
    with store.unit_of_work(write=False) as uow:
        rows = uow.connection.execute(text(
            "SELECT session_hash, expires_at_ms FROM console_sessions")).all()
    return [(str(h), int(e)) for h, e in rows]


def test_sign_out_ends_the_session_and_any_copy_of_it(client: TestClient,
                                                      store: HubStore) -> None:
    sign_in(client)
    copy = str(client.cookies.get("hubstore_console"))
    [(digest, ends)] = _sessions(store)
    assert copy not in digest and digest != copy  # only a digest is kept
    assert ends - now_ms() == pytest.approx(12 * 3600 * 1000, abs=60_000)
    assert post(client, "/logout", {}) == 303
    assert _sessions(store) == []
    with TestClient(create_app(store, token=TOKEN), base_url=BASE,
                    cookies={"hubstore_console": copy}) as replay:
        assert replay.get("/", follow_redirects=False).status_code == 303
        assert replay.get("/metrics").status_code == 401


def test_a_session_past_its_end_is_refused_and_pruned(client: TestClient,
                                                      store: HubStore) -> None:
    sign_in(client)
    with store.unit_of_work() as uow:
        uow.connection.execute(text("UPDATE console_sessions SET expires_at_ms = 1"))
    assert client.get("/", follow_redirects=False).status_code == 303
    with TestClient(create_app(store, token=TOKEN), base_url=BASE) as other:
        sign_in(other)
    assert [ends > 1 for _, ends in _sessions(store)] == [True]  # the ended one pruned


def test_a_session_holds_across_console_processes_and_restarts(store: HubStore) -> None:
    with TestClient(create_app(store, token=TOKEN), base_url=BASE) as first:
        sign_in(first)
        cookies = dict(first.cookies)
        page = first.get("/dead-letters")  # a form rendered before the restart
        assert page.status_code == 200
        form_csrf = csrf(first, "/dead-letters")
    # another process (or this one restarted): a new app, the same hub and token
    with TestClient(create_app(store, token=TOKEN), base_url=BASE, cookies=cookies) as again:
        assert again.get("/").status_code == 200
        sent = again.post("/dead-letters/discard", data={"id": "gone", "csrf": form_csrf},
                          follow_redirects=False)
        assert sent.status_code == 303  # the form rendered before still submits
        assert post(again, "/logout", {}) == 303
    with TestClient(create_app(store, token=TOKEN), base_url=BASE, cookies=cookies) as third:
        assert third.get("/", follow_redirects=False).status_code == 303


def test_a_hooks_form_submits_after_a_restart(store: HubStore) -> None:
    job = store.create_assign("lead", "w1", task="t", status="failed", max_retries=2)
    with TestClient(create_app(store, auth=lambda r: True), base_url=BASE) as first:
        form_csrf = csrf(first, f"/job?id={job.job_id}")
        cookies = dict(first.cookies)
    with TestClient(create_app(store, auth=lambda r: True), base_url=BASE,
                    cookies=cookies) as again:
        sent = again.post("/job/retry", data={"id": job.job_id, "csrf": form_csrf},
                          follow_redirects=False)
        assert sent.status_code == 303
    assert present(store.get_assign(job.job_id)).status == "queued"


# -- 4. bodies are bounded before they are read --------------------------------------------

def _scope(method: str, path: str, headers: dict[str, str]) -> dict[str, Any]:
    """An ASGI scope of one HTTP request from 127.0.0.1."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "server": ("127.0.0.1", 8420),
            "client": ("127.0.0.1", 5000),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}


def _raw(app: Any, method: str, path: str, headers: dict[str, str],
         chunks: list[bytes]) -> tuple[int, int]:
    """(status, how many body chunks the app read) for one request sent to ``app`` as
    ASGI messages."""
    read = 0
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read < len(chunks):
            read += 1
            return {"type": "http.request", "body": chunks[read - 1],
                    "more_body": read < len(chunks)}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    asyncio.run(app(_scope(method, path, headers), receive, send))
    return status, read


def test_a_big_body_is_refused_before_it_is_read(store: HubStore) -> None:
    app = create_app(store, token=TOKEN)
    form = {"host": "127.0.0.1", "content-type": "application/x-www-form-urlencoded"}
    chunk = b"a" * 65536
    # declared: refused at once, nothing read
    assert _raw(app, "POST", "/login", {**form, "content-length": str(100 << 20)},
                [chunk] * 4) == (413, 0)
    # chunked: refused once past the bound (16 KiB for whoever is not signed in)
    status, read = _raw(app, "POST", "/login", form, [b"a" * 1024] * 2000)
    assert status == 413 and read <= 17
    # an action from whoever is not signed in is refused before its body is read
    assert _raw(app, "POST", "/job/retry", {**form, "content-length": "100"},
                [b"id=x"]) == (401, 0)
    assert _raw(app, "POST", "/login", {**form, "content-type": "multipart/form-data; "
                                        "boundary=x", "content-length": "10"},
                [b"--x--"]) == (415, 0)


def test_a_signed_in_operator_may_send_up_to_a_megabyte(client: TestClient,
                                                       store: HubStore) -> None:
    sign_in(client)
    entry = store.add_reflexion("p", "m", "s")
    big = client.post("/reflexion/edit", data={
        "id": entry.id, "csrf": csrf(client), "error_pattern": "p", "error_message": "m",
        "solution": "x" * (2 << 20), "confidence": "0.5"})
    assert big.status_code == 413
    assert present(store.get_reflexion(entry.id)).solution == "s"
    assert post(client, "/reflexion/edit", {
        "id": entry.id, "error_pattern": "p", "error_message": "m",
        "solution": "y" * 100_000, "solution_code": "", "confidence": "0.5"}) == 303


# -- 5. the smaller guards -------------------------------------------------------------------

def test_every_response_says_nosniff(client: TestClient) -> None:
    for path in ["/login", "/static/console.css", "/missing", "/metrics", "/"]:
        answer = client.get(path, follow_redirects=False)
        assert answer.headers["x-content-type-options"] == "nosniff", path
    sign_in(client)
    for path in ["/", "/job?id=missing", "/metrics"]:
        assert client.get(path).headers["x-content-type-options"] == "nosniff", path


def test_a_host_the_console_does_not_know_is_refused(store: HubStore) -> None:
    app = create_app(store, allowed_hosts=["hub.example.com"])
    with TestClient(app, base_url=BASE) as c:
        for host in ("127.0.0.1:8420", "localhost", "[::1]:8420", "hub.example.com",
                     "HUB.example.com:443"):
            assert c.get("/", headers={"host": host}).status_code == 200, host
        for host in ("evil.example", "hub.example.com.evil.example", "127.0.0.2", ""):
            refused = c.get("/", headers={"host": host})
            assert refused.status_code == 400 and "--allowed-host" in refused.text, host


def test_a_nul_in_an_id_is_not_found(client: TestClient) -> None:
    sign_in(client)
    for path in ["/job?id=a%00b", "/reflexion/entry?id=a%00b", "/messages?trace_id=a%00b",
                 "/live/job?id=a%00b"]:
        assert client.get(path).status_code in (404, 400), path
    assert client.get("/job?id=a%00b").status_code == 404


def test_failed_sign_ins_are_logged_and_slowed(client: TestClient,
                                               logs: pytest.LogCaptureFixture) -> None:
    logs.set_level(logging.WARNING)
    throttle = client.app.state.console.security.throttle  # type: ignore[attr-defined]
    throttle.first_wait_s = 0.5
    statuses = [client.post("/login", data={"csrf": csrf(client, "/login"),
                                            "token": f"wrong-guess-{i}"}).status_code
                for i in range(7)]
    assert statuses == [403] * 5 + [429] * 2
    refused = client.post("/login", data={"csrf": csrf(client, "/login"), "token": TOKEN},
                          follow_redirects=False)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert logs.text.count("wrong token refused") == 5 and "wrong-guess" not in logs.text
    assert "testclient" in logs.text  # the client's address
    time.sleep(0.6)
    sign_in(client)  # after the wait the right token is taken, and the count forgotten


def test_a_notice_is_one_of_the_consoles_own(client: TestClient, store: HubStore) -> None:
    sign_in(client)
    job = store.create_assign("lead", "w1", task="t")
    forged = client.get(f"/job?id={job.job_id}&notice=Send+your+token+to+evil.example").text
    assert "evil.example" not in forged and 'class="notice"' not in forged
    shown = client.get(f"/job?id={job.job_id}&notice=retry-scheduled").text
    assert '<p class="notice" role="status">retry scheduled</p>' in shown


def test_behind_a_trusted_proxy_the_forwarded_scheme_passes_the_origin_check(
        store: HubStore) -> None:
    job = store.create_assign("lead", "w1", task="t", status="failed", max_retries=2)
    app = ProxyHeadersMiddleware(create_app(store, token=TOKEN,  # type: ignore[arg-type]
                                            allowed_hosts=["hub.example.com"]),
                                 trusted_hosts="10.0.0.2")
    forwarded = {"X-Forwarded-Proto": "https", "Origin": "https://hub.example.com"}

    def act(client_ip: str) -> int:
        with TestClient(app, base_url="http://hub.example.com",  # type: ignore[arg-type]
                        client=(client_ip, 5000), headers=forwarded) as c:
            login = c.get("/login")
            cookies = _cookies(login)
            assert ("secure" in login.headers["set-cookie"].lower()) == (client_ip
                                                                         == "10.0.0.2")
            signed = c.post("/login", data={"csrf": _csrf_in(login.text), "token": TOKEN},
                            headers={"Cookie": cookies}, follow_redirects=False)
            if signed.status_code != 303:
                return int(signed.status_code)
            cookies += "; " + _cookies(signed)
            page = c.get(f"/job?id={job.job_id}", headers={"Cookie": cookies})
            return int(c.post("/job/retry", data={"id": job.job_id,
                                                  "csrf": _csrf_in(page.text)},
                              headers={"Cookie": cookies}, follow_redirects=False).status_code)

    assert act("10.0.0.9") == 403  # an untrusted proxy: its https is not believed
    assert act("10.0.0.2") == 303
    assert present(store.get_assign(job.job_id)).status == "queued"


def _cookies(response: Any) -> str:
    return "; ".join(c.split(";", 1)[0] for c in response.headers.get_list("set-cookie"))


def _csrf_in(page: str) -> str:
    return page.split('name="hubstore-csrf" content="', 1)[1].split('"', 1)[0]


def test_a_stream_ends_once_its_session_is_signed_out(client: TestClient, store: HubStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "STREAM_RECHECK_S", 0.0)
    monkeypatch.setattr(streams, "KEEPALIVE_S", 0.05)
    sign_in(client)
    cookie = f"hubstore_console={client.cookies.get('hubstore_console')}"
    app = create_app(store, token=TOKEN)
    bodies: list[bytes] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the browser stays
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message.get("body", b""))
            if len(bodies) == 3:  # the stream runs: sign out elsewhere
                with store.unit_of_work() as uow:
                    uow.connection.execute(text("DELETE FROM console_sessions"))

    scope = _scope("GET", "/events", {"host": "127.0.0.1", "cookie": cookie})

    async def run() -> None:
        await asyncio.wait_for(app(scope, receive, send), timeout=10)

    asyncio.run(run())  # returns: the stream ended (else a TimeoutError after 10 s)
    assert len(bodies) >= 3 and b"event: hub" in b"".join(bodies)


def test_a_failure_no_page_answers_says_nosniff_too(store: HubStore,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    astore = AsyncHubStore(store)
    monkeypatch.setattr(astore, "list_all_agents", broken)
    with TestClient(create_app(astore), base_url=BASE, raise_server_exceptions=False) as c:
        failed = c.get("/")
    assert failed.status_code == 500 and "boom" not in failed.text
    assert failed.headers["x-content-type-options"] == "nosniff"
