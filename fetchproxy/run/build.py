"""``fetchproxy record -- BUILD`` and ``fetchproxy replay -- BUILD``: a build in the sandbox.

Per run: a private temporary directory (0700, ``fetchproxy-run-…``) with a fresh ephemeral CA
whose key never leaves it (a run killed with SIGKILL cannot remove it: the next run does);
the sandbox (:mod:`fetchproxy.sandbox`), then the proxy, then the build with the proxy and CA
variables set. Which sandbox (``--sandbox``, :func:`~fetchproxy.sandbox.available_sandbox`):

- **root**: two network namespaces and a veth pair. The proxy listens in the edge namespace
  (the event-loop thread enters the edge, mitmproxy binds, and the ``running`` hook moves the
  thread back, so upstream connections are made from the host namespace).
- **user**, without root: a user and network namespace with only lo. The proxy listens on the
  host's loopback, and a :class:`~fetchproxy.relay.Relay` pipes to it what arrives on the
  listener the sandbox made on its own loopback; one line on stderr says so, and what this
  sandbox lacks compared to the root one.
- **none** (``--no-sandbox``): the host's network, said on stderr.

SIGINT and SIGTERM are forwarded to the build. When it ends the proxy stops, the lock is
written (record: only if the build succeeded and every answer was stored; otherwise the lock
stays as it was and the journal keeps what was recorded) and a summary goes to stderr.

Exit status: the build's own when it failed; else 3 when replay refused anything; else 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fetchproxy.ca import generate_ephemeral_ca, system_trust_bundle
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS
from fetchproxy.replay.directrun import DirectReplayRun
from fetchproxy.run.buildenv import build_environment, wgetrc_text
from fetchproxy.run.engines import make_run
from fetchproxy.run.relay import Relay
from fetchproxy.run.serve import finish
from fetchproxy.run.settings import Mode, ProxySettings
from fetchproxy.sandbox import BuildProcess, Sandbox, SandboxError, UserSandbox, available_sandbox
from fetchproxy.store import Store

if TYPE_CHECKING:
    from fetchproxy.run.engines import Run

REFUSED_STATUS = 3
PROXY_PORT = 3128
"""The proxy's port as the build sees it: in the edge namespace (root sandbox) or on the
sandbox's own loopback (user sandbox); private to the run, so it never clashes."""
_INSIDE = "/run/fetchproxy"
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
    secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS
    http2: bool = False


RUN_DIR_PREFIX = "fetchproxy-run-"
RUN_LOCK = ".run-lock"
"""A file in a run's directory that the run holds an ``flock`` on for as long as it lives."""


def run_build(request: RunRequest) -> int:
    """Run the build under the proxy; the exit status."""
    remove_stale_run_dirs(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=RUN_DIR_PREFIX) as tmp, hold_run_dir(Path(tmp)):
        return asyncio.run(_run(request, Path(tmp)))


@contextlib.contextmanager
def hold_run_dir(directory: Path) -> Iterator[None]:
    """Hold ``directory`` as a live run's: an ``flock`` the kernel drops when the run dies.

    The lock file is locked under a temp name and then renamed into place, so a sweeping run
    never finds it unlocked while this run lives.
    """
    fd, name = tempfile.mkstemp(dir=directory, prefix=".run-lock-")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        Path(name).rename(directory / RUN_LOCK)
        yield
    finally:
        os.close(fd)


def remove_stale_run_dirs(parent: Path) -> list[Path]:
    """Remove the run directories in ``parent`` whose run is gone; which were removed.

    A run removes its directory (and the ephemeral CA key in it) itself, unless it was killed
    with SIGKILL. A run holds an ``flock`` on its directory's lock file while it lives (the
    kernel drops it when the process dies, whatever its PID namespace), so a directory whose
    lock can be taken is left over. Only this user's directories are touched; one without a
    lock file (being made, or from an older fetchproxy) is left alone.
    """
    removed = []
    for path in parent.glob(f"{RUN_DIR_PREFIX}*"):
        try:
            info = path.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            fd = os.open(path / RUN_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: the run is alive
            continue
        else:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


async def _run(request: RunRequest, tmp: Path) -> int:
    confdir = tmp / "ca"
    ca = generate_ephemeral_ca()
    ca.write(confdir)
    bundle = system_trust_bundle() + b"\n" + ca.cert_pem
    if request.sandbox == "none":
        return await _run_unsandboxed(request, confdir, tmp, bundle)
    kind, reason = available_sandbox(request.sandbox)
    if kind is None:
        raise SandboxError(reason)
    if kind == "root":
        with Sandbox(proxy_port=PROXY_PORT) as sandbox:
            return await _run_in_root_sandbox(request, sandbox, confdir, bundle)
    with UserSandbox(proxy_port=PROXY_PORT) as user_sandbox:
        return await _run_in_user_sandbox(request, user_sandbox, confdir, bundle)


def _settings(request: RunRequest, confdir: Path, host: str, port: int) -> ProxySettings:
    return ProxySettings(
        mode=request.mode,
        lock=request.lock,
        store=request.store,
        confdir=confdir,
        listen_host=host,
        listen_port=port,
        log=request.log,
        upstream_ca=tuple(request.upstream_ca),
        keep=request.keep,
        exact=request.exact,
        secret_params=request.secret_params,
        http2=request.http2,
    )


async def _run_in_root_sandbox(
    request: RunRequest, sandbox: Sandbox, confdir: Path, bundle: bytes
) -> int:
    settings = _settings(request, confdir, sandbox.edge_address, PROXY_PORT)
    proxy = make_run(settings, on_running=sandbox.leave_edge)
    sandbox.enter_edge()
    try:
        await proxy.start()
    finally:
        # The running hook already left the edge, unless start() failed before it; leaving
        # twice is harmless.
        sandbox.leave_edge()
    stray = threads_outside_own_netns()
    if stray:
        await proxy.stop()
        raise SandboxError(
            f"internal error: threads {stray} were started while the proxy was "
            "binding in the edge namespace and would make upstream connections from there"
        )
    try:
        status = await _build(request, sandbox, bundle, f"{sandbox.edge_address}:{PROXY_PORT}")
    except BaseException:
        await proxy.stop()
        raise
    await proxy.stop()
    return _exit_status(status, proxy)


async def _run_in_user_sandbox(
    request: RunRequest, sandbox: UserSandbox, confdir: Path, bundle: bytes
) -> int:
    settings = _settings(request, confdir, "127.0.0.1", 0)
    inside = f"{sandbox.proxy_host}:{sandbox.proxy_port}"
    if settings.direct:
        # The direct replay server serves on the listener made inside the sandbox itself:
        # no relay, and nothing listens on the host.
        direct = DirectReplayRun(settings, sock=sandbox.accept_socket())
        await direct.start()
        print(user_sandbox_notice(request.sandbox, inside, None), file=sys.stderr)
        try:
            status = await _build(request, sandbox, bundle, inside)
        finally:
            await direct.stop()
        return _exit_status(status, direct)
    relay_ports: set[int] = set()
    settings = dataclasses.replace(settings, only_client_ports=relay_ports)
    proxy = make_run(settings)
    await proxy.start()
    host, port = proxy.addresses[0][:2]
    relay = Relay(sandbox.accept_socket(), (host, port), source_ports=relay_ports)
    try:
        await relay.start()
        print(user_sandbox_notice(request.sandbox, inside, f"{host}:{port}"), file=sys.stderr)
        status = await _build(request, sandbox, bundle, inside)
    except BaseException:
        await relay.stop()
        await proxy.stop()
        raise
    await relay.stop()
    await proxy.stop()
    return _exit_status(status, proxy)


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
    request: RunRequest, sandbox: Sandbox | UserSandbox, bundle: bytes, proxy_address: str
) -> int:
    """Run the build in ``sandbox`` through the proxy at ``proxy_address``; its exit status."""
    ca_path = f"{_INSIDE}/ca-bundle.pem"
    env = build_environment(
        os.environ,
        proxy_url=f"http://{proxy_address}",
        ca_bundle=ca_path,
        wgetrc=f"{_INSIDE}/wgetrc",
    )
    files = {"ca-bundle.pem": bundle, "wgetrc": wgetrc_text(ca_path).encode()}
    build = sandbox.spawn(request.argv, env=env, cwd=Path.cwd(), files=files)
    return await _wait(build)


async def _run_unsandboxed(request: RunRequest, confdir: Path, tmp: Path, bundle: bytes) -> int:
    print(
        "fetchproxy: warning: --no-sandbox: the build runs with the host's network; only "
        "clients that honour the proxy variables go through fetchproxy, and nothing stops "
        "the others",
        file=sys.stderr,
    )
    proxy = make_run(_settings(request, confdir, "127.0.0.1", 0))
    await proxy.start()
    host, port = proxy.addresses[0]
    ca_path = tmp / "ca-bundle.pem"
    ca_path.write_bytes(bundle)
    wgetrc = tmp / "wgetrc"
    wgetrc.write_text(wgetrc_text(str(ca_path)))
    env = build_environment(
        os.environ, proxy_url=f"http://{host}:{port}", ca_bundle=str(ca_path), wgetrc=str(wgetrc)
    )
    try:
        process = await asyncio.create_subprocess_exec(*request.argv, env=env)
    except OSError as exc:
        await proxy.stop()
        print(f"fetchproxy: error: cannot run {request.argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, process.send_signal, sig)
    try:
        status = await process.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    await proxy.stop()
    return _exit_status(status, proxy)


def threads_outside_own_netns() -> list[int]:
    """Thread ids of this process whose network namespace is not the calling thread's."""
    own = Path("/proc/thread-self/ns/net").readlink()
    stray = []
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "ns" / "net").readlink() != own:
                stray.append(int(task.name))
        except OSError:
            continue  # the thread ended meanwhile
    return stray


async def _wait(build: BuildProcess) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, build.send_signal, sig)
    try:
        return await asyncio.to_thread(build.wait)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _exit_status(build_status: int, proxy: Run) -> int:
    proxy_status = finish(proxy, build_status=build_status)
    if build_status != 0:
        return 128 - build_status if build_status < 0 else build_status
    refused = 0 if proxy.book is None else proxy.book.stats.refused
    if refused:
        print(
            f"fetchproxy: the build succeeded, but replay refused {refused} "
            "request(s): it is not hermetic (exit status 3)",
            file=sys.stderr,
        )
        return REFUSED_STATUS
    return proxy_status
