"""``fetchproxy record -- BUILD`` and ``fetchproxy replay -- BUILD``: a build in the sandbox.

Per run: a private directory (:mod:`fetchproxy.run.rundir`) with a fresh ephemeral CA whose
key never leaves it; the sandbox (:mod:`fetchproxy.sandbox`); the proxy, listening where the
build can reach it and nowhere else; the build, with the proxy and CA variables set and its
files in /run/fetchproxy/ — the CA bundle, a Java trust store, an apt configuration, a wgetrc
(:mod:`fetchproxy.run.buildenv`); and when it ends, the outcome (:mod:`fetchproxy.run.outcome`).
Where the proxy listens depends on the sandbox (``--sandbox``,
:func:`~fetchproxy.sandbox.available_sandbox`):

- **root**: two network namespaces and a veth pair. The proxy listens in the edge namespace
  (the event-loop thread enters the edge, the engine binds, and its ``on_running`` callback
  moves the thread back, so upstream connections are made from the host namespace). With
  ``--intercept transparent`` the engine also listens for the connections the edge redirects,
  and a DNS stub (:mod:`fetchproxy.run.dnsstub`) answers the build's lookups there.
- **user**, without root: a user and network namespace with only lo. Replay serves on the
  listener the sandbox made on its own loopback; record listens on the host's loopback and a
  :class:`~fetchproxy.run.relay.Relay` pipes to it what arrives on that listener. One line on
  stderr says so, and what this sandbox lacks compared to the root one.
- **none** (``--no-sandbox``): the host's network, said on stderr.

SIGINT and SIGTERM are forwarded to the build.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fetchproxy.ca import generate_ephemeral_ca, system_trust_bundle
from fetchproxy.keys.intercepted import NameBook
from fetchproxy.keys.rules import KeyRules
from fetchproxy.lock.eventlog import default_log_path
from fetchproxy.lock.journal import journal_path
from fetchproxy.record.origins import OriginPolicy
from fetchproxy.record.rules import KEPT_HEADERS
from fetchproxy.run.buildenv import build_setup
from fetchproxy.run.dnsstub import DnsStub, SyntheticNames
from fetchproxy.run.engines import ProxyRun, open_run
from fetchproxy.run.imports import ImportGuard, preload
from fetchproxy.run.outcome import ExitStatus, build_outcome, finish
from fetchproxy.run.relay import Relay
from fetchproxy.run.rundir import run_dir
from fetchproxy.run.settings import Isolation, Mode, ProxySettings
from fetchproxy.sandbox import (
    BuildProcess,
    BuildStartError,
    Sandbox,
    SandboxError,
    UserSandbox,
    available_sandbox,
)
from fetchproxy.sandbox.netns import threads_outside_own_netns
from fetchproxy.sandbox.root import TRANSPARENT_PORT, Intercept
from fetchproxy.store import DiskStore, Store
from fetchproxy.store.remote_url import RemoteURL

if TYPE_CHECKING:
    from fetchproxy.run.attest import Attester

PROXY_PORT = 3128
"""The proxy's port as the build sees it: in the edge namespace (root sandbox) or on the
sandbox's own loopback (user sandbox); private to the run, so it never clashes."""
_INSIDE = "/run/fetchproxy"
TRANSPARENT_NEEDS_ROOT = (
    "--intercept transparent needs the root sandbox (run fetchproxy as root): only there can "
    "the edge take the build's connections; the explicit proxy (the default) works everywhere"
)
SandboxMode = Literal["auto", "root", "user", "none"]


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    mode: Mode
    argv: Sequence[str]
    lock: Path
    store: Store
    log: Path | None = None
    upstream_ca: Sequence[Path] = ()
    sandbox: SandboxMode = "auto"
    keep: bool = False
    exact: bool = False
    rules: KeyRules = field(default_factory=KeyRules)
    http2: bool = False
    allow: Sequence[str] = ()
    """record: the origin patterns it may reach (``--allow-origin``, ``[record] allow``)."""
    writable: Sequence[Path] = ()
    """Paths the build may write that outlive the run (``--writable``, ``[sandbox] writable``)."""
    fresh_home: bool = False
    """An empty ``$HOME`` and XDG directories for the build (``--fresh-home``)."""
    keep_headers: frozenset[str] = KEPT_HEADERS
    """record: the response headers kept (the built-in ones plus ``[record] headers``)."""
    attest: Attester | None = None
    """replay: the attestation to write when the build succeeded (``--attest``)."""
    intercept: Intercept = "proxy"
    """``transparent``: the root sandbox takes every connection the build makes, not only
    those to the proxy (``--intercept``)."""
    remote: RemoteURL | None = None
    """The remote store the lock's blobs travel through (``--remote``)."""

    def settings(
        self,
        confdir: Path,
        host: str,
        port: int,
        *,
        isolation: Isolation,
        names: NameBook | None = None,
    ) -> ProxySettings:
        """The proxy's settings for this run, listening at ``host:port``, its build in the
        ``isolation`` sandbox."""
        return ProxySettings(
            mode=self.mode,
            lock=self.lock,
            store=self.store,
            confdir=confdir,
            listen_host=host,
            listen_port=port,
            log=self.log,
            upstream_ca=tuple(self.upstream_ca),
            keep=self.keep,
            exact=self.exact,
            rules=self.rules,
            http2=self.http2,
            origins=OriginPolicy.of(self.allow, guard_host=True),
            keep_headers=self.keep_headers,
            sandbox=isolation,
            attest=self.attest,
            transparent=None if names is None else (host, TRANSPARENT_PORT),
            names=names,
            remote=self.remote,
        )

    def protected(self) -> list[Path]:
        """What the build may never change, even inside its working directory: the lock, its
        journal, the event log and the store (fetchproxy's installation the sandbox keeps
        read-only itself)."""
        return [
            self.lock,
            journal_path(self.lock),
            self.log or default_log_path(self.lock),
            *([self.store.root] if isinstance(self.store, DiskStore) else []),
        ]


def run_build(request: RunRequest) -> int:
    """Run the build under the proxy; the exit status."""
    with run_dir() as tmp:
        return asyncio.run(_run(request, tmp))


async def _run(request: RunRequest, tmp: Path) -> int:
    confdir = tmp / "ca"
    ca = generate_ephemeral_ca()
    ca.write(confdir)
    bundle = system_trust_bundle() + b"\n" + ca.cert_pem
    if request.sandbox == "none":
        if request.intercept == "transparent":
            raise SandboxError(TRANSPARENT_NEEDS_ROOT)
        return await _run_unsandboxed(request, confdir, tmp, bundle)
    kind, reason = available_sandbox(request.sandbox)
    if kind is None:
        raise SandboxError(reason)
    if kind != "root" and request.intercept == "transparent":
        raise SandboxError(TRANSPARENT_NEEDS_ROOT)
    if kind == "root":
        with Sandbox(proxy_port=PROXY_PORT, intercept=request.intercept) as sandbox:
            async with _dns_stub(sandbox) as names, _in_edge(
                request, sandbox, confdir, names
            ) as proxy:  # fmt: skip
                return await _build(request, sandbox, proxy, bundle, sandbox.edge_address)
    with UserSandbox(proxy_port=PROXY_PORT) as user_sandbox:
        async with _in_user_sandbox(request, user_sandbox, confdir) as proxy:
            return await _build(request, user_sandbox, proxy, bundle, user_sandbox.proxy_host)


@contextlib.asynccontextmanager
async def _dns_stub(sandbox: Sandbox) -> AsyncIterator[SyntheticNames | None]:
    """With ``--intercept transparent``, the DNS stub answering in the edge for the ``with``
    block, and the names it hands out; else nothing (None)."""
    if sandbox.intercept != "transparent":
        yield None
        return
    names = SyntheticNames()
    stub = DnsStub(names)
    await stub.start(*sandbox.dns_sockets())
    try:
        yield names
    finally:
        await stub.stop()


@contextlib.asynccontextmanager
async def _in_edge(
    request: RunRequest, sandbox: Sandbox, confdir: Path, names: SyntheticNames | None
) -> AsyncIterator[ProxyRun]:
    """The proxy listening in the root sandbox's edge namespace, for the ``with`` block."""
    settings = request.settings(
        confdir, sandbox.edge_address, PROXY_PORT, isolation="root", names=names
    )
    proxy = open_run(settings, on_running=sandbox.leave_edge)
    sandbox.enter_edge()
    try:
        await proxy.start()
    finally:
        # on_running already left the edge, unless start() failed before it: leaving twice
        # is harmless.
        sandbox.leave_edge()
    try:
        stray = threads_outside_own_netns()
        if stray:
            raise SandboxError(
                f"internal error: threads {stray} were started while the proxy was "
                "binding in the edge namespace and would make upstream connections from there"
            )
        yield proxy
    finally:
        await proxy.stop()


@contextlib.asynccontextmanager
async def _in_user_sandbox(
    request: RunRequest, sandbox: UserSandbox, confdir: Path
) -> AsyncIterator[ProxyRun]:
    """The proxy serving the user sandbox's listener, for the ``with`` block."""
    settings = request.settings(confdir, "127.0.0.1", 0, isolation="user")
    inside = f"{sandbox.proxy_host}:{sandbox.proxy_port}"
    if settings.direct:
        # The direct replay server serves on the listener made inside the sandbox itself:
        # no relay, and nothing listens on the host.
        proxy = open_run(settings, sock=sandbox.accept_socket())
        await proxy.start()
        print(user_sandbox_notice(request.sandbox, inside, None), file=sys.stderr)
        try:
            yield proxy
        finally:
            await proxy.stop()
        return
    relay_ports: set[int] = set()
    proxy = open_run(dataclasses.replace(settings, only_client_ports=relay_ports))
    host, port = (await proxy.start())[0]
    relay = Relay(sandbox.accept_socket(), (host, port), source_ports=relay_ports)
    try:
        await relay.start()
        print(user_sandbox_notice(request.sandbox, inside, f"{host}:{port}"), file=sys.stderr)
        yield proxy
    finally:
        await relay.stop()
        await proxy.stop()


def user_sandbox_notice(choice: SandboxMode, inside: str, outside: str | None) -> str:
    """The line that says the build runs in the user sandbox, and what it lacks.

    ``inside``: the proxy's address as the build sees it; ``outside``: the proxy's own listener
    on the host, when a relay brings it in (None: the proxy serves inside, replay).
    """
    why = "not root, so the build runs" if choice == "auto" else "the build runs"
    lacks = (
        f"Unlike the root sandbox it maps only uid {os.getuid()} (the build cannot chown "
        "files to other users)"
    )
    if outside is None:
        return (
            f"fetchproxy: {why} in the unprivileged sandbox: a network namespace with only its "
            f"own loopback, where the proxy listens at {inside}. {lacks}"
        )
    return (
        f"fetchproxy: {why} in the unprivileged sandbox: a network namespace with only its "
        f"own loopback, where the proxy is relayed in at {inside}. {lacks}, and the proxy "
        f"also listens on the host's {outside} during the run (it serves only the relay's "
        "connections)"
    )


async def _build(
    request: RunRequest,
    sandbox: Sandbox | UserSandbox,
    proxy: ProxyRun,
    bundle: bytes,
    proxy_host: str,
) -> int:
    """Run the build in ``sandbox`` through ``proxy``; the run's exit status."""
    setup = build_setup(
        os.environ,
        proxy_host=proxy_host,
        proxy_port=PROXY_PORT,
        directory=_INSIDE,
        bundle=bundle,
        apt_as_root=isinstance(sandbox, UserSandbox),
    )
    preload(mitmproxy=not proxy.settings.direct)
    try:
        build = sandbox.spawn(
            request.argv,
            env=setup.env,
            cwd=Path.cwd(),
            files=setup.files,
            writable=[_absolute(p) for p in request.writable],
            protected=[_absolute(p) for p in request.protected()],
            fresh_home=request.fresh_home,
        )
    except BuildStartError as exc:
        await proxy.stop()
        return _cannot_run(request, proxy, exc.errno, exc.detail)
    with ImportGuard():
        status = await _wait(build)
    if build.ended_mid_line and sys.stderr.isatty():
        print(file=sys.stderr)  # what fetchproxy says starts a line of its own
    await proxy.stop()
    return build_outcome(proxy, status)


async def _run_unsandboxed(request: RunRequest, confdir: Path, tmp: Path, bundle: bytes) -> int:
    print(
        "fetchproxy: warning: --no-sandbox: the build runs with the host's network; only "
        "clients that honour the proxy variables go through fetchproxy, and nothing stops "
        "the others",
        file=sys.stderr,
    )
    proxy = open_run(request.settings(confdir, "127.0.0.1", 0, isolation="none"))
    host, port = (await proxy.start())[0]
    try:
        setup = build_setup(
            os.environ,
            proxy_host=host,
            proxy_port=port,
            directory=str(tmp / "files"),
            bundle=bundle,
        )
        _place_files(tmp, setup.files)
        preload(mitmproxy=not proxy.settings.direct)
        try:
            process = await asyncio.create_subprocess_exec(*request.argv, env=setup.env)
        except OSError as exc:
            await proxy.stop()
            return _cannot_run(request, proxy, exc.errno, exc.strerror or str(exc))
        with _forwarding_signals(process.send_signal), ImportGuard():
            status = await process.wait()
    finally:
        await proxy.stop()
    return build_outcome(proxy, status)


def _place_files(tmp: Path, files: dict[str, bytes]) -> None:
    """The build's files in ``tmp/files``, readable by every user: apt, run as root, downloads
    as ``_apt``, which must read the CA bundle. The run's directory becomes traversable (0711,
    not listable); its CA key stays in the 0700 directory ``ca``."""
    directory = tmp / "files"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o444)
    tmp.chmod(0o711)


def _absolute(path: Path) -> Path:
    """``path`` absolute and with its links resolved, as the sandbox takes paths."""
    return Path(os.path.realpath(path))


def _cannot_run(request: RunRequest, proxy: ProxyRun, errno_: int | None, why: str) -> int:
    """The build command could not be started: said once, the lock left as it was, and the
    shell's status for it (127 not found, 126 not executable), in every sandbox alike."""
    print(
        f"fetchproxy: error: cannot run the build command {request.argv[0]!r}: {why}",
        file=sys.stderr,
    )
    finish(proxy, build_status=ExitStatus.NOT_FOUND)  # the books close; the lock stays
    return ExitStatus.NOT_FOUND if errno_ == errno.ENOENT else ExitStatus.CANNOT_EXECUTE


@contextlib.contextmanager
def _forwarding_signals(send: Callable[[int], None]) -> Iterator[None]:
    """SIGINT and SIGTERM passed on to the build with ``send`` for the ``with`` block."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, send, sig)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _wait(build: BuildProcess) -> int:
    with _forwarding_signals(build.send_signal):
        return await asyncio.to_thread(build.wait)
