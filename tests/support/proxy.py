"""An in-process proxy for tests, and what a test needs around it.

The proxy runs as the product's engine on its own event loop in a thread
(:class:`ProxyThread`); mitmproxy keeps global state, so one runs at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fetchproxy.record.book import RecordBook
from fetchproxy.replay.book import ReplayBook
from fetchproxy.run.engines import ProxyRun, open_run
from fetchproxy.run.outcome import finish
from fetchproxy.run.settings import ProxySettings
from tests.support.clients import Fetched, curl, urlfetch, urllib_opener
from tests.support.origin import Origin


@dataclass(frozen=True)
class Paths:
    """Where one test keeps fetchproxy's CA, lock, log and store."""

    confdir: Path
    ca_cert: Path
    lock: Path
    log: Path
    store: Path


@dataclass
class ProxyThread:
    """A :class:`ProxyRun` on its own event loop in a thread; :meth:`stop` returns its status."""

    settings: ProxySettings
    run: ProxyRun = field(init=False)
    url: str = ""
    status: int | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _failure: BaseException | None = None
    _thread: threading.Thread | None = None

    @property
    def client_protocol(self) -> str:
        """What a client that prefers HTTP/2 gets from this proxy (the direct replay server
        offers only HTTP/1.1)."""
        settings = self.settings
        return "HTTP/2" if settings.http2 and not settings.direct else "HTTP/1.1"

    @property
    def record(self) -> RecordBook:
        record = self.run.record
        assert record is not None
        return record

    @property
    def replay(self) -> ReplayBook:
        book = self.run.book
        assert book is not None
        return book

    def start(self) -> ProxyThread:
        self._thread = threading.Thread(target=self._main, name="fetchproxy", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        assert self.url, "the proxy did not start within 30 s"
        return self

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 -- handed to the test thread
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.run = open_run(self.settings)
        host, port = (await self.run.start())[0]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.run.stop()
        self.status = finish(self.run)

    def stop(self) -> int:
        """Close the listeners, shut down, write the lock (record); the exit status."""
        if self._thread is None:
            raise AssertionError("the proxy was never started")
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop finished meanwhile
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the proxy did not stop within 60 s"
        if self._failure is not None:
            raise self._failure
        assert self.status is not None
        return self.status


StartProxy = Callable[..., ProxyThread]


REPLAY_ENGINES = pytest.mark.parametrize("replay_engine", ["direct", "mitmproxy"], indirect=True)
"""Mark for tests that replay: run them on both replay engines."""


@dataclass(frozen=True)
class Rig:
    """The origin, the paths, a proxy starter and a scratch directory, with client shortcuts."""

    origin: Origin
    paths: Paths
    start: StartProxy
    tmp: Path

    def get(
        self,
        proxy: ProxyThread,
        target: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> Fetched:
        """``target`` on the origin (or an absolute URL) with urllib through ``proxy``."""
        url = target if "://" in target else self.origin.url(target)
        opener = urllib_opener(proxy.url, self.paths.ca_cert)
        return urlfetch(opener, url, method=method, headers=headers, data=data)

    def curl(self, proxy: ProxyThread, target: str, *args: str, http2: bool = False) -> Fetched:
        """``target`` on the origin (or an absolute URL) with curl through ``proxy``."""
        url = target if "://" in target else self.origin.url(target)
        return curl(proxy.url, self.paths.ca_cert, url, *args, http2=http2, tmp=self.tmp)
