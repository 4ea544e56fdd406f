"""Record mode: fetchproxy record against mitmdump's streaming pass-through.

The 1 KiB hits of (a) on long-lived processes, then each body in fresh processes (their
``VmHWM`` is the peak RSS while recording it). Ratios are to mitmdump in the same round.
"""

from __future__ import annotations

from collections.abc import Callable

from proxybench.loadgen import cpu_seconds, curl_download, run_requests
from proxybench.peers import Arena, Body
from proxybench.rig import journal_lines, settle_record, start_fetchproxy
from proxybench.rounds import (
    Report,
    Sample,
    Series,
    cell,
    human,
    megabytes,
    percent,
    rounds,
    row,
    say,
    spread,
)
from proxybench.systems import Service
from proxybench.throughput import CPUS
from proxybench.versus import CPU, RSS_TARGET, WORK, PeerOptions, per_cpu


def bench_record(arena: Arena, opts: PeerOptions, out: Report) -> None:
    """fetchproxy record against mitmdump's streaming pass-through: (a), and (b, c) per body."""
    say("record mode: fetchproxy record against mitmdump pass-through")
    rig = arena.rig
    reference = "mitmdump pass-through (streaming)"
    lines = []

    def start(kind: str) -> Service:
        if kind == "fetchproxy record":
            return start_fetchproxy(arena.services, rig, arena.name("fetchproxy-rec"), "record")
        return arena.services.start_mitmdump(
            arena.name("mitmdump-pass"),
            confdir=rig.confdir,
            upstream_ca=rig.pki.ca_cert,
            stream=True,
        )

    kinds = (reference, "fetchproxy record")
    proxies = {kind: start(kind) for kind in kinds}

    def hits(service: Service) -> Callable[[], Sample]:
        def measure() -> Sample:
            rate = run_requests(
                rig.small_target(service),
                opts.requests,
                connections=opts.connections,
                watch=service.pid,
            )
            return {"rate": rate.per_second, WORK: opts.requests, CPU: rate.cpu or 0.0}

        return measure

    for service in proxies.values():
        hits(service)()
    found = rounds(
        {kind: hits(service) for kind, service in proxies.items()},
        count=opts.rounds,
        reference=reference,
        cpus=CPUS,
    )
    for service in proxies.values():
        service.stop()
    lines += [
        _record_row(found, kind, f"{opts.requests:,} x 1 KiB", "req/s", "-") for kind in kinds
    ]
    for body in arena.bodies:
        proxies = {kind: start(kind) for kind in kinds}

        def download(service: Service, body: Body = body) -> Callable[[], Sample]:
            def measure() -> Sample:
                recording = "fetchproxy-rec" in service.name
                stored = journal_lines(rig, service) if recording else 0
                cpu = cpu_seconds(service.pid)
                got = curl_download(
                    rig.url(body.path),
                    trust=rig.proxy_ca,
                    expected_size=body.size,
                    proxy=service.url,
                )
                if recording:
                    settle_record(rig, service, stored)  # stored and journalled: CPU counted
                used = cpu_seconds(service.pid) - cpu
                return {"rate": got.megabytes_per_second, WORK: got.size / 1e6, CPU: used}

            return measure

        for service in proxies.values():
            download(service)()
        found = rounds(
            {kind: download(service) for kind, service in proxies.items()},
            count=opts.rounds,
            reference=reference,
            cpus=CPUS,
        )
        peaks = {kind: service.memory().peak for kind, service in proxies.items()}
        for service in proxies.values():
            service.stop()
        for kind in kinds:
            peak = megabytes(peaks[kind])
            if kind == "fetchproxy record":
                out.target(
                    f"(c) peak RSS <= 120 MB recording one {human(body.size)} body",
                    peak,
                    met=peaks[kind] <= RSS_TARGET,
                )
                peak += " ✓" if peaks[kind] <= RSS_TARGET else " ✗"
            lines.append(_record_row(found, kind, f"{human(body.size)} body", "MB/s", peak))
    out.add(
        f"\n### Record mode: fetchproxy record against mitmdump's streaming pass-through "
        f"(median of {opts.rounds} rounds; fresh processes for each body)\n"
    )
    out.add(
        row("workload", "system", "rate", "range", "vs mitmdump", "per proxy CPU-s", "peak RSS")
    )
    out.add("|---|---|--:|--:|--:|--:|--:|")
    out.extend(lines)


def _record_row(found: dict[str, Series], kind: str, workload: str, unit: str, peak: str) -> str:
    series = found[kind]
    return row(
        workload,
        kind,
        f"{cell(series.median('rate'))} {unit}",
        spread(series.values("rate")),
        percent(series.ratio("rate")),
        cell(per_cpu(series)),
        peak,
    )
