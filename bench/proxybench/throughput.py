"""Tables 1, 1b, 2 and 2b: how fast fetchproxy answers, against mitmproxy's own limits.

Each function starts the proxies it compares, measures them in interleaved rounds (see
:mod:`proxybench.rounds`), stops them, and adds its table and its verdicts to the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from proxybench.loadgen import cpu_seconds, curl_download, curl_many, measure_rate
from proxybench.rig import (
    CEILING,
    Options,
    Rig,
    journal_lines,
    settle_record,
    start_fetchproxy,
)
from proxybench.rounds import (
    Report,
    Sample,
    Series,
    cell,
    human,
    machine_busy,
    percent,
    rounds,
    row,
    say,
    spread,
)
from proxybench.systems import ANSWER_EVERYTHING, UPSTREAM_ALPN, Service, Services

CPUS = os.cpu_count() or 1


# --------------------------------------------------------------------------------- 1. small hits


def bench_small(services: Services, rig: Rig, opts: Options, out: Report) -> None:
    say("1. 1 KiB HTTPS hits, asyncio client")
    ceiling = services.start_mitmdump(
        "ceiling", confdir=rig.confdir, upstream_ca=rig.pki.ca_cert, script=ANSWER_EVERYTHING
    )
    forward = services.start_mitmdump(
        "mitmdump-forward", confdir=rig.confdir, upstream_ca=rig.pki.ca_cert
    )
    replay = start_fetchproxy(services, rig, "replay-small", "replay")
    record = start_fetchproxy(services, rig, "record-small", "record")

    def hits(proxy: Service | None) -> Callable[[], Sample]:
        def measure() -> Sample:
            rate = measure_rate(
                rig.small_target(proxy),
                connections=opts.connections,
                warmup=opts.warmup,
                duration=opts.duration,
                watch=None if proxy is None else proxy.pid,
            )
            sample = {"req/s": rate.per_second, "client µs": rate.client_cpu / rate.requests * 1e6}
            if rate.per_cpu_second is not None:
                sample["req/cpu-s"] = rate.per_cpu_second
            return sample

        return measure

    systems = {
        CEILING: hits(ceiling),
        "fetchproxy replay": hits(replay),
        f"client alone → {rig.origin_kind} (no proxy)": hits(None),
        f"mitmdump forwarding to {rig.origin_kind}": hits(forward),
        f"fetchproxy record (to {rig.origin_kind})": hits(record),
    }
    found = rounds(systems, count=opts.rounds, reference=CEILING, cpus=CPUS)
    for service in (ceiling, forward, replay, record):
        service.stop()
    replayed = found["fetchproxy replay"]
    out.target(
        "replay of 1 KiB HTTPS hits >= 90 % of the answer-everything ceiling",
        f"{percent(replayed.ratio('req/s'))} (per proxy CPU second "
        f"{percent(replayed.ratio('req/cpu-s'))})",
        met=(replayed.ratio("req/s") or 0) >= 0.9,
    )
    out.add(
        f"\n### 1. 1 KiB HTTPS hits, {opts.connections} keep-alive connections "
        f"(median of {opts.rounds} rounds x {opts.duration:g} s)\n"
    )
    out.add(
        row(
            "system",
            "req/s",
            "range",
            "vs ceiling",
            "req per proxy CPU-s",
            "vs ceiling",
            "client CPU µs/req",
        )
    )
    out.add("|---|--:|--:|--:|--:|--:|--:|")
    for series in found.values():
        mark = " (target ≥ 90 %)" if series.name == "fetchproxy replay" else ""
        out.add(
            row(
                series.name,
                cell(series.median("req/s")),
                spread(series.values("req/s")),
                percent(series.ratio("req/s")) + mark,
                cell(series.median("req/cpu-s")),
                percent(series.ratio("req/cpu-s")),
                cell(series.median("client µs")),
            )
        )
    out.add(f"\n({machine_busy(found)})")


def bench_small_curl(services: Services, rig: Rig, opts: Options, out: Report) -> None:
    say("1b. 1 KiB HTTPS hits, curl --parallel, HTTP/1.1 and HTTP/2")
    ceiling = services.start_mitmdump(
        "ceiling-curl", confdir=rig.confdir, upstream_ca=rig.pki.ca_cert, script=ANSWER_EVERYTHING
    )
    replay = start_fetchproxy(services, rig, "replay-curl", "replay")
    replay_h2 = start_fetchproxy(services, rig, "replay-curl-h2", "replay", http2=True)
    urls = rig.small_urls(opts.curl_requests)
    connections: dict[str, set[int]] = {}

    def batch(proxy: Service, name: str, *, http2: bool) -> Callable[[], Sample]:
        def measure() -> Sample:
            cpu = cpu_seconds(proxy.pid)
            got = curl_many(
                urls,
                trust=rig.proxy_ca,
                expected_size=1024,
                config=rig.work / "curl-urls.txt",
                proxy=proxy.url,
                http2=http2,
                parallel=opts.connections,
            )
            if got.http_versions != {"2" if http2 else "1.1"}:
                raise RuntimeError(f"{name}: curl spoke HTTP {sorted(got.http_versions)}")
            connections.setdefault(name, set()).add(got.connections)
            return {
                "req/s": got.per_second,
                "req/cpu-s": got.requests / (cpu_seconds(proxy.pid) - cpu),
            }

        return measure

    reference = f"{CEILING}, HTTP/1.1"
    systems = {
        reference: batch(ceiling, reference, http2=False),
        "fetchproxy replay, HTTP/1.1": batch(replay, "fetchproxy replay, HTTP/1.1", http2=False),
        f"{CEILING}, HTTP/2": batch(ceiling, f"{CEILING}, HTTP/2", http2=True),
        "fetchproxy replay --http2, HTTP/2": batch(
            replay_h2, "fetchproxy replay --http2, HTTP/2", http2=True
        ),
    }
    found = rounds(systems, count=opts.rounds, reference=reference, cpus=CPUS)
    for service in (ceiling, replay, replay_h2):
        service.stop()
    out.add(
        f"\n### 1b. {opts.curl_requests:,} x 1 KiB with `curl --parallel --parallel-max "
        f"{opts.connections}` (median of {opts.rounds} rounds)\n"
    )
    out.add(
        row(
            "system, client ↔ proxy",
            "req/s",
            "range",
            "vs ceiling HTTP/1.1",
            "req per proxy CPU-s",
            "connections",
        )
    )
    out.add("|---|--:|--:|--:|--:|--:|")
    out.extend(
        row(
            series.name,
            cell(series.median("req/s")),
            spread(series.values("req/s")),
            percent(series.ratio("req/s")),
            cell(series.median("req/cpu-s")),
            "/".join(str(c) for c in sorted(connections.get(series.name, ()))),
        )
        for series in found.values()
    )
    out.add(f"\n({machine_busy(found)})")


# -------------------------------------------------------------------------------- 2. large body


def bench_large(services: Services, rig: Rig, opts: Options, out: Report) -> None:
    say(f"2. {human(rig.large_size)} body over HTTPS")
    stream = services.start_mitmdump(
        "mitmdump-stream", confdir=rig.confdir, upstream_ca=rig.pki.ca_cert, stream=True
    )
    found: dict[str, Series] = {}
    for protocol in opts.protocols:
        http2 = protocol == "HTTP/2"
        tag = "-h2" if http2 else ""
        replay = start_fetchproxy(services, rig, f"replay-large{tag}", "replay", http2=http2)
        record = start_fetchproxy(services, rig, f"record-large{tag}", "record", http2=http2)
        found |= _large_rounds(rig, opts, (stream, replay, record), protocol)
        for service in (replay, record):
            service.stop()
    stream.stop()
    _large_report(found, rig, opts, out)


def _large_rounds(
    rig: Rig, opts: Options, proxies: tuple[Service, Service, Service], protocol: str
) -> dict[str, Series]:
    """Rounds of curl downloads through (mitmdump streaming, replay, record) and directly."""
    stream, replay, record = proxies
    url = rig.url("/large.bin")

    def download(proxy: Service | None, *, http2: bool) -> Callable[[], Sample]:
        def measure() -> Sample:
            stored = journal_lines(rig, record) if proxy is record else 0
            cpu = 0.0 if proxy is None else cpu_seconds(proxy.pid)
            got = curl_download(
                url,
                trust=rig.pki.ca_cert if proxy is None else rig.proxy_ca,
                expected_size=rig.large_size,
                proxy=None if proxy is None else proxy.url,
                http2=http2,
            )
            if got.http_version != ("2" if http2 else "1.1"):
                raise RuntimeError(f"curl spoke HTTP {got.http_version} to {proxy or 'nginx'}")
            sample = {"MB/s": got.megabytes_per_second}
            if proxy is not None:
                if proxy is record:
                    settle_record(rig, record, stored)  # the blob is committed: CPU counted
                sample["MB/cpu-s"] = got.size / 1e6 / (cpu_seconds(proxy.pid) - cpu)
            return sample

        return measure

    http2 = protocol == "HTTP/2"
    reference = f"mitmdump streaming pass-through, {protocol}"
    systems = {
        reference: download(stream, http2=http2),
        f"fetchproxy replay, {protocol}": download(replay, http2=http2),
        f"fetchproxy record, {protocol}": download(record, http2=http2),
    }
    if not http2 or rig.origin_kind == "nginx":  # the Python origin speaks HTTP/1.1 only
        systems[f"{rig.origin_kind} direct, {protocol}"] = download(None, http2=http2)
    for measure in systems.values():  # untimed warm-up: replay verifies on first use
        measure()
    return rounds(systems, count=opts.rounds, reference=reference, cpus=CPUS)


def _large_report(found: dict[str, Series], rig: Rig, opts: Options, out: Report) -> None:
    for protocol in opts.protocols:
        for mode in ("replay", "record"):
            series = found[f"fetchproxy {mode}, {protocol}"]
            out.target(
                f"{human(rig.large_size)} {mode}, {protocol} to the proxy, >= 90 % of mitmdump "
                "streaming",
                f"{percent(series.ratio('MB/s'))} (per proxy CPU second "
                f"{percent(series.ratio('MB/cpu-s'))})",
                met=(series.ratio("MB/s") or 0) >= 0.9,
            )
    out.add(
        f"\n### 2. {human(rig.large_size)} body over HTTPS with curl (median of {opts.rounds} "
        "rounds; ratios against mitmdump streaming with the same protocol)\n"
    )
    out.add(
        row(
            "system, client ↔ proxy",
            "MB/s",
            "range",
            "vs mitmdump",
            "MB per proxy CPU-s",
            "vs mitmdump",
        )
    )
    out.add("|---|--:|--:|--:|--:|--:|")
    for series in found.values():
        mark = " (target ≥ 90 %)" if series.name.startswith("fetchproxy") else ""
        out.add(
            row(
                series.name,
                cell(series.median("MB/s")),
                spread(series.values("MB/s")),
                percent(series.ratio("MB/s")) + mark,
                cell(series.median("MB/cpu-s")),
                percent(series.ratio("MB/cpu-s")),
            )
        )
    out.add(f"\n({machine_busy(found)})")
    if len(opts.protocols) == 2:
        out.add("\nHTTP/2 / HTTP/1.1 between client and proxy (medians of MB/s):\n")
        for name in [n.removesuffix(", HTTP/1.1") for n in found if n.endswith(", HTTP/1.1")]:
            if f"{name}, HTTP/2" not in found:
                continue
            h1 = found[f"{name}, HTTP/1.1"].median("MB/s") or 0.0
            h2 = found[f"{name}, HTTP/2"].median("MB/s") or 0.0
            out.add(f"- {name}: {h2 / h1:.2f}x ({h2:,.0f} vs {h1:,.0f} MB/s)")


def bench_legs(services: Services, rig: Rig, opts: Options, out: Report) -> None:
    """Which leg makes HTTP/2 slow: mitmdump streaming, each pair of client and origin protocols."""
    if rig.origin_kind != "nginx":
        say("2b. skipped: the Python origin speaks HTTP/1.1 only")
        return
    say(f"2b. {human(rig.large_size)} body through mitmdump, client and origin protocol apart")
    proxies = {
        origin: services.start_mitmdump(
            f"legs-origin-{alpn.replace('/', '')}",
            confdir=rig.confdir,
            upstream_ca=rig.pki.ca_cert,
            stream=True,
            script=UPSTREAM_ALPN,
            options=[f"upstream_alpn={alpn}"],
        )
        for origin, alpn in (("HTTP/1.1", "http/1.1"), ("HTTP/2", "h2"))
    }

    def download(proxy: Service, *, http2: bool) -> Callable[[], Sample]:
        def measure() -> Sample:
            cpu = cpu_seconds(proxy.pid)
            got = curl_download(
                rig.url("/large.bin"),
                trust=rig.proxy_ca,
                expected_size=rig.large_size,
                proxy=proxy.url,
                http2=http2,
            )
            used = got.size / 1e6 / (cpu_seconds(proxy.pid) - cpu)
            return {"MB/s": got.megabytes_per_second, "MB/cpu-s": used}

        return measure

    systems = {
        f"client {client}, origin {origin}": download(proxy, http2=client == "HTTP/2")
        for origin, proxy in proxies.items()
        for client in ("HTTP/1.1", "HTTP/2")
    }
    reference = next(iter(systems))
    found = rounds(systems, count=opts.rounds, reference=reference, cpus=CPUS)
    for proxy in proxies.values():
        proxy.stop()
    out.add(
        f"\n### 2b. {human(rig.large_size)} body through mitmdump streaming, the protocol of "
        f"each leg fixed (median of {opts.rounds} rounds)\n"
    )
    out.add(row("legs", "MB/s", "range", "vs all HTTP/1.1", "MB per proxy CPU-s"))
    out.add("|---|--:|--:|--:|--:|")
    out.extend(
        row(
            series.name,
            cell(series.median("MB/s")),
            spread(series.values("MB/s")),
            percent(series.ratio("MB/s")),
            cell(series.median("MB/cpu-s")),
        )
        for series in found.values()
    )
    out.add(f"\n({machine_busy(found)})")
