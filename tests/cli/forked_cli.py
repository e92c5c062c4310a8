"""``python -m hubstore ARGS`` in a fresh process per command, without paying Python's
start and hubstore's imports each time: a process that has imported the command line
(and nothing else: no connection, no thread) forks a child per command. The child is a
new process as a user's would be (its own environment, working folder, standard
streams from files, exit status), its module state the freshly imported one.

The real entry points (the ``hubstore`` script, ``python -m hubstore``) are run as
plain subprocesses by tests/cli/test_cli_commands.py's entry-point tests.

Run as a script, this is the forking process: one JSON request a line on stdin
(argv, env, cwd, the files for the child's stdin, stdout and stderr), one JSON answer
a line on stdout (the child's exit status).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import selectors
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import IO, Any

#: How long one command may run before the forking process is killed (as
#: subprocess.run's timeout would).
TIMEOUT_S = 300


def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: the command, as ``python -m hubstore`` runs it."""
    code = 1
    try:
        for fd, path, flags in ((0, request["stdin"], os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY),
                                (2, request["stderr"], os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        if request["cwd"] is not None:
            os.chdir(request["cwd"])
        sys.argv = ["hubstore", *request["argv"]]
        try:
            runpy.run_module("hubstore", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:  # as the interpreter does with a message
                print(exit_.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve() -> None:
    """The forking process: import the command line, then fork a child per request."""
    # What the commands import (not hubstore.cli.__main__: importing it runs the
    # command line). Imports only: no connection is made and no thread started here.
    import importlib

    for module in ("hubstore.cli", "hubstore.cli.db", "hubstore.cli.inspect",
                   "hubstore.cli.jobs", "hubstore.cli.quotas", "hubstore.cli.output",
                   "hubstore.store", "hubstore.migrations", "hubstore.health",
                   "alembic.command", "psycopg"):
        importlib.import_module(module)

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(request)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


class ForkedCli:
    """The test side: starts the forking process on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._folder = Path(tempfile.mkdtemp(prefix="hubstore-cli-"))

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True, start_new_session=True)
        return self._proc

    def run(self, argv: list[str], env: dict[str, str], stdin: str = "",
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``python -m hubstore *argv`` in a forked child; output captured, as
        ``subprocess.run(..., capture_output=True, text=True)`` gives it."""
        paths = {name: self._folder / name for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_text(stdin, encoding="utf-8")
        for name in ("stdout", "stderr"):
            paths[name].write_bytes(b"")
        proc = self._started()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({
            "argv": argv, "env": env, "cwd": None if cwd is None else str(cwd),
            **{name: str(path) for name, path in paths.items()}}) + "\n")
        proc.stdin.flush()
        answer = _read_line(proc.stdout, TIMEOUT_S)
        if answer is None:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise subprocess.TimeoutExpired(["hubstore", *argv], TIMEOUT_S)
        return subprocess.CompletedProcess(
            ["hubstore", *argv], json.loads(answer)["returncode"],
            paths["stdout"].read_text(encoding="utf-8"),
            paths["stderr"].read_text(encoding="utf-8"))

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=10)


def _read_line(stream: IO[str], timeout_s: float) -> str | None:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            return None
    return stream.readline() or None


if __name__ == "__main__":
    serve()
