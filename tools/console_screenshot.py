"""Take the console's screenshots for README.md and docs/console.md.

Fills a demo hub in a temporary SQLite file, serves the console on a loopback port and
photographs a page with Debian's chromium through Playwright: the overview, or the jobs
page of a busy hub (5,000 jobs, three workers finishing one every 50 ms while the page
is live)::

    python tools/console_screenshot.py docs/images/console-overview.png
    python tools/console_screenshot.py docs/images/console-jobs.png jobs
"""

from __future__ import annotations

import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from hubstore import HubStore
from hubstore.ids import now_ms
from hubstore.types import AgentCli
from hubstore.web import create_app

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def demo(store: HubStore) -> None:
    clis: list[AgentCli] = ["codex", "claude", "gemini"]
    for i, cli in enumerate(clis):
        store.register_agent(f"worker-{i + 1}", cli, topics=["build", "review"])
    store.register_agent("lead", "claude", heartbeat_ttl_ms=1)
    for i in range(14):
        job = store.create_assign("lead", f"worker-{i % 3 + 1}", task=f"step {i}")
        if i % 4 == 0:
            store.update_assign_status(job.job_id, "running")
        elif i % 4 == 1:
            store.update_assign_status(job.job_id, "succeeded")
        elif i % 7 == 2:
            store.update_assign_status(job.job_id, "failed")
    store.set_assign_limit("codex", max_running=2)
    store.set_assign_limit("gemini", max_starts=60, per_ms=60_000)
    for i in range(3):
        store.assign_async("lead", "worker-1", task=f"codex step {i}", limit_key="codex")
    message = store.audit_log("request", "lead", "worker-2", "build", payload={"n": 1})
    store.move_to_dead_letter(message.id, "worker gone")
    store.insert_human_request("worker-1", "approval", "Deploy to production?")


def busy(store: HubStore) -> None:
    """A hub at work: 5,000 jobs over three workers, some held by limits and schedules."""
    for n in range(5):
        store.assign_many("lead", f"worker-{n % 3 + 1}", [
            {"task": f"review change {n * 1000 + i}: check the tests and the docs",
             "limit_key": "codex" if i % 7 == 0 else None,
             "not_before_ms": (now_ms() + 3_600_000) if i % 11 == 0 else None}
            for i in range(1000)])
    for i in range(300):
        job = store.claim_next_assign(f"worker-{i % 3 + 1}")
        if job is not None and i % 5:
            store.finish_assign(job, "failed" if i % 13 == 0 else "succeeded")


def finishing(store: HubStore, stop: threading.Event) -> None:
    """Three workers finishing a job every 50 ms, until ``stop``."""
    i = 0
    while not stop.is_set():
        job = store.claim_next_assign(f"worker-{i % 3 + 1}")
        if job is not None:
            store.finish_assign(job, "succeeded")
        i += 1
        time.sleep(0.05)


def main(target: Path, page_name: str = "overview") -> None:
    path = {"overview": "/", "jobs": "/jobs"}[page_name]
    with tempfile.TemporaryDirectory() as folder, \
            HubStore.open(f"sqlite:///{folder}/hub.db", auto_migrate=True) as store:
        demo(store)
        stop = threading.Event()
        worker = threading.Thread(target=finishing, args=(store, stop), daemon=True)
        if page_name == "jobs":
            busy(store)
            worker.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(store, token="demo-token-1"),
                                               host="127.0.0.1", port=port,
                                               log_level="warning",
                                               timeout_graceful_shutdown=1))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"http://127.0.0.1:{port}{path}")
            page.wait_for_selector("body[data-live=open]")
            page.wait_for_function("""() => Array.from(document.querySelectorAll(
                '.live-part')).every(part => part.dataset.refreshed)""")
            page.screenshot(path=str(target), full_page=page_name == "overview")
            browser.close()
        stop.set()
        server.should_exit = True
        thread.join(10)
        if worker.is_alive():
            worker.join(10)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
