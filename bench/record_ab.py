"""Record builds side by side: each source tree's ``fetchproxy serve record`` against mitmdump.

    python bench/record_ab.py                                    # this checkout
    python bench/record_ab.py --tree ../before --tree . --rounds 10 --size 200MB

For changes to the record path worth a few percent. Every round downloads the body once
through mitmdump's streaming pass-through and once through each build, in turn, so a drift
in the machine's state (on a VM it drifts by more than such a change) reaches every system
alike. Each build runs from its tree (``PYTHONPATH``) with this interpreter's packages; the
origin is nginx over HTTPS (the Python stand-in without nginx). Per system the report gives
the median MB/s, the median of the per-round ratios to mitmdump (the paired figure to
compare builds by), the proxy's CPU per download (all threads, commit included), the share
of its event-loop thread, and that thread's context switches per download: a voluntary one
is mostly the loop waiting for the GIL while another thread holds it.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proxybench.deadline import time_limit
from proxybench.loadgen import cpu_seconds, curl_download
from proxybench.rig import Rig, journal_lines, make_rig, settle_record, start_fetchproxy
from proxybench.rounds import human, parse_size, row, say
from proxybench.systems import Service, Services

REFERENCE = "mitmdump streaming pass-through"


@dataclass(frozen=True)
class LoopThread:
    """The main thread of a process (a proxy's event loop): CPU and context switches so far."""

    cpu: float
    voluntary: int
    forced: int

    @classmethod
    def of(cls, pid: int) -> LoopThread:
        status_text = Path(f"/proc/{pid}/task/{pid}/status").read_text()
        status = dict(line.split(":", 1) for line in status_text.splitlines() if ":" in line)
        return cls(
            cpu=cpu_seconds(pid, tid=pid),
            voluntary=int(status["voluntary_ctxt_switches"]),
            forced=int(status["nonvoluntary_ctxt_switches"]),
        )


@dataclass
class Samples:
    """One system's downloads: rate, ratio to mitmdump in the same round, CPU, switches."""

    rates: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    loop_cpu: list[float] = field(default_factory=list)
    voluntary: list[int] = field(default_factory=list)
    forced: list[int] = field(default_factory=list)


def download(rig: Rig, service: Service, *, recording: bool) -> tuple[float, Samples]:
    """One download through ``service``: its MB/s and what it cost the proxy."""
    stored = journal_lines(rig, service) if recording else 0
    cpu, before = cpu_seconds(service.pid), LoopThread.of(service.pid)
    got = curl_download(
        rig.url("/large.bin"), trust=rig.proxy_ca, expected_size=rig.large_size, proxy=service.url
    )
    if recording:
        settle_record(rig, service, stored)  # committed and journalled: its CPU is counted
    after = LoopThread.of(service.pid)
    cost = Samples(
        cpu=[cpu_seconds(service.pid) - cpu],
        loop_cpu=[after.cpu - before.cpu],
        voluntary=[after.voluntary - before.voluntary],
        forced=[after.forced - before.forced],
    )
    return got.megabytes_per_second, cost


def measure(rig: Rig, systems: dict[str, Service], rounds: int) -> dict[str, Samples]:
    """``rounds`` rounds (after one untimed warm-up) of one download per system, in turn."""
    found = {name: Samples() for name in systems}
    for number in range(rounds + 1):
        rates = {}
        for name, service in systems.items():
            rate, cost = download(rig, service, recording=name != REFERENCE)
            rates[name] = rate
            if number:
                samples = found[name]
                samples.rates.append(rate)
                samples.ratios.append(rate / rates[REFERENCE])
                samples.cpu += cost.cpu
                samples.loop_cpu += cost.loop_cpu
                samples.voluntary += cost.voluntary
                samples.forced += cost.forced
        if number:
            say(f"round {number}/{rounds}: " + ", ".join(f"{r:,.0f}" for r in rates.values()))
    return found


def report(found: dict[str, Samples], *, size: int, rounds: int) -> str:
    median = statistics.median
    lines = [
        f"\n### Record A/B: {human(size)} body, {rounds} interleaved rounds "
        f"(CPython {platform.python_version()}, {os.cpu_count()} CPUs)\n",
        row(
            "system",
            "MB/s",
            "range",
            "vs mitmdump (paired)",
            "CPU s per download",
            "event loop",
            "switches vol/forced",
        ),
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, samples in found.items():
        lines.append(
            row(
                name,
                f"{median(samples.rates):,.0f}",
                f"{min(samples.rates):,.0f}..{max(samples.rates):,.0f}",
                f"{100 * median(samples.ratios):.1f} %",
                f"{median(samples.cpu):.3f}",
                f"{median(samples.loop_cpu):.3f}",
                f"{median(samples.voluntary):.0f}/{median(samples.forced):.0f}",
            )
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="fetchproxy record builds against mitmdump, interleaved (see the docstring)."
    )
    add = parser.add_argument
    add(
        "--tree",
        type=Path,
        action="append",
        help="a source tree whose fetchproxy to run; repeat it to compare builds (default: .)",
    )
    add("--size", type=parse_size, default=200 * 10**6, help="the body (default 200MB)")
    add("--rounds", type=int, default=10, help="timed downloads per system (default 10)")
    add("--origin", choices=("nginx", "python"), default="nginx", help="the HTTPS origin")
    add("--time-limit", type=int, default=1800, help="give up after this many seconds")
    args = parser.parse_args(argv)
    for tree in args.tree or []:
        if not (tree / "fetchproxy" / "__init__.py").is_file():
            parser.error(f"--tree {tree}: no fetchproxy/ package there")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    trees = [tree.resolve() for tree in args.tree or [Path(__file__).resolve().parents[1]]]
    work = Path(tempfile.mkdtemp(prefix="record-ab-"))
    try:
        with time_limit(args.time_limit), Services(work) as services:
            rig = make_rig(
                services, work, large=args.size, huge=1, files=1, nginx=args.origin == "nginx"
            )
            say(f"work directory {work}; the origin is {rig.origin_kind}")
            systems = {
                REFERENCE: services.start_mitmdump(
                    "mitmdump-stream",
                    confdir=rig.confdir,
                    upstream_ca=rig.pki.ca_cert,
                    stream=True,
                )
            }
            for number, tree in enumerate(trees, start=1):
                name = f"fetchproxy record {number} ({tree})"
                systems[name] = start_fetchproxy(
                    services, rig, f"record-{number}", "record", source=tree
                )
            found = measure(rig, systems, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(report(found, size=args.size, rounds=args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
