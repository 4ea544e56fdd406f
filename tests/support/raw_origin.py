"""An origin that sends exactly the bytes a test gives it: hostile answers, odd headers.

Plain HTTP/1.1 on a loopback address (IPv4 or IPv6), one thread per connection, one answer
per request, then the connection closes. ``answers`` maps a request path to the whole raw
answer (status line, headers, body) or to a function of the request's head.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Self

Answer = bytes | Callable[[bytes], bytes]


def answer(status: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> bytes:
    """A raw answer with ``content-length`` added."""
    lines = [f"HTTP/1.1 {status}".encode(), *(name + b": " + value for name, value in headers)]
    lines.append(b"content-length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class RawOrigin:
    def __init__(self, answers: Mapping[str, Answer], *, host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.bind((host, 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self.base = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        self.answers = answers
        self.heads: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(sock,), daemon=True).start()

    def _one(self, sock: socket.socket) -> None:
        with sock:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0]
            self.heads.append(head)
            path = head.split(b" ", 2)[1].decode("latin-1")
            found = self.answers.get(path, answer("404 Not Found", [], b"no\n"))
            with contextlib.suppress(OSError):
                sock.sendall(found(head) if callable(found) else found)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        self._listener.close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
