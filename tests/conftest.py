"""Shared fixtures: the test origin and its CA, fetchproxy's CA, an in-process proxy, clients.

The proxy runs as :class:`~fetchproxy.proxy.ProxyRun` on its own event loop in a thread
(:class:`ProxyThread`); mitmproxy keeps global state, so one runs at a time. The clients are
real: ``curl`` (HTTP/1.1 or HTTP/2 to the proxy) and ``urllib`` (HTTP/1.1), both through the
proxy and trusting only fetchproxy's CA.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, overload

import pytest

with warnings.catch_warnings():
    # mitmproxy's dependencies (ldap3 with pyasn1 0.6, passlib with `crypt`) warn on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import mitmproxy.master  # noqa: F401 -- imported here once, under the filter above

from addons.record import Record
from fetchproxy.ca import generate_ca
from fetchproxy.cli import build_parser
from fetchproxy.replaybook import ReplayBook
from fetchproxy.runs import make_run
from fetchproxy.serve import finish
from fetchproxy.settings import Mode, ProxySettings
from fetchproxy.store import DiskStore
from tests.origin import Origin, OriginPKI, make_pki, standard_site

if TYPE_CHECKING:
    from fetchproxy.runs import Run


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI every test runs: the ones that need root skip elsewhere, so CI must be root."""
    if os.environ.get("CI") and os.geteuid() != 0:
        raise pytest.UsageError(
            "CI is set but this is not root: the sandbox tests would skip instead of running"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """mitmproxy 11 passes pyOpenSSL X509 objects, which pyOpenSSL now deprecates on every
    TLS handshake; with warnings as errors that would break the proxy mid-test."""
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:mitmproxy"))


# ------------------------------------------------------------------------------------- the parts


@pytest.fixture(scope="session")
def origin_pki(tmp_path_factory: pytest.TempPathFactory) -> OriginPKI:
    return make_pki(tmp_path_factory.mktemp("origin-pki"))


@pytest.fixture
def origin(origin_pki: OriginPKI) -> Iterator[Origin]:
    """The standard test origin, HTTP/1.1 and HTTP/2; fails the test if a handler crashed."""
    with Origin(standard_site(), origin_pki) as server:
        yield server
    assert server.errors == []


@dataclass(frozen=True)
class Paths:
    """Where one test keeps fetchproxy's CA, lock, log and store."""

    confdir: Path
    ca_cert: Path
    lock: Path
    log: Path
    store: Path


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    confdir = tmp_path / "confdir"
    ca_cert = generate_ca("fetchproxy test CA").write(confdir)
    return Paths(
        confdir=confdir,
        ca_cert=ca_cert,
        lock=tmp_path / "fetchproxy.lock.toml",
        log=tmp_path / "events.jsonl",
        store=tmp_path / "store",
    )


# --------------------------------------------------------------------------------------- the proxy


@dataclass
class ProxyThread:
    """A :class:`ProxyRun` on its own event loop in a thread; :meth:`stop` returns its status."""

    settings: ProxySettings
    run: Run = field(init=False)
    url: str = ""
    status: int | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _failure: BaseException | None = None
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.run = make_run(self.settings)

    @property
    def client_protocol(self) -> str:
        """What a client that prefers HTTP/2 gets from this proxy (the direct replay server
        offers only HTTP/1.1)."""
        settings = self.settings
        return "HTTP/2" if settings.http2 and not settings.direct else "HTTP/1.1"

    @property
    def record(self) -> Record:
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


@pytest.fixture
def replay_engine(request: pytest.FixtureRequest) -> str:
    """The engine ``start_proxy("replay")`` uses: mitmproxy unless a test asks for both."""
    return str(getattr(request, "param", "mitmproxy"))


@pytest.fixture
def start_proxy(paths: Paths, origin_pki: OriginPKI, replay_engine: str) -> Iterator[StartProxy]:
    """``start_proxy("record")`` starts a proxy on 127.0.0.1:0 with the test's paths.

    The origin's CA is trusted upstream unless ``upstream_ca=()`` is given. A replay proxy runs
    on ``replay_engine``. Every proxy still running when the test ends is stopped.
    """
    started: list[ProxyThread] = []

    def start(mode: Mode, **overrides: object) -> ProxyThread:
        values: dict[str, object] = {
            "mode": mode,
            "lock": paths.lock,
            "store": DiskStore(paths.store),
            "confdir": paths.confdir,
            "listen_port": 0,
            "log": paths.log,
            "upstream_ca": (origin_pki.ca_cert,),
            "http2": True,  # the product's default is HTTP/1.1; the tests cover both
            "engine": replay_engine if mode == "replay" else "auto",
        }
        values.update(overrides)
        proxy = ProxyThread(ProxySettings(**values))  # type: ignore[arg-type]
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        if proxy.status is None:
            with contextlib.suppress(BaseException):
                proxy.stop()


# ------------------------------------------------------------------------------------- the clients


@dataclass(frozen=True)
class Fetched:
    """What a client got: status, headers (names lowercase, in order) and body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    protocol: str = "HTTP/1.1"

    @overload
    def header(self, name: str) -> str | None: ...
    @overload
    def header(self, name: str, default: str) -> str: ...
    def header(self, name: str, default: str | None = None) -> str | None:
        return next((value for key, value in self.headers if key == name), default)

    def header_names(self) -> set[str]:
        return {key for key, _ in self.headers}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: object, **_kwargs: object) -> None:
        return None


def urllib_opener(proxy: str, ca_cert: Path) -> urllib.request.OpenerDirector:
    """An opener that goes through ``proxy``, trusts only ``ca_cert`` and follows no redirects."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
        urllib.request.HTTPSHandler(context=context),
        _NoRedirects(),
    )


def urlfetch(
    opener: urllib.request.OpenerDirector,
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 30,
) -> Fetched:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with opener.open(request, timeout=timeout) as response:
            return Fetched(
                response.status,
                tuple((k.lower(), v) for k, v in response.headers.items()),
                response.read(),
            )
    except urllib.error.HTTPError as error:
        with error:
            return Fetched(
                error.code, tuple((k.lower(), v) for k, v in error.headers.items()), error.read()
            )


def curl(
    proxy: str, ca_cert: Path, url: str, *args: str, http2: bool = False, tmp: Path
) -> Fetched:
    """``curl`` through ``proxy`` (HTTP/2 to the proxy with ``http2``), no redirects followed."""
    tmp.mkdir(parents=True, exist_ok=True)
    head, body = tmp / "curl-head", tmp / "curl-body"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    done = subprocess.run(
        [
            "curl",
            "--silent",
            "--show-error",
            "--proxy",
            proxy,
            "--cacert",
            str(ca_cert),
            "--http2" if http2 else "--http1.1",
            "--dump-header",
            str(head),
            "--output",
            str(body),
            "--write-out",
            "%{http_version}",
            *args,
            url,
        ],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"curl {url}: exit {done.returncode}: {done.stderr.decode()}"
    # with --head, curl writes the headers to --output as well
    content = b"" if "--head" in args else body.read_bytes()
    return _parse_curl(head.read_bytes(), content, done.stdout.decode())


def _parse_curl(head: bytes, body: bytes, version: str) -> Fetched:
    """The last response of ``--dump-header`` output (proxies add a CONNECT response first)."""
    blocks = [b for b in head.replace(b"\r\n", b"\n").split(b"\n\n") if b.strip()]
    lines = blocks[-1].decode().split("\n")
    status = int(lines[0].split()[1])
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return Fetched(status, tuple(headers), body, protocol=f"HTTP/{version}")


def run_fetchproxy(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m fetchproxy ARGS`` as users run it (after ``prefix``, e.g. ``setpriv``), its
    output captured; ``env`` replaces the environment."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "fetchproxy", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def parse_cli(*argv: str) -> argparse.Namespace:
    """Arguments as the ``fetchproxy`` command parses them."""
    return build_parser().parse_args(argv)


def read_events(log: Path, *, unused: bool = False) -> list[dict[str, object]]:
    """The event log's lines; the end-of-replay ``unused`` lines only when asked for."""
    events = [json.loads(line) for line in io.StringIO(log.read_text()) if line.strip()]
    return [e for e in events if unused or e["event"] != "unused"]


def files_under(*roots: Path) -> Sequence[Path]:
    """Every regular file below ``roots`` (or the roots themselves when they are files)."""
    found: list[Path] = []
    for root in roots:
        if root.is_file():
            found.append(root)
        elif root.is_dir():
            found.extend(p for p in sorted(root.rglob("*")) if p.is_file())
    return found


# ----------------------------------------------------------------------------------- all together


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


@pytest.fixture
def rig(origin: Origin, paths: Paths, start_proxy: StartProxy, tmp_path: Path) -> Rig:
    return Rig(origin, paths, start_proxy, tmp_path / "clients")
