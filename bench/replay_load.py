"""The replay server under stalled readers: its RSS with N clients that stopped reading mid-body.

    python bench/replay_load.py                          # 1,000 stalled readers, plain and TLS
    python bench/replay_load.py --connections 200 --tree ../before --tree .

Each row is a fresh ``fetchproxy serve replay`` process (run from ``--tree``'s source with this
interpreter's packages) listening on ``--host`` (port 0). Every client connects, asks for a
``--size`` body (a plain-HTTP proxy request, or ``CONNECT`` and TLS inside the tunnel), and
never reads a byte; its receive buffer is shrunk to 4 KiB first, so the kernel holds little of
the answer on the client's side. Once the server's RSS has not grown for a second, the row
gives the RSS with one such client and with ``--connections``, and the cost of each client
beyond the first: (RSS(N) - RSS(1)) / (N - 1). ``VmHWM`` is the peak of the process.

The server needs a file-descriptor limit above ``--connections``; this script raises its own
soft limit (the server inherits it) and says so when it cannot.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

HOST = "files.example"


@dataclass(frozen=True)
class Memory:
    rss: int
    peak: int

    @classmethod
    def of(cls, pid: int) -> Memory:
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        return cls(
            rss=int(fields["VmRSS"].split()[0]) * 1024,
            peak=int(fields["VmHWM"].split()[0]) * 1024,
        )


def mb(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"


def make_fixture(work: Path, size: int) -> tuple[Path, Path]:
    """A store with one ``size``-byte blob and a lock serving it over http and https."""
    from fetchproxy.keys.request import RequestKey
    from fetchproxy.lock.file import write_lock
    from fetchproxy.lock.model import Fetch, Lock
    from fetchproxy.store import DiskStore

    store = DiskStore(work / "store")
    body = os.urandom(size)
    digest = store.put(body)
    fetches = [
        Fetch(key=RequestKey(method="GET", url=url), status=200, digest=digest, size=size)
        for url in (f"http://{HOST}/large", f"https://{HOST}/large")
    ]
    write_lock(work / "fetchproxy.lock.toml", Lock.from_fetches(fetches))
    return work / "fetchproxy.lock.toml", store.root


@contextmanager
def serve(tree: Path, work: Path, host: str, name: str) -> Iterator[tuple[int, int]]:
    """``fetchproxy serve replay`` from ``tree``: (its PID, the port it listens on)."""
    env = dict(os.environ, PYTHONPATH=str(tree), XDG_DATA_HOME=str(work / "data"))
    argv = [sys.executable, "-m", "fetchproxy", "serve", "replay"]
    argv += ["--lock", str(work / "fetchproxy.lock.toml"), "--store", str(work / "store")]
    argv += ["--log", str(work / f"{name}.events.jsonl"), "--listen", f"{host}:0"]
    with (work / f"{name}.stderr").open("wb") as stderr:
        process = subprocess.Popen(
            argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=stderr, text=True,
        )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            said = (work / f"{name}.stderr").read_text()
            raise RuntimeError(f"serve replay did not start: {said}")
        yield process.pid, int(line.rsplit(":", 1)[1])
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def stalled_reader(host: str, port: int, *, tls: bool, ca: Path, stack: ExitStack) -> socket.socket:
    """A client that asked for the large body and will never read it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stack.callback(sock.close)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, port))
    if not tls:
        sock.sendall(f"GET http://{HOST}/large HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        return sock
    sock.sendall(f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(1024)
        if not chunk:
            raise RuntimeError("the proxy closed the tunnel")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"CONNECT answered {answer[:40]!r}")
    context = ssl.create_default_context(cafile=ca)
    wrapped = context.wrap_socket(sock, server_hostname=HOST)
    stack.callback(wrapped.close)
    wrapped.sendall(f"GET /large HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    return wrapped


def settled(pid: int, *, timeout: float = 120) -> Memory:
    """The server's memory once its RSS has not grown for a second."""
    deadline = time.monotonic() + timeout
    last = Memory.of(pid)
    steady_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = Memory.of(pid)
        if now.rss > last.rss * 1.005 + 64 * 1024:
            steady_since = time.monotonic()
            last = now
        elif time.monotonic() - steady_since >= 1.0:
            return now
    return Memory.of(pid)


def measure(tree: Path, work: Path, args: argparse.Namespace, *, tls: bool, count: int) -> Memory:
    name = f"{'tls' if tls else 'plain'}-{count}-{len(list(work.glob('*.stderr')))}"
    ca = work / "data" / "fetchproxy" / "ca" / "fetchproxy-ca.pem"
    with serve(tree, work, args.host, name) as (pid, port), ExitStack() as clients:
        for _ in range(count):
            stalled_reader(args.host, port, tls=tls, ca=ca, stack=clients)
        return settled(pid)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--size", type=int, default=64, help="the body, in MiB (default 64)")
    parser.add_argument("--host", default="127.0.0.50", help="where the server listens")
    parser.add_argument(
        "--tree", type=Path, action="append", help="a source tree to run (default: this one)"
    )
    parser.add_argument("--only", choices=("plain", "tls"), help="one kind of client only")
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in args.tree or [Path(__file__).resolve().parent.parent]]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * args.connections + 256
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            print(f"replay_load: the fd limit ({hard}) is below {wanted}", file=sys.stderr)
            return 2
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        print(f"replay_load: raised the soft fd limit from {soft} to {wanted}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="replay-load-"))
    try:
        make_fixture(work, args.size << 20)
        from fetchproxy.ca import ensure_persistent_ca

        ensure_persistent_ca(work / "data" / "fetchproxy" / "ca")
        kinds = [args.only == "tls"] if args.only else [False, True]
        print(
            f"| tree | clients | RSS, 1 stalled reader | RSS, {args.connections:,} | "
            "per extra reader | peak (VmHWM) |"
        )
        print("|---|---|---:|---:|---:|---:|")
        for tree in trees:
            for tls in kinds:
                one = measure(tree, work, args, tls=tls, count=1)
                many = measure(tree, work, args, tls=tls, count=args.connections)
                each = (many.rss - one.rss) / max(args.connections - 1, 1)
                print(
                    f"| {tree.name} | {'CONNECT + TLS' if tls else 'plain HTTP'} | "
                    f"{mb(one.rss)} | {mb(many.rss)} | {each / 1e3:,.0f} kB | {mb(many.peak)} |",
                    flush=True,
                )
    finally:
        with suppress(OSError):
            shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
