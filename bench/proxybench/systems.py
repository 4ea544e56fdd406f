"""The processes the benchmark measures, started on 127.0.0.1 and stopped by their PID only.

:class:`Services` owns every process it started and stops whatever is still running when its
``with`` block ends (SIGTERM, then SIGKILL after a grace period), so an error or Ctrl-C leaves
nothing behind. Memory comes from ``/proc/PID/status`` (``VmRSS``, ``VmHWM``).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from fetchproxy.ca import ensure_persistent_ca, generate_ca, persistent_ca_dir

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
PORT_POLL = 0.005
"""Seconds between attempts to connect to a starting server's port."""
_HERE = Path(__file__).resolve().parent
ANSWER_EVERYTHING = _HERE / "answer_everything.py"
UPSTREAM_ALPN = _HERE / "upstream_alpn.py"
STATIC_ORIGIN = _HERE / "static_origin.py"


class ServiceError(RuntimeError):
    """A process the benchmark needs did not start or misbehaved."""


def nginx_binary() -> str | None:
    """Where nginx is installed (``PATH``, then the usual sbin directories), or None."""
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for servers that need one given)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Memory:
    rss: int
    """Resident set size now, in bytes."""
    peak: int
    """The high-water mark of the resident set, in bytes."""


def memory_of(pid: int) -> Memory:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in {"VmRSS", "VmHWM"}:
            fields[name] = int(value.split()[0]) * 1024
    return Memory(rss=fields["VmRSS"], peak=fields["VmHWM"])


class Service:
    """One process the benchmark started."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log
        self.url = ""
        """The proxy URL (``http://127.0.0.1:PORT``) or the origin's base URL."""
        self.port = 0
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def memory(self) -> Memory:
        return memory_of(self.pid)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if not self.stopped and self.popen.poll() is not None:
            raise ServiceError(
                f"{self.name} (pid {self.pid}) exited with status {self.popen.returncode}:\n"
                f"{self.log_tail()}"
            )

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, wait (SIGKILL after ``timeout``); the exit status."""
        if self.popen.returncode is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.stopped = True
        return self.popen.returncode


class Services:
    """Starts the benchmark's processes and stops every one of them at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[Service] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for service in reversed(self.started):
            if not service.stopped:
                service.stop(timeout=10)

    def _spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        stdout: bool = False,
    ) -> Service:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as log_file:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdout else log_file,
                stderr=log_file,
                env=env if env is not None else clean_env(),
                cwd=self.workdir,
            )
        service = Service(name, popen, log)
        self.started.append(service)
        return service

    # ---------------------------------------------------------------------------------- origins

    def start_nginx(self, *, root: Path, pki: OriginPKI, name: str = "nginx") -> Service | None:
        """nginx serving ``root`` over HTTPS (HTTP/1.1 and HTTP/2), or None if not installed.

        ``name`` names its log and its directory in the work directory: one per nginx process.
        """
        binary = nginx_binary()
        if binary is None:
            return None
        port = free_port()
        home = self.workdir / name
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        temp_paths = "\n".join(
            f"  {kind}_temp_path {home}/tmp/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        config = home / "nginx.conf"
        config.write_text(
            f"""daemon off;
master_process off;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temp_paths}
  default_type application/octet-stream;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  server {{
    listen {LOOPBACK}:{port} ssl http2;
    ssl_certificate {pki.cert};
    ssl_certificate_key {pki.key};
    root {root};
  }}
}}
"""
        )
        service = self._spawn(name, [binary, "-e", str(home / "error.log"), "-c", str(config)])
        return self._await_port(service, port, scheme="https")

    def start_static_origin(self, *, root: Path, pki: OriginPKI) -> Service:
        """The Python origin (HTTP/1.1 only), when nginx is not installed."""
        port = free_port()
        service = self._spawn(
            "static-origin",
            [
                sys.executable,
                str(STATIC_ORIGIN),
                "--port",
                str(port),
                "--root",
                str(root),
                "--cert",
                str(pki.cert),
                "--key",
                str(pki.key),
            ],
        )
        return self._await_port(service, port, scheme="https")

    # ---------------------------------------------------------------------------------- proxies

    def start_fetchproxy(
        self,
        name: str,
        mode: str,
        *,
        lock: Path,
        store: Path,
        upstream_ca: Path,
        data_home: Path,
        http2: bool = False,
        source: Path | None = None,
    ) -> Service:
        """``fetchproxy serve MODE --listen 127.0.0.1:0``, its CA under ``data_home``.

        ``http2`` adds ``--http2`` (replay then runs on mitmproxy instead of the direct server);
        ``source`` runs the fetchproxy of that source tree (a checkout) instead of this one.
        ``upstream_ca`` (the origin's CA) is passed to record only.
        """
        env = clean_env()
        env["XDG_DATA_HOME"] = str(data_home)
        if source is not None:
            env["PYTHONPATH"] = str(source)
        argv = [sys.executable, "-m", "fetchproxy", "serve", mode, "--listen", f"{LOOPBACK}:0"]
        argv += ["--lock", str(lock), "--store", str(store), "--log", str(lock) + ".events"]
        if mode == "record":  # replay connects to nothing upstream
            argv += ["--upstream-ca", str(upstream_ca)]
        argv += ["--http2"] if http2 else []
        return self.start_announcing(name, argv, env=env, prefix="fetchproxy: listening on ")

    def start_mitmdump(
        self,
        name: str,
        *,
        confdir: Path,
        upstream_ca: Path,
        script: Path | None = None,
        stream: bool = False,
        options: Sequence[str] = (),
    ) -> Service:
        """``mitmdump -q`` with fetchproxy's CA (its confdir) and a lazy connection strategy.

        ``stream`` streams every body (``stream_large_bodies=1``); ``script`` loads an addon;
        ``options`` are more ``--set`` values.
        """
        port = free_port()
        argv = [
            str(Path(sys.executable).with_name("mitmdump")),
            "-q",
            "--listen-host",
            LOOPBACK,
            "--listen-port",
            str(port),
            "--set",
            f"confdir={confdir}",
            "--set",
            "connection_strategy=lazy",
            "--set",
            f"ssl_verify_upstream_trusted_ca={upstream_ca}",
            "--set",
            "http3=false",
        ]
        if stream:
            argv += ["--set", "stream_large_bodies=1"]
        if script is not None:
            argv += ["-s", str(script)]
        for option in options:
            argv += ["--set", option]
        service = self._spawn(name, argv)
        return self._await_port(service, port, scheme="http")

    def start_announcing(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        prefix: str = "listening on ",
        timeout: float = START_TIMEOUT,
    ) -> Service:
        """A server that prints ``PREFIX + URL`` as its first line on stdout once it serves."""
        service = self._spawn(name, argv, env=env, stdout=True)
        line = _read_line(service, timeout)
        if not line.startswith(prefix):
            service.stop(timeout=5)
            raise ServiceError(f"{name}: unexpected first line {line!r}:\n{service.log_tail()}")
        service.url = line.removeprefix(prefix).strip()
        service.port = int(service.url.rsplit(":", 1)[1])
        return service

    def _await_port(self, service: Service, port: int, *, scheme: str) -> Service:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            service.check_alive()
            try:
                socket.create_connection((LOOPBACK, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    service.stop(timeout=5)
                    raise ServiceError(
                        f"{service.name} did not listen on {LOOPBACK}:{port} within "
                        f"{START_TIMEOUT:.0f} s:\n{service.log_tail()}"
                    ) from None
                time.sleep(PORT_POLL)
        service.port = port
        service.url = f"{scheme}://{LOOPBACK}:{port}"
        return service


def _read_line(service: Service, timeout: float) -> str:
    stdout = service.popen.stdout
    assert stdout is not None
    ready, _, _ = select.select([stdout], [], [], timeout)
    if not ready:
        service.stop(timeout=5)
        raise ServiceError(
            f"{service.name} printed nothing within {timeout:.0f} s:\n{service.log_tail()}"
        )
    line = stdout.readline().decode(errors="replace")
    if not line:
        service.check_alive()
    return line


def clean_env() -> dict[str, str]:
    """The environment without proxy variables (every client here names its proxy itself)."""
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


# ------------------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class OriginPKI:
    ca_cert: Path
    cert: Path
    key: Path


def make_origin_pki(directory: Path) -> OriginPKI:
    """A CA of the origin's own and a certificate it signed for 127.0.0.1."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = generate_ca("proxy_bench origin CA")
    cert_pem, key_pem = ca.issue_server_certificate([LOOPBACK, "localhost"])
    pki = OriginPKI(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    pki.ca_cert.write_bytes(ca.cert_pem)
    pki.cert.write_bytes(cert_pem)
    pki.key.write_bytes(key_pem)
    pki.key.chmod(0o600)
    return pki


def fetchproxy_ca(data_home: Path) -> tuple[Path, Path]:
    """The confdir and certificate of the CA ``fetchproxy serve`` uses with ``data_home``.

    mitmdump gets the same confdir, so every proxy in the run presents certificates of one CA.
    """
    confdir = persistent_ca_dir({"XDG_DATA_HOME": str(data_home)})
    return confdir, ensure_persistent_ca(confdir)
