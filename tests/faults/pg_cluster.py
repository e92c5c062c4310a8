"""PostgreSQL servers of a test's own: a primary and a streaming standby, made with the
server's own binaries in a temporary folder, on free local ports.

PostgreSQL refuses to run as root: when the tests run as root, every server command runs
as the ``postgres`` user (``runuser``). Used by tests/faults/test_failover.py and
benchmarks/bench_failover.py.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import URL, make_url

#: Where the server's binaries are (Debian's layout); $HUBSTORE_PG_BIN wins.
BIN = Path(os.environ.get("HUBSTORE_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: The role and database every server here is made with.
USER = "postgres"
DATABASE = "hub"


def missing() -> str | None:
    """Why servers cannot be made here (None: they can)."""
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres", "psql"):
        if not os.access(BIN / tool, os.X_OK):
            return f"the PostgreSQL server binaries are not in {BIN} (no {tool})"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            return f"running as root, and there is no {USER} user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root, and runuser is missing"
    return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, a child dead but not reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", USER, "--", *command] if os.geteuid() == 0 else command


def _run(*command: str, timeout: float = 60) -> str:
    done = subprocess.run(_as_server_user(list(command)), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


class Server:
    """One running server: a data folder and a port."""

    def __init__(self, folder: Path, name: str, port: int) -> None:
        self.data = folder / name
        self.port = port
        self.log = folder / f"{name}.log"
        self.sockets = folder  # (its Unix socket, out of the system's folder)

    def url(self, database: str = DATABASE) -> URL:
        return make_url(f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}")

    def start(self, *settings: str) -> None:
        """Start it with ``-c`` settings given on the command line (kept out of the data
        folder, so that a standby copied from it does not inherit them)."""
        options = " ".join(f"-c {s}" for s in (
            f"port={self.port}", "listen_addresses=127.0.0.1",
            f"unix_socket_directories={self.sockets}", *settings))
        _run(str(BIN / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(self.data),
             "-l", str(self.log), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop (``immediate``: killed, as by a crash)."""
        _run(str(BIN / "pg_ctl"), "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    def kill(self) -> None:
        """SIGKILL to the postmaster and every process it started (also to stopped ones),
        waiting until the postmaster is gone: a crash without a word to anyone."""
        root = self.postmaster()
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(root) and time.monotonic() < deadline:
            time.sleep(0.01)
        (self.data / "postmaster.pid").unlink(missing_ok=True)

    def promote(self) -> None:
        _run(str(BIN / "pg_ctl"), "promote", "-w", "-t", "60", "-D", str(self.data))

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def postmaster(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def processes(self) -> list[int]:
        """The postmaster and every process it started."""
        root = self.postmaster()
        found = [root]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = (entry / "stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == root:
                        found.append(int(entry.name))
        return found

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The whole server stopped (SIGSTOP to the postmaster and its children), as a
        server whose machine hangs while its kernel still answers TCP; resumed on exit."""
        pids = self.processes()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def sql(self, statement: str, database: str = "postgres") -> str:
        """``statement``'s rows through psql, one a line."""
        return _run(str(BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                    "-Atc", statement, database)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


class Cluster:
    """A primary, and standbys streaming from it, in a temporary folder of their own
    (removed by :meth:`close`, which stops every server left running)."""

    #: Settings that make a throwaway server quick (no fsync: only a crash of this
    #: machine, not of the server, could lose what it wrote).
    QUICK = ("fsync=off", "full_page_writes=off", "shared_buffers=16MB",
             "max_connections=60", "wal_level=replica", "max_wal_senders=5",
             "wal_sender_timeout=5s", "wal_receiver_status_interval=1s", "hot_standby=on")

    def __init__(self) -> None:
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        shm = Path("/dev/shm")
        self.folder = Path(tempfile.mkdtemp(prefix="hubstore-cluster-",
                                            dir=shm if shm.is_dir() else None))
        if os.geteuid() == 0:
            entry = pwd.getpwnam(USER)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        self.servers: list[Server] = []

    def primary(self) -> Server:
        """A new primary with the database ``hub``."""
        server = Server(self.folder, "primary", free_port())
        _run(str(BIN / "initdb"), "-D", str(server.data), "-A", "trust", "-U", USER, "-N",
             "-E", "UTF8", "--locale=C")
        server.start(*self.QUICK)
        self.servers.append(server)
        server.sql(f"CREATE DATABASE {DATABASE}")
        return server

    def standby(self, primary: Server, name: str = "standby", *,
                synchronous: bool = False) -> Server:
        """A streaming standby of ``primary`` (pg_basebackup -R), started, and streaming
        once this returns. ``synchronous``: from then on each commit on the primary
        waits until the standby has flushed it (``synchronous_standby_names = '*'``, set
        on the primary after the copy, so that the standby, once promoted, does not wait
        for a standby of its own)."""
        server = Server(self.folder, name, free_port())
        _run(str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port),
             "-U", USER, "-D", str(server.data), "-X", "stream", "-R", "-c", "fast",
             "--no-sync")
        server.start(*self.QUICK)
        self.servers.append(server)
        if synchronous:
            primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.sql("SELECT pg_reload_conf()")
        wanted = "streaming|sync" if synchronous else "streaming|"
        deadline = time.monotonic() + 30
        while not primary.sql("SELECT state || '|' || CASE sync_state WHEN 'sync' THEN "
                              "'sync' ELSE '' END FROM pg_stat_replication"
                              ).strip().startswith(wanted):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby does not stream: {server.log_tail()}")
            time.sleep(0.05)
        return server

    def close(self) -> None:
        for server in self.servers:
            if server.running():
                with contextlib.suppress(Exception):
                    with contextlib.suppress(ProcessLookupError):
                        for pid in server.processes():
                            os.kill(pid, signal.SIGCONT)
                    server.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def multi_host_url(*servers: Server, database: str = DATABASE, **query: str) -> URL:
    """One URL for several servers, as libpq tries them: only a primary takes it
    (``target_session_attrs=read-write``)."""
    hosts = "&".join(f"host=127.0.0.1:{s.port}" for s in servers)
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    return make_url(f"postgresql+psycopg://{USER}@/{database}?{hosts}"
                    f"&target_session_attrs=read-write{extra}")
