"""The systems ``bench/peers_bench.py`` compares, each recording the same origin and replaying it.

- **fetchproxy replay**: ``fetchproxy serve record`` once per workload, then ``serve replay``; a
  forward proxy (``CONNECT``, TLS interception with its own CA).
- **mitmdump --server-replay**: flows recorded once with ``mitmdump -w`` (``save_stream_file``)
  from the same origin, replayed with ``server_replay_extra=kill``, ``server_replay_reuse=true``
  (each flow answers every repeat of its request) and ``connection_strategy=lazy``.
- **proxay** and **talkback**: record/replay proxies from the npm registry, installed with npm into
  the work directory and run by ``node_peers.js`` in record mode, then in replay mode. They are
  reverse proxies: the client asks them for the origin's paths, over HTTPS with the origin's own
  certificate (both can serve HTTPS; neither does ``CONNECT`` or interception).
- **nginx**: the origin's files served directly, a fresh nginx process each time: the physical
  limit.

Every workload (the 1 KiB files, and each large body) has its own recording, so a system that
cannot record one body still serves the others. A recording that fails (a crash, running out of
memory, taking longer than allowed) marks that workload "cannot" with the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from proxybench.loadgen import Target
from proxybench.rig import SMALL, Rig, write_file
from proxybench.systems import LOOPBACK, Service, ServiceError, Services, clean_env

NODE_PEERS = Path(__file__).resolve().parent / "node_peers.js"
NPM_PACKAGES = ("proxay", "talkback")
SMALL_FILES = "small"
"""The workload key of the 1 KiB files (a body's key is its file name without ``.bin``)."""


# ------------------------------------------------------------------------------------ npm peers


NOT_INSTALLED = "not installed"


@dataclass(frozen=True)
class NodePeers:
    """proxay and talkback as npm installed them, or why they are not there."""

    modules: Path | None
    """The ``node_modules`` directory, or None if the install failed."""
    versions: dict[str, str]
    node: str = ""
    """``node --version``."""
    problem: str = ""
    """Why they are not installed, short enough for a table cell ("" if they are)."""
    detail: str = ""
    """What npm said."""


def install_node_peers(directory: Path, timeout: float = 300) -> NodePeers:
    """``npm install --prefix DIRECTORY proxay talkback``; never raises, says what went wrong."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = "node" if node is None else "npm"
        return NodePeers(None, {}, problem=f"{NOT_INSTALLED} ({missing} not found)")
    found = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    version = found.stdout.strip()
    argv = [npm, "install", "--prefix", str(directory), "--no-audit", "--no-fund"]
    argv += ["--fetch-retries=1", "--fetch-timeout=60000", *NPM_PACKAGES]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        problem = f"{NOT_INSTALLED} (`npm install` took more than {timeout:.0f} s)"
        return NodePeers(None, {}, version, problem)
    modules = directory / "node_modules"
    versions = {}
    for package in NPM_PACKAGES:
        try:
            meta = json.loads((modules / package / "package.json").read_text())
        except (OSError, ValueError):
            continue
        versions[package] = str(meta.get("version", "?"))
    if done.returncode == 0 and len(versions) == len(NPM_PACKAGES):
        return NodePeers(modules, versions, version)
    said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    code = next((line.split()[-1] for line in said if line.startswith("npm error code")), None)
    detail = next((line for line in said if "Error" in line), " / ".join(said[-3:]))
    problem = f"{NOT_INSTALLED} (`npm install` failed: {code or f'exit {done.returncode}'})"
    return NodePeers(None, versions, version, problem, detail[:300])


# ------------------------------------------------------------------------------------ contenders


@dataclass(frozen=True)
class Body:
    key: str
    size: int

    @property
    def path(self) -> str:
        return f"/{self.key}.bin"


@dataclass
class Contender:
    """One system: how to start it recording and serving a workload, and what it cannot do."""

    name: str
    how: str
    """How it is run: the "mode/how" column."""
    forward: bool
    """A forward proxy (the client sends ``CONNECT``) rather than a server the client asks."""
    recorder: Callable[[str], Service] | None
    """Start a process recording a workload (None: nothing to record, e.g. nginx)."""
    server: Callable[[str], Service]
    """Start a process serving a workload (replaying its recording)."""
    cannot: dict[str, str] = field(default_factory=dict)
    """Workload key (its recording) or measurement → why this system cannot do it."""
    recording: str = ""
    """How it records, for the table of recordings."""
    recorded: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Workload key → seconds the recording client took, the recorder's peak RSS."""

    def can(self, key: str) -> bool:
        return key not in self.cannot

    def why_not(self, *keys: str) -> str | None:
        """Why this system cannot do the first of ``keys`` it cannot do, or None."""
        return next((self.cannot[key] for key in keys if key in self.cannot), None)


class Arena:
    """The run's origin and files, and where each contender keeps its recordings."""

    def __init__(self, services: Services, rig: Rig, bodies: tuple[Body, ...]) -> None:
        self.services = services
        self.rig = rig
        self.bodies = bodies
        self._serial = itertools.count(1)

    def name(self, prefix: str) -> str:
        """A process name (and log file name) not used before in this run."""
        return f"{prefix}-{next(self._serial)}"

    def small_target(self, contender: Contender, service: Service) -> Target:
        if contender.forward:
            return self.rig.small_target(service)
        return Target(
            origin_host=LOOPBACK,
            origin_port=service.port,
            paths=self.rig.small_paths,
            body_size=SMALL,
            trust=self.rig.pki.ca_cert,
        )

    def body_request(
        self, contender: Contender, service: Service, body: Body
    ) -> tuple[str, Path, str | None]:
        """(URL, CA to trust, proxy URL or None) for curl to fetch ``body`` from ``service``."""
        if contender.forward:
            return self.rig.url(body.path), self.rig.proxy_ca, service.url
        return f"https://{LOOPBACK}:{service.port}{body.path}", self.rig.pki.ca_cert, None

    def write_body(self, body: Body) -> None:
        write_file(self.rig.work / "www" / f"{body.key}.bin", body.size)


def fetchproxy_contender(arena: Arena) -> Contender:
    home = arena.rig.work / "fetchproxy"

    def start(mode: str) -> Callable[[str], Service]:
        def run(key: str) -> Service:
            (home / key).mkdir(parents=True, exist_ok=True)
            return arena.services.start_fetchproxy(
                arena.name(f"fetchproxy-{mode}-{key}"),
                mode,
                lock=home / key / "fetchproxy.lock.toml",
                store=home / "store",
                upstream_ca=arena.rig.pki.ca_cert,
                data_home=arena.rig.data_home,
            )

        return run

    return Contender(
        name="fetchproxy replay",
        how="forward proxy: CONNECT + TLS interception",
        forward=True,
        recorder=start("record"),
        server=start("replay"),
        recording="`fetchproxy serve record`",
    )


def mitmdump_contender(arena: Arena) -> Contender:
    home = arena.rig.work / "mitmdump"
    home.mkdir(exist_ok=True)
    rig = arena.rig

    def recorder(key: str) -> Service:
        return arena.services.start_mitmdump(
            arena.name(f"mitmdump-record-{key}"),
            confdir=rig.confdir,
            upstream_ca=rig.pki.ca_cert,
            options=[f"save_stream_file={home / key}.flows"],
        )

    def server(key: str) -> Service:
        return arena.services.start_mitmdump(
            arena.name(f"mitmdump-replay-{key}"),
            confdir=rig.confdir,
            upstream_ca=rig.pki.ca_cert,
            options=[
                f"server_replay={home / key}.flows",
                "server_replay_extra=kill",
                "server_replay_reuse=true",
            ],
        )

    return Contender(
        name="mitmdump --server-replay",
        how="forward proxy: CONNECT + TLS interception",
        forward=True,
        recorder=recorder,
        server=server,
        recording="`mitmdump -w` (bodies not streamed)",
    )


def node_contender(
    arena: Arena, tool: str, peers: NodePeers, heap_mb: int | None = None
) -> Contender:
    """proxay or talkback, run by ``node_peers.js``; every workload "cannot" if not installed.

    ``heap_mb`` sets node's ``--max-old-space-size`` (default: node's own limit).
    """
    home = arena.rig.work / tool
    rig = arena.rig

    def start(mode: str) -> Callable[[str], Service]:
        def run(key: str) -> Service:
            if peers.modules is None:
                raise ServiceError(f"{tool} is {peers.problem}")
            (home / key).mkdir(parents=True, exist_ok=True)
            config = home / f"{key}-{mode}.json"
            settings = {"tool": tool, "mode": mode, "tapes": str(home / key)}
            settings |= {"origin": rig.origin.url, "key": str(rig.pki.key)}
            config.write_text(json.dumps(settings | {"cert": str(rig.pki.cert)}))
            env = clean_env()
            env |= {"NODE_PATH": str(peers.modules), "NODE_EXTRA_CA_CERTS": str(rig.pki.ca_cert)}
            if heap_mb is not None:
                env["NODE_OPTIONS"] = f"--max-old-space-size={heap_mb}"
            return arena.services.start_announcing(
                arena.name(f"{tool}-{mode}-{key}"),
                ["node", str(NODE_PEERS), str(config)],
                env=env,
                timeout=300,
            )

        return run

    version = peers.versions.get(tool, "")
    contender = Contender(
        name=f"{tool} {version}".strip(),
        how="reverse proxy: HTTPS to the client, which asks it for the origin's paths; no CONNECT",
        forward=False,
        recorder=start("record"),
        server=start("replay"),
        recording=f"{tool}, record mode",
    )
    if peers.modules is None:
        keys = (SMALL_FILES, *(body.key for body in arena.bodies))
        contender.cannot |= dict.fromkeys(keys, peers.problem)
    return contender


def nginx_contender(arena: Arena) -> Contender:
    rig = arena.rig

    def server(_key: str) -> Service:
        started = arena.services.start_nginx(
            root=rig.work / "www", pki=rig.pki, name=arena.name("nginx-direct")
        )
        if started is None:
            raise ServiceError("nginx is not installed (apt-get install nginx-light)")
        return started

    contender = Contender(
        name="nginx (physical limit)",
        how="the origin itself: HTTPS, no proxy",
        forward=False,
        recorder=None,
        server=server,
    )
    if rig.origin_kind != "nginx":
        keys = (SMALL_FILES, *(body.key for body in arena.bodies))
        contender.cannot |= dict.fromkeys(keys, "not installed: nginx not found")
    return contender


def contenders(arena: Arena, peers: NodePeers, node_heap_mb: int | None = None) -> list[Contender]:
    """fetchproxy first: it is the reference every ratio is taken against."""
    return [
        fetchproxy_contender(arena),
        mitmdump_contender(arena),
        node_contender(arena, "proxay", peers, node_heap_mb),
        node_contender(arena, "talkback", peers, node_heap_mb),
        nginx_contender(arena),
    ]


def why_failed(service: Service | None, error: BaseException, seconds: float) -> str:
    """One line: how the process ended, or the error; and the most telling line of its log."""
    telling = None
    if service is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            service.popen.wait(2)  # a server that crashed mid-answer: let it finish dying
        lines = [line.strip() for line in service.log_tail(60).splitlines() if line.strip()]
        telling = next((line for line in lines if "FATAL ERROR" in line), None)
        telling = telling or next((line for line in reversed(lines) if "Error" in line), None)
    if service is not None and service.popen.poll() is not None:
        ending = f"exited (status {service.popen.returncode}) after {seconds:.0f} s"
    elif telling:
        ending = f"failed after {seconds:.0f} s"
    else:
        ending = " ".join(str(error).split())[:200]
    return f"{ending}: {telling[:200]}" if telling else ending
