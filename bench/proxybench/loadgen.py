"""The load: many small HTTPS requests on keep-alive connections, and large downloads with curl.

:func:`measure_rate` and :func:`run_requests` open ``connections`` TLS connections to an origin,
each either direct or through a proxy's ``CONNECT`` (then TLS inside the tunnel, as real clients
do), and send one GET at a time on each until the time or the count is up. Every answer is
checked (status 200, exact length) and a failure stops the run. On this machine the client
needs about 20 µs of CPU per request direct and about 100 µs through a proxy (TLS to the proxy
instead of nginx), a tenth of a CPU at a proxy's 1,000 requests per second.

:func:`curl_download` fetches one large body with ``curl`` and :func:`curl_many` many small
ones with ``curl --parallel``, over HTTP/1.1 or HTTP/2 to the proxy (or origin).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proxybench.systems import clean_env


class LoadError(RuntimeError):
    """A request failed or was answered wrongly."""


@dataclass(frozen=True)
class Target:
    origin_host: str
    origin_port: int
    paths: Sequence[str]
    """Paths requested in turn, each answered with ``body_size`` bytes."""
    body_size: int
    trust: Path
    """The CA the client trusts: the origin's, or the proxy's when ``proxy_port`` is set."""
    proxy_port: int | None = None
    proxy_host: str = "127.0.0.1"


@dataclass(frozen=True)
class Rate:
    requests: int
    seconds: float
    cpu: float | None = None
    """CPU seconds the watched process used meanwhile (user + system, all threads)."""
    client_cpu: float = 0.0
    """CPU seconds this client used meanwhile."""

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds

    @property
    def per_cpu_second(self) -> float | None:
        """Requests per CPU second of the watched process: its capacity, less noisy."""
        return None if not self.cpu else self.requests / self.cpu


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU time of process ``pid`` so far (all its threads; with ``tid``, only
    that thread's)."""
    stat = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Counter:
    def __init__(self, limit: int | None) -> None:
        self.done = 0
        self.limit = limit
        self.issued = 0
        self.stop = False

    def take(self) -> bool:
        if self.stop or (self.limit is not None and self.issued >= self.limit):
            return False
        self.issued += 1
        return True


async def _open(
    target: Target, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    origin = f"{target.origin_host}:{target.origin_port}"
    if target.proxy_port is None:
        return await asyncio.open_connection(
            target.origin_host, target.origin_port, ssl=context, server_hostname=target.origin_host
        )
    reader, writer = await asyncio.open_connection(target.proxy_host, target.proxy_port)
    writer.write(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if head.split(b" ", 2)[1:2] != [b"200"]:
        raise LoadError(f"CONNECT {origin} via port {target.proxy_port}: {head[:80]!r}")
    await writer.start_tls(context, server_hostname=target.origin_host)
    return reader, writer


async def _worker(
    index: int, target: Target, context: ssl.SSLContext, counter: _Counter, ready: asyncio.Barrier
) -> None:
    reader, writer = await _open(target, context)
    host = f"{target.origin_host}:{target.origin_port}"
    requests = [
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: proxy_bench\r\n\r\n".encode()
        for path in target.paths
    ]
    turn = index
    try:
        await ready.wait()
        while counter.take():
            writer.write(requests[turn % len(requests)])
            turn += 1
            head = await reader.readuntil(b"\r\n\r\n")
            status = head[9:12]
            length = _content_length(head)
            body = await reader.readexactly(length)
            if status != b"200" or len(body) != target.body_size:
                raise LoadError(
                    f"{target.paths[(turn - 1) % len(target.paths)]}: status {status.decode()}, "
                    f"{length} bytes instead of {target.body_size}: {body[:200]!r}"
                )
            counter.done += 1
    finally:
        writer.close()


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at < 0:
        raise LoadError(f"answer without content-length: {head[:200]!r}")
    end = lower.index(b"\r\n", at + 2)
    return int(lower[at + 17 : end])


def _cpu(pid: int | None) -> float:
    return 0.0 if pid is None else cpu_seconds(pid)


def _context(target: Target) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(target.trust))
    context.set_alpn_protocols(["http/1.1"])
    return context


async def _run(
    target: Target,
    *,
    connections: int,
    limit: int | None,
    warmup: float,
    duration: float,
    watch: int | None,
) -> Rate:
    context = _context(target)
    counter = _Counter(limit)
    ready = asyncio.Barrier(connections + 1)
    workers = [
        asyncio.create_task(_worker(i, target, context, counter, ready)) for i in range(connections)
    ]
    try:
        await _all_connected(ready, workers)
        if limit is None:
            await asyncio.sleep(warmup)
        done, start, cpu, own = counter.done, time.perf_counter(), _cpu(watch), time.process_time()
        if limit is None:
            await asyncio.sleep(duration)
        else:
            await asyncio.gather(*workers)
        rate = Rate(
            requests=counter.done - done,
            seconds=time.perf_counter() - start,
            cpu=_cpu(watch) - cpu,
            client_cpu=time.process_time() - own,
        )
        counter.stop = True
        async with asyncio.timeout(30):
            await asyncio.gather(*workers)  # every worker finishes its request in flight
        return rate
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def _all_connected(ready: asyncio.Barrier, workers: list[asyncio.Task[None]]) -> None:
    """Wait until every connection is open with TLS up; raise the first failure to connect."""
    waiting = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait(
        [waiting, *workers], timeout=60, return_when=asyncio.FIRST_COMPLETED
    )
    if waiting in done:
        return
    waiting.cancel()
    for worker in done:
        worker.result()  # raises what went wrong
    raise LoadError("the connections were not all open within 60 s")


def measure_rate(
    target: Target,
    *,
    connections: int = 32,
    warmup: float = 1.0,
    duration: float = 3.0,
    watch: int | None = None,
) -> Rate:
    """Requests per second over ``duration`` seconds, after ``warmup`` with all connections up.

    With ``watch``, also the CPU time process ``watch`` (the proxy) used in those seconds.
    """
    return asyncio.run(
        _run(
            target,
            connections=connections,
            limit=None,
            warmup=warmup,
            duration=duration,
            watch=watch,
        )
    )


def run_requests(
    target: Target, count: int, *, connections: int = 32, watch: int | None = None
) -> Rate:
    """Exactly ``count`` requests (over fresh connections, set-up not timed); how long they took."""
    return asyncio.run(
        _run(target, connections=connections, limit=count, warmup=0.0, duration=0.0, watch=watch)
    )


# ------------------------------------------------------------------------------------ large bodies


@dataclass(frozen=True)
class Download:
    size: int
    seconds: float
    http_version: str
    """What curl negotiated with the proxy (or origin): ``1.1`` or ``2``."""

    @property
    def megabytes_per_second(self) -> float:
        return self.size / self.seconds / 1e6


def curl_download(
    url: str,
    *,
    trust: Path,
    expected_size: int,
    proxy: str | None = None,
    http2: bool = False,
    max_seconds: float = 300,
) -> Download:
    """GET ``url`` with curl into /dev/null; fails unless it got 200 and ``expected_size`` bytes."""
    argv = ["curl", "--silent", "--show-error", "--output", "/dev/null", "--cacert", str(trust)]
    argv += ["--http2" if http2 else "--http1.1", "--max-time", str(int(max_seconds))]
    argv += ["--write-out", "%{http_code} %{size_download} %{time_total} %{http_version}"]
    if proxy is not None:
        argv += ["--proxy", proxy]
    env = clean_env()
    done = subprocess.run(
        [*argv, url], capture_output=True, env=env, timeout=max_seconds + 30, check=False
    )
    fields = done.stdout.decode().split()
    if done.returncode != 0 or len(fields) != 4 or fields[0] != "200":
        raise LoadError(
            f"curl {url} (proxy {proxy}, {'HTTP/2' if http2 else 'HTTP/1.1'}): exit "
            f"{done.returncode}, {done.stdout.decode()!r} {done.stderr.decode().strip()}"
        )
    size = int(fields[1])
    if size != expected_size:
        raise LoadError(f"curl {url}: {size} bytes instead of {expected_size}")
    return Download(size=size, seconds=float(fields[2]), http_version=fields[3])


@dataclass(frozen=True)
class Batch:
    requests: int
    seconds: float
    connections: int
    """TCP connections curl opened (to the proxy, or the origin)."""
    http_versions: frozenset[str]

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds


def curl_many(
    urls: Sequence[str],
    *,
    trust: Path,
    expected_size: int,
    config: Path,
    proxy: str | None = None,
    http2: bool = False,
    parallel: int = 32,
    max_seconds: float = 300,
) -> Batch:
    """GET every URL with one ``curl --parallel`` (HTTP/2: multiplexed on one connection).

    Fails unless every answer is 200 with ``expected_size`` bytes.
    """
    config.write_text("".join(f'url = "{url}"\noutput = "/dev/null"\n' for url in urls))
    argv = ["curl", "--silent", "--show-error", "--no-progress-meter", "--cacert", str(trust)]
    argv += ["--parallel", "--parallel-max", str(parallel), "--http2" if http2 else "--http1.1"]
    argv += ["--max-time", str(int(max_seconds)), "--config", str(config)]
    argv += ["--write-out", "%{http_code} %{size_download} %{http_version} %{num_connects}\n"]
    if proxy is not None:
        argv += ["--proxy", proxy]
    env = clean_env()
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, timeout=max_seconds + 30, check=False)
    seconds = time.perf_counter() - start
    lines = done.stdout.decode().split()
    answers = [lines[i : i + 4] for i in range(0, len(lines), 4)]
    wrong = [a for a in answers if a[:2] != ["200", str(expected_size)]]
    if done.returncode != 0 or len(answers) != len(urls) or wrong:
        raise LoadError(
            f"curl --parallel ({len(urls)} URLs, proxy {proxy}): exit {done.returncode}, "
            f"{len(answers)} answers, wrong: {wrong[:3]} {done.stderr.decode().strip()[:300]}"
        )
    return Batch(
        requests=len(urls),
        seconds=seconds,
        connections=sum(int(a[3]) for a in answers),
        http_versions=frozenset(a[2] for a in answers),
    )
