"""What the replay server's tests share: a lock and store to serve, the server on a loop in a
thread (configured through its constructor), and a raw client that speaks to it byte by byte.

:class:`ServerThread` runs :class:`~fetchproxy.replay.server.ReplayServer` itself rather than
through ``open_run``, so that a test can set its limits and step its idle sweep by hand
(:meth:`ServerThread.call`) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from fetchproxy.ca import generate_ca, load_ca
from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.keys.gitbody import canonical_body
from fetchproxy.keys.rules import KeyRules
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.replay.book import ReplayBook
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.replayer import Replayer
from fetchproxy.replay.server import ReplayServer
from fetchproxy.store import DiskStore
from tests.support.locks import make_fetch

T = TypeVar("T")

SMALL = b"small file\n" * 10
LARGE = bytes(range(256)) * 4096  # 1 MiB: streamed from the store
UPLOAD = b"0032want " + b"a" * 40 + b"\n00000009done\n"
ANSWER = b"the answer to the upload\n"
HOST = "files.example"
LONG_HOST = "my-bucket-name-with-a-long-name.s3.dualstack.eu-central-1.amazonaws.com"
MEDIUM = bytes(range(256)) * 800  # 200 KiB: answered from memory
HUGE = bytes(range(256)) * 10240  # 2.5 MiB: streamed in more than one chunk
ENORMOUS = bytes(range(256)) * (64 * 4096)  # 64 MiB: far more than any socket buffer
WAIT = 10.0
"""Seconds a test waits for a state it expects to reach at once."""


def entry(url: str, body: bytes, digest: Digest, *, method: str = "GET", **fields: Any) -> Fetch:
    return make_fetch(method=method, url=url, status=200, digest=digest, size=len(body), **fields)


@dataclass(frozen=True)
class Files:
    """A lock, its store, a CA and an event log, as a replay run has them."""

    lock: Path
    store: DiskStore
    confdir: Path
    ca_cert: Path
    log: Path


def make_files(tmp_path: Path, *, enormous: bool = False) -> Files:
    """The lock every server test serves (with a 64 MiB body too when ``enormous``)."""
    store = DiskStore(tmp_path / "store")
    small, large, answer = store.put(SMALL), store.put(LARGE), store.put(ANSWER)
    medium, huge = store.put(MEDIUM), store.put(HUGE)
    upload_key = digest_bytes(canonical_body("/repo/git-upload-pack", None, UPLOAD))
    fetches = [
        entry(f"https://{HOST}:8443/small", SMALL, small, content_type="text/plain"),
        entry(f"https://{HOST}:8443/large", LARGE, large),
        entry(f"http://{HOST}/plain", SMALL, small),
        entry(f"http://{HOST}:8080/tunnelled", SMALL, small),
        entry(f"https://{HOST}:8443/medium", MEDIUM, medium),
        entry(f"https://{HOST}:8443/huge", HUGE, huge),
        entry(f"https://{LONG_HOST}/small", SMALL, small),
        entry(f"https://{HOST}:8443/wrong-size", b"12345", small),  # a lock edited by hand
        entry(
            f"https://{HOST}:8443/repo/git-upload-pack",
            ANSWER,
            answer,
            method="POST",
            body_digest=upload_key,
        ),
    ]
    if enormous:
        digest = store.put(ENORMOUS)
        fetches.append(entry(f"http://{HOST}/enormous", ENORMOUS, digest))
        fetches.append(entry(f"https://{HOST}:8443/enormous", ENORMOUS, digest))
    write_lock(tmp_path / "fetchproxy.lock.toml", Lock.from_fetches(fetches))
    confdir = tmp_path / "confdir"
    ca_cert = generate_ca("test CA").write(confdir)
    lock, log = tmp_path / "fetchproxy.lock.toml", tmp_path / "events.jsonl"
    return Files(lock, store, confdir, ca_cert, log)


@dataclass
class ServerThread:
    """A :class:`ReplayServer` over ``files`` on its own event loop in a thread."""

    files: Files
    options: dict[str, Any] = field(default_factory=dict)
    clients: list[Client] = field(default_factory=list)
    server: ReplayServer = field(init=False)
    replayer: Replayer = field(init=False)
    port: int = 0
    _loop: asyncio.AbstractEventLoop = field(init=False)
    _thread: threading.Thread = field(init=False)

    @property
    def ca_cert(self) -> Path:
        return self.files.ca_cert

    def start(self) -> ServerThread:
        files = self.files
        book = ReplayBook.open(files.lock, files.store, files.log)
        self.replayer = Replayer(book, VerifiedBlobs(files.store), KeyRules())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        contexts = HostContexts(load_ca(files.confdir))
        self.options.setdefault("sweep_timer", False)  # the tests sweep by hand

        async def start() -> int:
            self.server = ReplayServer(self.replayer, contexts, **self.options)
            return (await self.server.start())[0][1]

        self.port = self.call_async(start)
        return self

    def call(self, action: Callable[[], T]) -> T:
        """``action()`` on the server's loop (where its state lives), and what it returned."""

        async def run() -> T:
            return action()

        return self.call_async(run)

    def call_async(self, action: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``await action()`` on the server's loop, and what it returned."""
        return asyncio.run_coroutine_threadsafe(action(), self._loop).result(WAIT)

    def sweep(self, times: int = 1) -> None:
        """Run the idle sweep ``times`` times, as its timer would."""
        for _ in range(times):
            self.call(self.server.sweep)

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        """Until ``condition()``, checked on the server's loop, holds (fails after WAIT s)."""
        deadline = time.monotonic() + WAIT
        while not self.call(condition):
            assert time.monotonic() < deadline, f"never: {what}"
            time.sleep(0.005)

    def stop_serving(self) -> None:
        """Stop the server (its books stay readable); safe to call more than once."""
        self.call_async(self.server.stop)

    def stop(self) -> None:
        for client in self.clients:
            client.sock.close()
        self.stop_serving()
        self.replayer.book.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT)
        self._loop.close()


class Endpoint(Protocol):
    """What a :class:`Client` connects to: a port, the CA to trust, and where it keeps its
    clients (to close them at the end)."""

    @property
    def port(self) -> int: ...

    @property
    def ca_cert(self) -> Path: ...

    @property
    def clients(self) -> list[Client]: ...


class Client:
    """One raw connection to the proxy; ``tunnel()`` CONNECTs and (by default) starts TLS."""

    def __init__(self, served: Endpoint, *, receive_buffer: int | None = None) -> None:
        self.served = served
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(WAIT)
        sock.connect(("127.0.0.1", served.port))
        self.sock: socket.socket | ssl.SSLSocket = sock
        self.pending = b""
        served.clients.append(self)

    def tunnel(
        self, authority: str = f"{HOST}:8443", *, tls: bool = True, sni: str | None = HOST
    ) -> None:
        self.send(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        assert self.head() == "HTTP/1.1 200 Connection established"
        if tls:
            context = ssl.create_default_context(cafile=self.served.ca_cert)
            context.check_hostname = sni is not None
            self.sock = context.wrap_socket(self.sock, server_hostname=sni)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.pending += data
        return bool(data)

    def head(self) -> str:
        while b"\r\n\r\n" not in self.pending:
            assert self._fill(), f"closed before a whole head: {self.pending!r}"
        head, self.pending = self.pending.split(b"\r\n\r\n", 1)
        return head.decode()

    def answer(self, *, body: bool = True) -> tuple[str, dict[str, str], bytes]:
        lines = self.head().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers.get("content-length", "0")) if body else 0
        while len(self.pending) < length:
            assert self._fill(), "closed before the whole body"
        data, self.pending = self.pending[:length], self.pending[length:]
        return lines[0], headers, data

    def closed(self) -> bool:
        try:
            return not self._fill() and not self.pending
        except (ConnectionResetError, ssl.SSLError):
            return True


def get(target: str, *headers: str, method: str = "GET", host: str = f"{HOST}:8443") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
