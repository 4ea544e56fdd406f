"""``fetchproxy record -- BUILD`` and ``fetchproxy replay -- BUILD``: a build in the sandbox.

Per run: a private temporary directory (0700) with a fresh ephemeral CA whose key never leaves
it; the sandbox (two network namespaces and a veth pair, :mod:`fetchproxy.sandbox`); the proxy
listening in the edge namespace (the event-loop thread enters the edge, mitmproxy binds, and the
``running`` hook moves the thread back, so upstream connections are made from the host
namespace); then the build, with the proxy and CA variables set. SIGINT and SIGTERM are
forwarded to the build. When it ends the proxy stops, the lock is written (record) and a
summary goes to stderr.

Exit status: the build's own when it failed; else 3 when replay refused anything; else 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.buildenv import build_environment, wgetrc_text
from fetchproxy.ca import generate_ephemeral_ca
from fetchproxy.normalize import DEFAULT_SECRET_PARAMS
from fetchproxy.proxy import Mode, ProxyRun, ProxySettings
from fetchproxy.sandbox import BuildProcess, Sandbox, SandboxError
from fetchproxy.serve import finish
from fetchproxy.store import Store

REFUSED_STATUS = 3
PROXY_PORT = 3128
"""The proxy's port in the edge namespace (private to the run, so it never clashes)."""
_INSIDE = "/run/fetchproxy"


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    mode: Mode
    argv: Sequence[str]
    lock: Path
    store: Store
    log: Path | None = None
    upstream_ca: Sequence[Path] = ()
    sandbox: bool = True
    keep: bool = False
    exact: bool = False
    secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS


def _system_bundle() -> bytes:
    default = ssl.get_default_verify_paths().cafile
    for candidate in (
        default,
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return b""


def run_build(request: RunRequest) -> int:
    """Run the build under the proxy; the exit status."""
    with tempfile.TemporaryDirectory(prefix="fetchproxy-run-") as tmp:
        return asyncio.run(_run(request, Path(tmp)))


async def _run(request: RunRequest, tmp: Path) -> int:
    confdir = tmp / "ca"
    ca = generate_ephemeral_ca()
    ca.write(confdir)
    bundle = _system_bundle() + b"\n" + ca.cert_pem
    if request.sandbox:
        with Sandbox(proxy_port=PROXY_PORT) as sandbox:
            return await _run_sandboxed(request, sandbox, confdir, bundle)
    return await _run_unsandboxed(request, confdir, tmp, bundle)


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
    )


async def _run_sandboxed(
    request: RunRequest, sandbox: Sandbox, confdir: Path, bundle: bytes
) -> int:
    settings = _settings(request, confdir, sandbox.edge_address, PROXY_PORT)
    proxy = ProxyRun(settings, on_running=sandbox.leave_edge)
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
    ca_path = f"{_INSIDE}/ca-bundle.pem"
    env = build_environment(
        os.environ,
        proxy_url=f"http://{sandbox.edge_address}:{PROXY_PORT}",
        ca_bundle=ca_path,
        wgetrc=f"{_INSIDE}/wgetrc",
    )
    files = {"ca-bundle.pem": bundle, "wgetrc": wgetrc_text(ca_path).encode()}
    try:
        build = sandbox.spawn(request.argv, env=env, cwd=Path.cwd(), files=files)
    except BaseException:
        await proxy.stop()
        raise
    status = await _wait(build)
    await proxy.stop()
    return _exit_status(status, proxy)


async def _run_unsandboxed(request: RunRequest, confdir: Path, tmp: Path, bundle: bytes) -> int:
    print(
        "fetchproxy: warning: --no-sandbox: the build runs with the host's network; only "
        "clients that honour the proxy variables go through fetchproxy, and nothing stops "
        "the others",
        file=sys.stderr,
    )
    proxy = ProxyRun(_settings(request, confdir, "127.0.0.1", 0))
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


def _exit_status(build_status: int, proxy: ProxyRun) -> int:
    proxy_status = finish(proxy)
    if build_status != 0:
        return 128 - build_status if build_status < 0 else build_status
    refused = getattr(proxy.addon.stats, "refused", 0)
    if refused:
        print(
            f"fetchproxy: the build succeeded, but replay refused {refused} "
            "request(s): it is not hermetic (exit status 3)",
            file=sys.stderr,
        )
        return REFUSED_STATUS
    return proxy_status
