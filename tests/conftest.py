"""Shared fixtures: the test origin and its CA, fetchproxy's CA and paths, an in-process proxy.

The helpers they are built from live in :mod:`tests.support`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

with warnings.catch_warnings():
    # mitmproxy's dependencies (ldap3 with pyasn1 0.6, passlib with `crypt`) warn on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import mitmproxy.master  # noqa: F401 -- imported here once, under the filter above

from fetchproxy.ca import generate_ca
from fetchproxy.cli import _StderrHandler as cli_stderr_handler
from fetchproxy.run.settings import Mode, ProxySettings
from fetchproxy.store import DiskStore
from tests.support.origin import Origin, OriginPKI, make_pki, standard_site
from tests.support.proxy import Paths, ProxyThread, Rig, StartProxy

# pytest explains a failed assert (the values on each side) only in the modules it rewrites:
# test modules, conftest files, and these. The real-client tests' shared checks (a replay
# served every entry, a build recorded) live there and fail with the values too.
pytest.register_assert_rewrite("tests.clients.support")


def pytest_configure(config: pytest.Config) -> None:
    """Property tests: derandomized and without a database in CI (a failure is the same
    failure on every run, and nothing carries over between runs); FETCHPROXY_HYPOTHESIS=long
    for a longer, random search on demand (e.g. before a release)."""
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    settings.register_profile("long", max_examples=5000, deadline=None)
    chosen = os.environ.get("FETCHPROXY_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "")
    settings.load_profile(chosen or "default")


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


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs the CLI in-process gets its stderr handler on the root logger; put the
    logging set-up back afterwards, or every later test would also print its records to
    stderr (and a test of what the CLI prints would depend on which tests ran before it)."""
    root, ours = logging.getLogger(), logging.getLogger("fetchproxy")
    level, our_level = root.level, ours.level
    yield
    # pytest adds and removes its own capture handlers around each phase: only the CLI's go
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, cli_stderr_handler)]
    root.setLevel(level)
    ours.setLevel(our_level)


@pytest.fixture(scope="session")
def origin_pki(tmp_path_factory: pytest.TempPathFactory) -> OriginPKI:
    return make_pki(tmp_path_factory.mktemp("origin-pki"))


@pytest.fixture
def origin(origin_pki: OriginPKI) -> Iterator[Origin]:
    """The standard test origin, HTTP/1.1 and HTTP/2; fails the test if a handler crashed."""
    with Origin(standard_site(), origin_pki) as server:
        yield server
    assert server.errors == []


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


@pytest.fixture
def rig(origin: Origin, paths: Paths, start_proxy: StartProxy, tmp_path: Path) -> Rig:
    return Rig(origin, paths, start_proxy, tmp_path / "clients")
