"""The console in Chromium as an operator works in it all day (issue 38), on both
dialects: eight tabs of one browser load and navigate (one hub stream for all), a stalled
stream says "not live", the jobs list holds still under the pointer while jobs finish
every 100 ms, and no page breaks its content policy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hubstore import HubStore
from hubstore.web import create_app
from hubstore.web import stream as streams
from tests.console.browser import expect, serving
from tests.console.test_web_browser import (  # noqa: F401  (fixtures)
    browser,
    pytestmark,
    settled,
    sign_in,
)
from tests.console.web_helpers import TOKEN

TABS = 8


class Stalling:
    """The console behind a proxy that, once told, passes no more of the hub stream's
    bytes while keeping its connections open (as a stalled network or proxy does)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.stalled = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/events":
            await self.app(scope, receive, send)
            return

        async def maybe(message: Message) -> None:
            if self.stalled.is_set() and message["type"] == "http.response.body":
                return
            await send(message)

        await self.app(scope, receive, maybe)


@contextmanager
def context_of(browser: Any, url: str) -> Iterator[Any]:  # noqa: F811
    """A browser context signed in to the console at ``url`` (its sign-in tab stays
    open: one more tab on the shared stream)."""
    context = browser.new_context()
    context.set_default_timeout(15_000)
    try:
        sign_in(context.new_page(), url)
        yield context
    finally:
        context.close()


def test_eight_tabs_of_one_browser_load_and_navigate_on_one_stream(
        browser: Any, store: HubStore) -> None:  # noqa: F811
    job = store.create_assign("lead", "w1", task="t", status="running")
    app = create_app(store, token=TOKEN)
    paths = ["/", "/jobs", f"/job?id={job.job_id}", "/human-requests", "/dead-letters",
             "/reflexion", "/", "/jobs"]
    with serving(app) as url, context_of(browser, url) as context:
        pages = []
        for path in paths[:TABS]:
            page = context.new_page()
            page.goto(url + path)
            settled(page)
            pages.append(page)
        assert app.state.console.pulse.listeners == 1  # one stream for every tab
        for page in pages:  # each tab still navigates, and is live on its new page
            page.get_by_role("link", name="Dead letters").click()
            page.wait_for_url(f"{url}/dead-letters")
            settled(page)
            expect(page.locator("#live-state")).to_have_text("live")
        store.report_assign_result(job.job_id, "succeeded", result={"ok": 1})
        pages[2].goto(f"{url}/job?id={job.job_id}")
        expect(pages[2].locator("#job-status")).to_have_text("succeeded")


def test_a_stalled_stream_flips_the_badge(browser: Any, store: HubStore,  # noqa: F811
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "KEEPALIVE_S", 0.5)  # not live after 1.5 s unheard
    proxy = Stalling(create_app(store, token=TOKEN))
    with serving(proxy) as url, context_of(browser, url) as context:
        page = context.new_page()
        page.goto(f"{url}/")
        settled(page)
        badge = page.locator("#live-state")
        time.sleep(2)  # beats keep it live
        expect(badge).to_have_text("live")
        proxy.stalled.set()
        expect(badge).to_have_text("not live", timeout=6_000)
        assert page.evaluate("document.body.dataset.live") == "stalled"
        proxy.stalled.clear()  # the shared worker opens the stream again
        expect(badge).to_have_text("live", timeout=10_000)


def _finishing(store: HubStore, stop: threading.Event) -> Callable[[], None]:
    def run() -> None:
        while not stop.is_set():
            job = store.claim_next_assign("w1")
            if job is not None:
                store.finish_assign(job, "succeeded")
            time.sleep(0.1)
    return run


def test_the_jobs_list_holds_still_under_the_pointer(browser: Any,  # noqa: F811
                                                     store: HubStore) -> None:
    store.assign_many("lead", "w1", [{"task": f"job {i}"} for i in range(400)])
    stop = threading.Event()
    worker = threading.Thread(target=_finishing(store, stop), daemon=True)
    with serving(create_app(store, token=TOKEN)) as url, context_of(browser, url) as context:
        page = context.new_page()
        page.goto(f"{url}/jobs")
        settled(page)
        worker.start()
        try:
            for row in (5, 12, 20, 8, 15):
                x, y = page.evaluate("""(n) => {
                    const a = document.querySelectorAll('table.jobs tbody tr')[n]
                        .querySelector('a');
                    a.scrollIntoView({block: 'center'});
                    const r = a.getClientRects()[0];
                    return [r.x + r.width / 2, r.y + r.height / 2]; }""", row)
                page.mouse.move(x, y)
                aimed = page.evaluate("""([x, y]) => document.elementFromPoint(x, y)
                    .closest('tr').dataset.job""", [x, y])
                time.sleep(0.5)  # a person's aim: several jobs finish meanwhile
                page.mouse.click(x, y)
                page.wait_for_url("**/job?id=*")
                assert page.url.split("id=", 1)[1] == aimed
                page.go_back()
                page.wait_for_url(f"{url}/jobs")
                settled(page)
            # left alone, the list catches up with what it held back
            part = page.locator(".live-part")
            page.mouse.move(x, y)
            page.wait_for_function("() => document.querySelector('.live-part')"
                                   ".dataset.waiting === '1'")
            assert page.locator(".held-note").is_visible()
            before = int(part.get_attribute("data-refreshed") or 0)
            page.mouse.move(1, 1)
            page.wait_for_function(f"""() => Number(document.querySelector('.live-part')
                .dataset.refreshed) > {before}""")
            assert not page.locator(".held-note").is_visible()
        finally:
            stop.set()
            worker.join(10)


CSP_SPY = """window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(
    e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber));"""


def test_no_page_breaks_its_content_policy(browser: Any, store: HubStore) -> None:  # noqa: F811
    job = store.create_assign("lead", "w1", task="t", status="failed")
    entry = store.add_reflexion("p", "m", "s")
    store.move_to_dead_letter(store.audit_log("event", "lead", "w1", "t").id, "boom")
    store.insert_human_request("a", "choice", "which?", requested_schema={"enum": ["A"]})
    paths = ["/", "/jobs", f"/job?id={job.job_id}", "/human-requests", "/dead-letters",
             "/reflexion", f"/reflexion/entry?id={entry.id}", "/messages",
             "/messages?agent=w1", f"/messages?trace_id={job.trace_id}", "/login"]
    with serving(create_app(store, token=TOKEN)) as url, context_of(browser, url) as context:
        context.add_init_script(CSP_SPY)
        page = context.new_page()
        for path in paths:
            page.goto(url + path)
            settled(page)
            page.wait_for_timeout(200)
            assert page.evaluate("window.__csp") == [], path


def test_destructive_actions_ask_first(browser: Any, store: HubStore) -> None:  # noqa: F811
    queued = store.create_assign("lead", "w1", task="t")
    request = store.insert_human_request("a", "approval", "ship?")
    with serving(create_app(store, token=TOKEN)) as url, context_of(browser, url) as context:
        page = context.new_page()
        asked: list[str] = []

        def answer(accept: bool) -> Callable[[Any], None]:
            def on(dialog: Any) -> None:
                asked.append(dialog.message)
                dialog.accept() if accept else dialog.dismiss()
            return on

        page.goto(f"{url}/job?id={queued.job_id}")
        settled(page)
        page.once("dialog", answer(False))
        page.get_by_role("button", name="Cancel").click()
        page.wait_for_timeout(300)
        assert asked == ["Cancel this job?"]
        assert store.get_assign(queued.job_id).status == "queued"  # type: ignore[union-attr]
        page.once("dialog", answer(True))
        page.get_by_role("button", name="Cancel").click()
        page.wait_for_selector("text=cancelled")
        page.goto(f"{url}/human-requests")
        page.once("dialog", answer(False))
        page.get_by_role("button", name="Decline").click()
        page.wait_for_timeout(300)
        assert len(asked) == 3 and "Decline" in asked[2]
        assert store.get_human_request(request.request_id).state == "pending"  # type: ignore[union-attr]


def test_table_columns_keep_their_words_whole(browser: Any,  # noqa: F811
                                              store: HubStore) -> None:
    for i in range(5):
        store.create_assign("supervisor-with-a-long-name", f"worker-{i}",
                            task="approval from lead " * 12, status="failed")
    with serving(create_app(store, token=TOKEN)) as url, context_of(browser, url) as context:
        page = context.new_page()
        page.set_viewport_size({"width": 700, "height": 900})
        page.goto(f"{url}/jobs")
        settled(page)
        cells = page.evaluate("""() => Array.from(document.querySelectorAll('th, td'))
            .map(c => [c.tagName, c.innerText.trim(), c.clientWidth, c.scrollWidth,
                       getComputedStyle(c).overflowWrap])""")
        for tag, text, width, wanted, wrap in cells:
            assert wrap != "anywhere", text
            assert wanted <= width + 1, (tag, text, width, wanted)  # nothing cut or spilled
            assert width >= 40, (tag, text, width)  # no column squeezed to a letter
        # each word of a cell stays on one line: its height is whole lines of whole words
        words = page.evaluate("""() => { const td = document.querySelector('td.task');
            const range = document.createRange(); const text = td.firstChild;
            const out = []; let at = 0;
            for (const word of text.textContent.split(' ')) {
                if (word) { range.setStart(text, at); range.setEnd(text, at + word.length);
                            out.push([word, range.getClientRects().length]); }
                at += word.length + 1; }
            return out; }""")
        assert words and all(lines == 1 for _, lines in words), words


def test_saving_a_reflexion_entry_unchanged_in_the_browser_changes_nothing(
        browser: Any, store: HubStore) -> None:  # noqa: F811
    pattern = "\nTraceback (most recent call last):\n  File <x>\nKeyError: 'a'"
    entry = store.add_reflexion(pattern, "KeyError: 'a'\r\nat line 3", "\nuse .get()\n",
                                solution_code="d.get('a')\r\n")
    before = store.get_reflexion(entry.id).to_dict()  # type: ignore[union-attr]
    with serving(create_app(store, token=TOKEN)) as url, context_of(browser, url) as context:
        page = context.new_page()
        page.goto(f"{url}/reflexion/entry?id={entry.id}")
        page.get_by_role("button", name="Save").click()
        page.wait_for_selector("text=saved")
    assert store.get_reflexion(entry.id).to_dict() == before  # type: ignore[union-attr]
    assert [e.id for e in store.find_reflexion_exact(pattern)] == [entry.id]


def test_a_sign_in_beside_a_signed_out_tab_goes_live(browser: Any,  # noqa: F811
                                                     store: HubStore) -> None:
    """A tab on the sign-in page shares the stream that the server refused (401, which an
    EventSource never retries); the tab that signs in opens it again."""
    with serving(create_app(store, token=TOKEN)) as url:
        context = browser.new_context()
        context.set_default_timeout(15_000)
        try:
            waiting = context.new_page()
            waiting.goto(f"{url}/login")
            waiting.wait_for_selector("body[data-live=error]")
            sign_in(context.new_page(), url)
            settled(context.pages[1])
        finally:
            context.close()
