"""Measure fetchproxy's proxy against mitmproxy's own limits, side by side in one run.

    python bench/proxy_bench.py            # quick: about 2 minutes on 2 CPUs
    python bench/proxy_bench.py --full     # the full sizes: 200 MB, 1 GiB, 20,000 hits (~8 min)
    python bench/proxy_bench.py --only large --only legs --large 500MB

Everything runs on 127.0.0.1 in processes this script starts and stops by PID: an HTTPS origin
(nginx with a config in the work directory, or a Python stand-in without nginx), ``fetchproxy
serve record|replay`` and ``mitmdump``. Every proxy presents certificates of one CA; the origin
has its own, which the proxies trust upstream. Numbers are medians over ``--rounds`` rounds;
ratios compare with the reference measured in the same round (median of per-round ratios).
Proxy CPU seconds come from ``/proc/PID/stat`` and are less sensitive to other load than req/s.
The report (Markdown tables, then one verdict per speed target) goes to stdout, progress
to stderr. See docs/benchmarks.md for the method and the numbers.

1. ``small``: 1 KiB HTTPS hits, 32 keep-alive connections through CONNECT (an asyncio client):
   fetchproxy replay against the ceiling, mitmdump with an addon that answers every request
   itself (same mitmproxy, same TLS interception, no lookup). Target ≥ 90 %. Also: the client
   alone against the origin (it must be far faster than any proxy), mitmdump forwarding,
   fetchproxy record.
   1b. ``curl``: the same hits with ``curl --parallel``, HTTP/1.1 (32 connections) against
   HTTP/2 (one multiplexed connection) between client and proxy.
2. ``large``: a ``--large`` body with curl, HTTP/1.1 and HTTP/2 between client and proxy:
   fetchproxy replay and record against mitmdump streaming the same origin
   (``stream_large_bodies=1``). Target ≥ 90 %. nginx direct is the physical limit.
   2b. ``legs``: mitmdump streaming with the protocol of each leg (client, origin) fixed.
3. ``huge``: peak RSS (``VmHWM``) of a fresh process moving one ``--huge`` body: fetchproxy
   record, fetchproxy replay (cold: its first fetch verifies the blob), mitmdump for reference.
   Target ≤ 120 MB.
4. ``flat``: RSS of a fresh replay process after 1,000, half of and all ``--requests`` hits,
   beside the ceiling's. Target: flat.

Sizes: KiB/MiB/GiB are binary, kB/MB/GB decimal; rates are MB/s = 10**6 bytes per second.
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
from proxybench.memory import bench_flat, bench_huge
from proxybench.rig import Options, Rig, make_rig, origin_version, record_fixture
from proxybench.rounds import Report, parse_size, say
from proxybench.systems import Services
from proxybench.throughput import CPUS, bench_large, bench_legs, bench_small, bench_small_curl

STEPS = {
    "small": bench_small,
    "curl": bench_small_curl,
    "large": bench_large,
    "legs": bench_legs,
    "huge": bench_huge,
    "flat": bench_flat,
}


def parse_args(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description="fetchproxy's proxy against mitmproxy, side by side (see the docstring)."
    )
    add = parser.add_argument
    add(
        "--full",
        action="store_true",
        help="the full sizes: --large 200MB --huge 1GiB "
        "--requests 20000 --rounds 5 --duration 5, HTTP/2 in table 3 too",
    )
    add("--rounds", type=int, help="rounds per measurement (quick 3, full 5)")
    add("--duration", type=float, help="seconds per 1 KiB measurement (quick 2, full 5)")
    add("--warmup", type=float, default=1.0, help="seconds of load before measuring")
    add("--connections", type=int, default=32, help="concurrent connections (or curl transfers)")
    add("--curl-requests", type=int, help="requests per curl --parallel (quick 1500, full 3000)")
    add("--requests", type=int, help="hits for table 4 (quick 5000, full 20000)")
    add("--large", type=parse_size, help="the body of table 2 (quick 100MB, full 200MB)")
    add("--huge", type=parse_size, help="the body of table 3 (quick 256MiB, full 1GiB)")
    add("--files", type=int, default=64, help="distinct 1 KiB files")
    add(
        "--origin",
        choices=("nginx", "python"),
        default="nginx",
        help="the HTTPS origin (python: the stand-in used when nginx is not installed)",
    )
    add("--http1-only", action="store_true", help="leave out every HTTP/2 row")
    add("--only", choices=tuple(STEPS), action="append", help="run only these tables")
    add("--dir", type=Path, help="where to make the work directory (default: the temp dir)")
    add("--keep", action="store_true", help="keep the work directory (logs, locks, stores)")
    add("--time-limit", type=int, default=1800, help="give up after this many seconds")
    args = parser.parse_args(argv)
    full = args.full
    protocols = ("HTTP/1.1",) if args.http1_only else ("HTTP/1.1", "HTTP/2")
    opts = Options(
        rounds=args.rounds or (5 if full else 3),
        duration=args.duration or (5.0 if full else 2.0),
        warmup=args.warmup,
        connections=args.connections,
        curl_requests=args.curl_requests or (3000 if full else 1500),
        requests=args.requests or (20000 if full else 5000),
        large=args.large or (200 * 10**6 if full else 100 * 10**6),
        huge=args.huge or ((1 << 30) if full else (256 << 20)),
        files=args.files,
        protocols=protocols,
        huge_protocols=protocols if full else ("HTTP/1.1",),
    )
    return opts, args


def environment(opts: Options, rig: Rig, seconds: float) -> str:
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True, check=False)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return (
        f"proxy_bench: {platform.python_implementation()} {platform.python_version()}, "
        f"mitmproxy {version('mitmproxy')}, origin {origin_version(rig)}, "
        f"{' '.join(curl.stdout.split()[:2])}, {CPUS} CPUs ({platform.machine()}); "
        f"{opts.rounds} rounds; load average at the end {load}; took {seconds:.0f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    opts, args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="proxy-bench-", dir=args.dir))
    started = time.perf_counter()
    out = Report()
    try:
        with time_limit(args.time_limit), Services(work) as services:
            say(f"work directory {work}")
            rig = make_rig(
                services,
                work,
                large=opts.large,
                huge=opts.huge,
                files=opts.files,
                nginx=args.origin == "nginx",
            )
            say("recording the fixture: the small files, the large and the huge body")
            record_fixture(services, rig)
            for name in args.only or STEPS:
                STEPS[name](services, rig, opts, out)
            header = environment(opts, rig, time.perf_counter() - started)
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(header)
    print("\n".join(out.lines))
    if out.targets:
        print("\n### Targets\n")
        print("\n".join(out.targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
