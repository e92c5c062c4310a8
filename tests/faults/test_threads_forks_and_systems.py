"""The store across threads, processes and operating systems: finished threads and
close() give their descriptors back, a store used before fork() works in the child and
in the parent, and hubstore works without fcntl (as on Windows), which the package's
classifiers say it supports.
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import URL

from hubstore import HubStore

# --- descriptors ------------------------------------------------------------------


def _open_fds() -> int:
    import gc
    import os

    gc.collect()
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="needs /proc")
def test_finished_threads_and_close_release_their_descriptors(db_url: URL) -> None:
    import threading

    baseline = _open_fds()
    store = HubStore.open(db_url)
    store.register_agent("main", "codex")
    warm = _open_fds()
    errors: list[BaseException] = []

    def write_once(i: int) -> None:
        try:
            store.register_agent(f"t{i}", "codex")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write_once, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.list_all_agents()) == 201
    assert _open_fds() - warm <= 10
    store.close()
    assert _open_fds() <= baseline + 2


# --- fork -------------------------------------------------------------------------


def test_a_store_used_before_fork_works_in_the_child_and_the_parent(store: HubStore) -> None:
    import os

    store.register_agent("parent", "codex")
    with store.unit_of_work(write=False) as uow:  # the parent's read connection, too
        assert uow.get_agent("parent") is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            store.register_agent("child", "codex")
            __import__("gc").collect()  # the parent's dropped connections, collected here
            with store.unit_of_work() as uow:
                uow.audit_log("event", "child", "parent", "t")
            seen = sorted(a.agent_id for a in store.list_all_agents())
            os.write(write, repr(seen).encode())
            code = 0
        except BaseException as exc:
            os.write(write, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, reported
    assert reported == "['child', 'parent']"
    store.register_agent("parent-after", "codex")  # the parent's connections still work
    assert sorted(a.agent_id for a in store.list_all_agents()) == [
        "child", "parent", "parent-after"]
    assert store.get_hub_stats()["total_messages"] == 1


# --- no fcntl, and the systems the package names ----------------------------------


_NO_FCNTL = """
import sys, time
sys.modules["fcntl"] = None  # as on Windows: `import fcntl` raises ImportError
import hubstore
from hubstore import HubStore, sqlite_setup
from hubstore.errors import DatabaseBusy
assert sqlite_setup.fcntl is None
with HubStore.open(sys.argv[1], busy_timeout_ms=300) as store:
    store.register_agent("nofcntl", "codex")
    store.audit_log("event", "nofcntl", "x", "t", payload={"k": 1})
    agent = store.get_agent("nofcntl")
    print("read", agent.cli, store.get_hub_stats()["total_messages"])
    if store.dialect == "sqlite":  # SQLite's own lock still bounds the wait
        with HubStore.open(sys.argv[1], busy_timeout_ms=300) as second, store.unit_of_work():
            store.register_agent("holder", "codex")
            began = time.monotonic()
            try:
                second.register_agent("blocked", "codex")
            except DatabaseBusy:
                print("busy", round(time.monotonic() - began, 1) < 2.5)
print("ok", hubstore.__version__ is not None)
"""


def test_hubstore_works_without_fcntl(store: HubStore) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NO_FCNTL,
                           store.url.render_as_string(hide_password=False)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "read codex 1"
    if store.dialect == "sqlite":
        assert "busy True" in lines
    assert "ok True" in lines
    assert sorted(a.agent_id for a in store.list_all_agents()) == (
        ["holder", "nofcntl"] if store.dialect == "sqlite" else ["nofcntl"])


def test_the_package_says_which_systems_it_supports() -> None:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    classifiers = tomllib.loads(pyproject.read_text())["project"]["classifiers"]
    systems = {c for c in classifiers if c.startswith("Operating System ::")}
    assert {"Operating System :: POSIX", "Operating System :: Microsoft :: Windows"} <= systems
