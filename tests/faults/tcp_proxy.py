"""A TCP proxy in front of a PostgreSQL server, for the faults a network makes.

Each client connection is pumped to the server by two threads (one per direction).
:meth:`Proxy.freeze` stops both pumps without closing anything: the proxy's kernel
still ACKs what the client sends, as a frozen server's kernel does, and no answer comes
back. :meth:`Proxy.lose_answer_after` lets one client message containing a pattern
through, then, once the server has answered it (so it has done it, COMMIT included),
drops that answer and closes the client's connection: a commit whose answer is lost.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class Proxy:
    """Forwards 127.0.0.1:``port`` to ``target``; see the module's docstring."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._pattern: bytes | None = None
        self._freeze_at: bytes | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        #: How many answers lose_answer_after dropped.
        self.answers_lost = 0
        self._closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def freeze(self) -> None:
        """Stop forwarding in both directions (connections stay open)."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Forward again."""
        self._flowing.set()

    def lose_answer_after(self, pattern: bytes) -> None:
        """Arm: the next client message holding ``pattern`` reaches the server; its
        answer does not reach the client, whose connection is closed instead."""
        with self._lock:
            self._pattern = pattern

    def freeze_after(self, pattern: bytes) -> None:
        """Arm: the next client message holding ``pattern`` reaches the server, and then
        the proxy freezes (as :meth:`freeze`): its answer never comes back."""
        with self._lock:
            self._freeze_at = pattern

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _shut(client)
                continue
            server.settimeout(None)
            self._serve(client, server)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
        """Pump one client connection both ways."""
        with self._lock:
            self._sockets += [client, server]
        armed = [False]
        threading.Thread(target=self._pump, daemon=True, name="proxy-up", args=(
            client, server, lambda data: self._upstream(data, armed))).start()
        threading.Thread(target=self._pump, daemon=True, name="proxy-down", args=(
            server, client, lambda data: self._downstream(armed, client, server))).start()

    def _upstream(self, data: bytes, armed: list[bool]) -> bool:
        with self._lock:
            if self._pattern is not None and self._pattern in data:
                self._pattern = None
                armed[0] = True
            if self._freeze_at is not None and self._freeze_at in data:
                self._freeze_at = None
                self._flowing.clear()
        return True

    def _downstream(self, armed: list[bool], client: socket.socket,
                    server: socket.socket) -> bool:
        if not armed[0]:
            return True
        self.answers_lost += 1
        _shut(client)
        _shut(server)
        return False

    def _pump(self, source: socket.socket, sink: socket.socket,
              check: Callable[[bytes], bool]) -> None:
        try:
            while True:
                self._flowing.wait()
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if not check(data):
                    return
                sink.sendall(data)
        except OSError:
            pass
        _shut(sink)
        _shut(source)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
