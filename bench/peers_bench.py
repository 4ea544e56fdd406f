"""fetchproxy against the tools people would pick instead, side by side in one run.

    python bench/peers_bench.py              # quick (the default): 100 MB body, 3 rounds, ~3-4 min
    python bench/peers_bench.py --full       # the full sizes: a 500 MB body, 5 rounds
    python bench/peers_bench.py --only hits --only start --rounds 5

Systems, each recording the same origin once and then replaying it (see proxybench/peers.py):
fetchproxy replay; mitmdump --server-replay (flows recorded with mitmdump -w); proxay and talkback
from the npm registry, installed by this script with npm into its work directory (reverse
proxies: the client asks them for the origin's paths over HTTPS); nginx serving the same files
directly, the physical limit. Where a system cannot do a case (it is not installed, its recording
failed, it crashed), its row says so and why.

Workloads: (a) ``--requests`` (2,000) GETs of 1 KiB bodies over HTTPS on ``--connections`` (32)
keep-alive connections; (b) one ``--large`` body over HTTPS with curl, and a ``--medium`` one
small enough for the peers that keep bodies in their tapes as text; (c) the peak RSS of each
server during (b); (d) the time from process start to its first served request. Then record
mode: fetchproxy record against mitmdump's streaming pass-through on (a) and (b).

Everything runs on 127.0.0.1 in processes started and stopped by PID; the work directory (npm
packages, files, recordings, logs) is removed at the end unless ``--keep``. Numbers are medians
over ``--rounds`` rounds with the systems interleaved; each ratio compares with fetchproxy in the
same round. Markdown tables and one verdict per target against peers go to stdout, progress to
stderr. Results and method: docs/benchmarks.md, "Against peers".
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from proxybench.deadline import time_limit
from proxybench.peers import Arena, Body, NodePeers, contenders, install_node_peers
from proxybench.record_mode import bench_record
from proxybench.recordings import record_fixtures
from proxybench.rig import Rig, make_rig, origin_version
from proxybench.rounds import Report, human, parse_size, say
from proxybench.systems import Services
from proxybench.throughput import CPUS
from proxybench.versus import PeerOptions, bench_bodies, bench_hits, bench_start

STEPS = ("hits", "bodies", "start", "record")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="fetchproxy against mitmdump, proxay, talkback and nginx (see the docstring)."
    )
    add = parser.add_argument
    add("--full", action="store_true", help="the full sizes: --large 500MB --rounds 5")
    add("--quick", action="store_true", help="the default: --large 100MB --rounds 3")
    add("--rounds", type=int, help="rounds per measurement (quick 3, full 5)")
    add("--requests", type=int, default=2000, help="1 KiB requests per measurement of (a)")
    add("--connections", type=int, default=32, help="concurrent keep-alive connections in (a)")
    add("--large", type=parse_size, help="the body of (b) and (c) (quick 100MB, full 500MB)")
    add(
        "--medium",
        type=parse_size,
        default=20 * 10**6,
        help="a second body for (b), small enough for proxay and talkback (0: leave it out)",
    )
    add(
        "--record-timeout",
        type=float,
        default=180,
        help="seconds a system may take to record one body before it counts as unable",
    )
    add(
        "--node-heap",
        type=int,
        metavar="MB",
        help="node's --max-old-space-size for proxay and talkback (default: node's own limit)",
    )
    add("--only", choices=STEPS, action="append", help="run only these parts")
    add("--dir", type=Path, help="where to make the work directory (default: the temp dir)")
    add("--keep", action="store_true", help="keep the work directory (logs, recordings)")
    add("--time-limit", type=int, default=1800, help="give up after this many seconds")
    args = parser.parse_args(argv)
    if args.full and args.quick:
        parser.error("--full and --quick exclude each other")
    args.rounds = args.rounds or (5 if args.full else 3)
    args.large = args.large or (500 * 10**6 if args.full else 100 * 10**6)
    return args


def environment(peers: NodePeers, rig: Rig, args: argparse.Namespace, seconds: float) -> str:
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True, check=False)
    node = f"node {peers.node.removeprefix('v')}" if peers.node else "no node"
    if args.node_heap:
        node += f" --max-old-space-size={args.node_heap}"
    npm = ", ".join(f"{name} {number}" for name, number in sorted(peers.versions.items()))
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return (
        f"peers_bench: {platform.python_implementation()} {platform.python_version()}, "
        f"mitmproxy {version('mitmproxy')}, {origin_version(rig)}"
        f", {node} ({npm or peers.problem}), {' '.join(curl.stdout.split()[:2])}, {CPUS} CPUs "
        f"({platform.machine()}); {args.rounds} rounds; load average at the end {load}; "
        f"took {seconds:.0f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    steps = args.only or STEPS
    opts = PeerOptions(
        rounds=args.rounds,
        requests=args.requests,
        connections=args.connections,
        record_timeout=args.record_timeout,
    )
    work = Path(tempfile.mkdtemp(prefix="peers-bench-", dir=args.dir))
    started = time.perf_counter()
    out = Report()
    try:
        with time_limit(args.time_limit), Services(work) as services:
            say(f"work directory {work}")
            say("npm install proxay talkback (into the work directory)")
            peers = install_node_peers(work / "npm")
            if peers.problem:
                say(f"proxay and talkback: {peers.problem}: {peers.detail}")
            rig = make_rig(services, work, large=args.large, huge=0, files=64)
            bodies = [Body("large", args.large)]
            if args.medium:
                bodies.append(Body("medium", args.medium))
            arena = Arena(services, rig, tuple(bodies))
            for body in bodies[1:]:
                arena.write_body(body)
            systems = contenders(arena, peers, args.node_heap)
            if set(steps) - {"record"}:
                record_fixtures(arena, systems, opts, out)
            if "start" in steps:
                bench_start(arena, systems, opts, out)
            if "hits" in steps:
                bench_hits(arena, systems, opts, out)
            if "bodies" in steps:
                bench_bodies(arena, systems, opts, out)
            if "record" in steps:
                bench_record(arena, opts, out)
            header = environment(peers, rig, args, time.perf_counter() - started)
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(header)
    print(f"(b) bodies: {', '.join(human(body.size) for body in bodies)}")
    print("\n".join(out.lines))
    if out.targets:
        print("\n### Targets against peers\n")
        print("\n".join(out.targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
