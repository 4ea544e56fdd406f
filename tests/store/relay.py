"""A TCP relay in front of the object store, to break transfers the way a network does.

``Relay(upstream_port)`` listens on 127.0.0.1 (port 0) and pipes every connection to the real
endpoint, keeping what clients sent (``requests``: the bytes of each connection, so a test can
look for a ``Range`` header). Two ways to break things:

- ``cut_once_after=N``: the first connection whose answers pass N bytes is closed at once,
  mid-body; later ones pass untouched (a transfer that breaks, then a retry that works);
- ``stop_after=N``: once N answer bytes have passed in all, the listener and every connection
  close and new connections are refused (the store went away mid-pull).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from types import TracebackType
from typing import Self


class Relay:
    def __init__(
        self,
        upstream_port: int,
        *,
        cut_once_after: int | None = None,
        stop_after: int | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.cut_once_after = cut_once_after
        self.stop_after = stop_after
        self.requests: list[bytearray] = []
        self.answered = 0
        self.cuts = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._accepter.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        self._accepter.join(timeout=5)
        for thread in self._threads:
            thread.join(timeout=5)

    def stop(self) -> None:
        """Close the listener and every connection; new ones are refused."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                if self._stopped.is_set():
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                sent = bytearray()
                self.requests.append(sent)
            thread = threading.Thread(target=self._pipe, args=(client, upstream, sent), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _pipe(self, client: socket.socket, upstream: socket.socket, sent: bytearray) -> None:
        answered_here = 0
        try:
            while not self._stopped.is_set():
                readable, _, _ = select.select([client, upstream], [], [], 0.5)
                for sock in readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    if sock is client:
                        sent += data
                        upstream.sendall(data)
                        continue
                    client.sendall(data)
                    answered_here += len(data)
                    if self._account(len(data), answered_here):
                        return
        except OSError:
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _account(self, count: int, answered_here: int) -> bool:
        """Count answer bytes; whether this connection must now be cut."""
        with self._lock:
            self.answered += count
            total = self.answered
            cut = (
                self.cut_once_after is not None
                and self.cuts == 0
                and answered_here > self.cut_once_after
            )
            if cut:
                self.cuts += 1
        if self.stop_after is not None and total > self.stop_after:
            self.stop()
            return True
        return cut
