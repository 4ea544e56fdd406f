"""One benchmark run's fixture: the files, the origin, the CAs, and the recorded lock and store.

:func:`make_rig` writes the origin's files (``--files`` distinct 1 KiB files, the large and the
huge body), makes the origin's CA and fetchproxy's, and starts the origin. :func:`record_fixture`
records everything once through ``fetchproxy serve record``: the lock and store every replay
proxy of the run serves from.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from proxybench.loadgen import Target, curl_download, run_requests
from proxybench.rounds import say
from proxybench.systems import (
    LOOPBACK,
    OriginPKI,
    Service,
    Services,
    fetchproxy_ca,
    make_origin_pki,
    nginx_binary,
)

SMALL = 1024
LOCK_NAME = "fetchproxy.lock.toml"
CEILING = "ceiling: mitmdump + answer-everything addon"
"""The label of the reference row for 1 KiB hits."""


@dataclass(frozen=True)
class Options:
    """What ``bench/proxy_bench.py`` was asked to measure, and how long."""

    rounds: int
    duration: float
    warmup: float
    connections: int
    curl_requests: int
    requests: int
    large: int
    huge: int
    files: int
    protocols: tuple[str, ...]
    huge_protocols: tuple[str, ...]


@dataclass(frozen=True)
class Rig:
    work: Path
    pki: OriginPKI
    data_home: Path
    """``XDG_DATA_HOME`` of every ``fetchproxy serve``: where its CA is."""
    confdir: Path
    """The CA's directory, also mitmdump's confdir: every proxy presents the same CA."""
    proxy_ca: Path
    origin: Service
    origin_kind: str
    """``nginx`` or ``python``."""
    small_paths: tuple[str, ...]
    large_size: int
    huge_size: int

    @property
    def recorded(self) -> Path:
        """The directory with the lock and store recorded by :func:`record_fixture`."""
        return self.work / "recorded"

    def url(self, path: str) -> str:
        return f"{self.origin.url}{path}"

    def small_target(self, proxy: Service | None) -> Target:
        """The 1 KiB files, through ``proxy`` (or straight from the origin)."""
        return Target(
            origin_host=LOOPBACK,
            origin_port=self.origin.port,
            paths=self.small_paths,
            body_size=SMALL,
            trust=self.pki.ca_cert if proxy is None else self.proxy_ca,
            proxy_port=None if proxy is None else proxy.port,
        )

    def small_urls(self, count: int) -> list[str]:
        return [self.url(self.small_paths[i % len(self.small_paths)]) for i in range(count)]


def origin_version(rig: Rig) -> str:
    """What ``nginx -v`` says (``nginx/1.22.1``), or ``python`` for the stand-in origin."""
    binary = nginx_binary()
    if rig.origin_kind != "nginx" or binary is None:
        return rig.origin_kind
    found = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return found.stderr.strip().removeprefix("nginx version: ")


def write_file(path: Path, size: int) -> None:
    """``size`` random bytes (a 1 MiB block repeated) at ``path``."""
    block = os.urandom(1 << 20)
    with path.open("wb") as out:
        left = size
        while left:
            out.write(block[: min(left, len(block))])
            left -= min(left, len(block))


def make_rig(
    services: Services, work: Path, *, large: int, huge: int, files: int, nginx: bool = True
) -> Rig:
    """Write the files, make the CAs and start the origin (nginx if asked and installed)."""
    www = work / "www"
    (www / "small").mkdir(parents=True)
    small_paths = []
    for index in range(files):
        (www / "small" / f"{index:03d}.bin").write_bytes(os.urandom(SMALL))
        small_paths.append(f"/small/{index:03d}.bin")
    write_file(www / "large.bin", large)
    write_file(www / "huge.bin", huge)
    pki = make_origin_pki(work / "origin-pki")
    data_home = work / "data"
    confdir, proxy_ca = fetchproxy_ca(data_home)
    origin = services.start_nginx(root=www, pki=pki) if nginx else None
    kind = "nginx"
    if origin is None:
        if nginx:
            say("nginx is not installed: the origin is a Python server (HTTP/1.1 only, slower)")
        origin = services.start_static_origin(root=www, pki=pki)
        kind = "python"
    return Rig(
        work=work,
        pki=pki,
        data_home=data_home,
        confdir=confdir,
        proxy_ca=proxy_ca,
        origin=origin,
        origin_kind=kind,
        small_paths=tuple(small_paths),
        large_size=large,
        huge_size=huge,
    )


def start_fetchproxy(
    services: Services,
    rig: Rig,
    name: str,
    mode: str,
    *,
    http2: bool = False,
    source: Path | None = None,
) -> Service:
    """``fetchproxy serve``: replay serves the fixture; record writes a lock of its own.

    ``http2``: with ``--http2`` (HTTP/2 to clients; replay then runs on mitmproxy);
    ``source``: the fetchproxy of that source tree.
    """
    if mode == "replay":
        lock, store = rig.recorded / LOCK_NAME, rig.recorded / "store"
    else:
        (rig.work / name).mkdir(exist_ok=True)
        lock, store = rig.work / name / LOCK_NAME, rig.work / name / "store"
    return services.start_fetchproxy(
        name,
        mode,
        lock=lock,
        store=store,
        upstream_ca=rig.pki.ca_cert,
        data_home=rig.data_home,
        http2=http2,
        source=source,
    )


def record_fixture(services: Services, rig: Rig) -> None:
    """Record the small files and both bodies once: the lock and store replay serves."""
    rig.recorded.mkdir()
    recorder = services.start_fetchproxy(
        "setup-record",
        "record",
        lock=rig.recorded / LOCK_NAME,
        store=rig.recorded / "store",
        upstream_ca=rig.pki.ca_cert,
        data_home=rig.data_home,
    )
    run_requests(rig.small_target(recorder), len(rig.small_paths), connections=1)
    for name, size in (("large.bin", rig.large_size), ("huge.bin", rig.huge_size)):
        curl_download(
            rig.url(f"/{name}"), trust=rig.proxy_ca, expected_size=size, proxy=recorder.url
        )
    if recorder.stop() != 0:
        raise RuntimeError(f"recording the fixture failed:\n{recorder.log_tail()}")


def journal_lines(rig: Rig, service: Service) -> int:
    """Fetches a record proxy started by :func:`start_fetchproxy` has stored so far."""
    journal = rig.work / service.name / f"{LOCK_NAME}.journal"
    try:
        return journal.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def settle_record(rig: Rig, service: Service, before: int, timeout: float = 120) -> None:
    """Wait until a record proxy has stored the fetch a client just finished.

    The client has the last byte before the proxy has committed the blob (fsync, link) and
    journalled the fetch; the next measurement should not overlap that.
    """
    deadline = time.monotonic() + timeout
    while journal_lines(rig, service) <= before:
        service.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{service.name} did not store its fetch within {timeout:.0f} s")
        time.sleep(0.01)
