"""The workloads of ``bench/peers_bench.py``, every contender side by side.

- :func:`bench_hits` (a): ``--requests`` 1 KiB GETs over HTTPS on ``--connections`` keep-alive
  connections, timed from the first request to the last answer.
- :func:`bench_bodies` (b, c): each body with curl over HTTPS; a fresh process per system and
  body, so its ``VmHWM`` afterwards is the peak RSS while serving that body.
- :func:`bench_start` (d): from starting the process to the first request it served.

They serve the recordings :mod:`proxybench.recordings` made; record mode is
:mod:`proxybench.record_mode`. Rounds interleave the systems (:func:`proxybench.rounds.rounds`);
every ratio is to fetchproxy in the same round, the median over rounds.
"""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from proxybench.first_request import NeverServedError, get, time_to_first_request, tls_context
from proxybench.loadgen import LoadError, cpu_seconds, curl_download, run_requests
from proxybench.peers import NOT_INSTALLED, SMALL_FILES, Arena, Body, Contender, why_failed
from proxybench.rounds import (
    Report,
    Sample,
    Series,
    cell,
    human,
    machine_busy,
    megabytes,
    percent,
    rounds,
    row,
    say,
    spread,
)
from proxybench.systems import Service, ServiceError
from proxybench.throughput import CPUS

FAILURES = (LoadError, ServiceError, NeverServedError, OSError, subprocess.TimeoutExpired)
"""What a system can do wrong during a measurement; other exceptions are the benchmark's bugs."""
REFERENCE = "fetchproxy replay"
WORK = "work"
"""Sample metric: requests or megabytes the sample moved."""
CPU = "server cpu-s"
"""Sample metric: CPU seconds the server used for them (``/proc/PID/stat``, all threads)."""
RSS_TARGET = 120 * 10**6


@dataclass(frozen=True)
class PeerOptions:
    rounds: int
    requests: int
    connections: int
    record_timeout: float
    """Seconds a system may take to record one body before it counts as "cannot"."""


def _tolerant(
    contender: Contender, keys: tuple[str, str], measure: Callable[[], Sample]
) -> Callable[[], Sample]:
    """``measure``, unless the contender cannot do ``keys`` (its recording, this measurement).

    A failure marks the measurement "cannot" for the contender instead of stopping the run.
    """

    def run() -> Sample:
        if contender.why_not(*keys):
            return {}
        try:
            return measure()
        except FAILURES as error:
            contender.cannot[keys[1]] = f"failed: {why_failed(None, error, 0)}"
            say(f"  {contender.name}: {contender.cannot[keys[1]]}")
            return {}

    return run


def _start_all(
    contenders: list[Contender], keys: tuple[str, str]
) -> dict[str, tuple[Contender, Service]]:
    """Start every contender able to serve ``keys[0]``; one that does not start "cannot"."""
    started = {}
    for contender in contenders:
        if contender.why_not(*keys):
            continue
        began = time.perf_counter()
        try:
            started[contender.name] = (contender, contender.server(keys[0]))
        except FAILURES as error:
            reason = why_failed(None, error, time.perf_counter() - began)
            contender.cannot[keys[1]] = f"did not start: {reason}"
    return started


def per_cpu(series: Series) -> float | None:
    """Work per CPU second of the server over all rounds together.

    ``/proc/PID/stat`` counts CPU time in 10 ms ticks, coarse for the fast systems' short
    samples; the sum over the rounds is less so.
    """
    used = sum(series.values(CPU))
    return sum(series.values(WORK)) / used if used > 0 else None


def _per_cpu_ratio(series: Series, found: dict[str, Series]) -> str:
    ours = per_cpu(found[REFERENCE]) if REFERENCE in found else None
    theirs = per_cpu(series)
    return percent(None if ours is None or theirs is None else theirs / ours)


def _stop(services: dict[str, tuple[Contender, Service]]) -> None:
    for _contender, service in services.values():
        service.stop()


def _cannot_row(contender: Contender, keys: tuple[str, str], columns: int) -> str:
    """A row saying why, then ``-`` in the rest of the ``columns`` number columns."""
    why = contender.why_not(*keys) or "no result"
    return row(contender.name, contender.how, f"cannot: {why}", *["-"] * (columns - 1))


# --------------------------------------------------------------------------------- (a) 1 KiB hits


def bench_hits(arena: Arena, contenders: list[Contender], opts: PeerOptions, out: Report) -> None:
    say(f"(a) {opts.requests:,} x 1 KiB over HTTPS, {opts.connections} connections")
    keys = (SMALL_FILES, "hits")
    started = _start_all(contenders, keys)

    def hits(contender: Contender, service: Service, count: int) -> Callable[[], Sample]:
        def measure() -> Sample:
            target = arena.small_target(contender, service)
            rate = run_requests(target, count, connections=opts.connections, watch=service.pid)
            return {
                "req/s": rate.per_second,
                "client µs": rate.client_cpu / count * 1e6,
                WORK: count,
                CPU: rate.cpu or 0.0,
            }

        return _tolerant(contender, keys, measure)

    for contender, service in started.values():
        _tolerant(contender, keys, functools.partial(_same_bytes, arena, contender, service))()
        # untimed: replay verifies a blob on first use
        hits(contender, service, max(opts.requests // 4, len(arena.rig.small_paths)))()
    systems = {
        name: hits(contender, service, opts.requests)
        for name, (contender, service) in started.items()
    }
    found = rounds(systems, count=opts.rounds, reference=REFERENCE, cpus=CPUS)
    _stop(started)
    out.add(
        f"\n### (a) {opts.requests:,} requests for 1 KiB bodies over HTTPS, {opts.connections} "
        f"keep-alive connections (median of {opts.rounds} rounds)\n"
    )
    titles = ["req/s", "range", "vs fetchproxy", "req per server CPU-s", "vs fetchproxy"]
    out.add(row("system", "mode/how", *titles, "client CPU µs/req"))
    out.add("|---|---|--:|--:|--:|--:|--:|--:|")
    for contender in contenders:
        if contender.why_not(*keys) or contender.name not in found:
            out.add(_cannot_row(contender, keys, len(titles) + 1))
            continue
        series = found[contender.name]
        out.add(
            row(
                contender.name,
                contender.how,
                cell(series.median("req/s")),
                spread(series.values("req/s")),
                percent(series.ratio("req/s")),
                cell(per_cpu(series)),
                _per_cpu_ratio(series, found),
                cell(series.median("client µs")),
            )
        )
    out.add(f"\n({machine_busy(found)})")
    label = f"(a) {opts.requests:,} x 1 KiB"
    _targets(out, contenders, found, metric="req/s", label=label, keys=keys)


def _same_bytes(arena: Arena, contender: Contender, service: Service) -> Sample:
    """Every 1 KiB file once, on a new connection each: the bytes the origin has, or fail."""
    target = arena.small_target(contender, service)
    trust = arena.rig.proxy_ca if contender.forward else arena.rig.pki.ca_cert
    context = tls_context(trust)
    for path in arena.rig.small_paths:
        status, body = get(target, path, context)
        if status != 200 or body != (arena.rig.work / "www" / path.lstrip("/")).read_bytes():
            raise LoadError(f"{path}: status {status}, not the origin's bytes ({len(body)} bytes)")
    return {}


def _targets(
    out: Report,
    contenders: list[Contender],
    found: dict[str, Series],
    *,
    metric: str,
    label: str,
    keys: tuple[str, str],
) -> None:
    """One verdict per peer: fetchproxy at or above it (its same-round ratio at most 100 %).

    A peer that cannot do the case leaves it to fetchproxy; one that is not installed was not
    measured, which is no verdict.
    """
    ours = found[REFERENCE].median(metric) if REFERENCE in found else None
    for contender in contenders[1:]:
        if contender.name.startswith("nginx"):
            continue  # the physical limit, not a peer
        why = contender.why_not(*keys)
        goal = f"{label}: fetchproxy >= {contender.name}"
        if ours is None:
            reason = contenders[0].why_not(*keys) or "no result"
            out.target(goal, f"fetchproxy has no result: {reason}", met=False)
        elif why is not None and why.startswith(NOT_INSTALLED):
            out.targets.append(f"- not measured: {goal}: {contender.name} is {why}")
        elif why is not None or contender.name not in found:
            out.target(goal, f"{contender.name} cannot: {why or 'no result'}", met=True)
        else:
            theirs = found[contender.name]
            ratio = theirs.ratio(metric)
            out.target(
                goal,
                f"fetchproxy {cell(ours)} vs {cell(theirs.median(metric))} {metric} "
                f"({contender.name} at {percent(ratio)} of fetchproxy)",
                met=ratio is not None and ratio <= 1.0,
            )


# ------------------------------------------------------------------------------ (b, c) bodies


def bench_bodies(arena: Arena, contenders: list[Contender], opts: PeerOptions, out: Report) -> None:
    for body in arena.bodies:
        _bench_body(arena, contenders, body, opts, out)


def _bench_body(
    arena: Arena, contenders: list[Contender], body: Body, opts: PeerOptions, out: Report
) -> None:
    say(f"(b, c) one {human(body.size)} body over HTTPS, peak RSS (a fresh process each)")
    keys = (body.key, f"serve {body.key}")
    ready: dict[str, tuple[float, int]] = {}
    started: dict[str, tuple[Contender, Service]] = {}
    for contender in contenders:  # one at a time: each start is timed alone
        began = time.perf_counter()
        one = _start_all([contender], keys)
        if one:
            started |= one
            ready[contender.name] = (
                time.perf_counter() - began,
                one[contender.name][1].memory().rss,
            )

    def download(contender: Contender, service: Service) -> Callable[[], Sample]:
        def measure() -> Sample:
            url, trust, proxy = arena.body_request(contender, service, body)
            cpu = cpu_seconds(service.pid)
            got = curl_download(url, trust=trust, expected_size=body.size, proxy=proxy)
            used = cpu_seconds(service.pid) - cpu
            return {"MB/s": got.megabytes_per_second, WORK: got.size / 1e6, CPU: used}

        return _tolerant(contender, keys, measure)

    for contender, service in started.values():  # untimed: replay verifies a blob on first use
        download(contender, service)()
    systems = {name: download(contender, service) for name, (contender, service) in started.items()}
    found = rounds(systems, count=opts.rounds, reference=REFERENCE, cpus=CPUS)
    peaks = {name: service.memory().peak for name, (_c, service) in started.items()}
    _stop(started)
    out.add(
        f"\n### (b, c) One {human(body.size)} body over HTTPS with curl, HTTP/1.1 (median of "
        f"{opts.rounds} rounds); peak RSS of the serving process (a fresh one per system)\n"
    )
    titles = ["MB/s", "range", "vs fetchproxy", "MB per server CPU-s", "ready after", "RSS ready"]
    out.add(row("system", "mode/how", *titles, "peak RSS (c)"))
    out.add("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for contender in contenders:
        if contender.why_not(*keys) or contender.name not in found:
            out.add(_cannot_row(contender, keys, len(titles) + 1))
            continue
        series = found[contender.name]
        seconds, rss = ready[contender.name]
        peak = peaks[contender.name]
        mark = ""
        if contender.name == REFERENCE:
            mark = " ✓" if peak <= RSS_TARGET else " ✗"
            out.target(
                f"(c) peak RSS <= 120 MB serving one {human(body.size)} body",
                megabytes(peak),
                met=peak <= RSS_TARGET,
            )
        out.add(
            row(
                contender.name,
                contender.how,
                cell(series.median("MB/s")),
                spread(series.values("MB/s")),
                percent(series.ratio("MB/s")),
                cell(per_cpu(series)),
                f"{seconds:.2f} s",
                megabytes(rss),
                megabytes(peak) + mark,
            )
        )
    out.add(f"\n({machine_busy(found)})")
    label = f"(b) {human(body.size)} body"
    _targets(out, contenders, found, metric="MB/s", label=label, keys=keys)


# ------------------------------------------------------------------------------- (d) first request


def bench_start(arena: Arena, contenders: list[Contender], opts: PeerOptions, out: Report) -> None:
    say("(d) from process start to the first served request (the 1 KiB recording)")
    keys = (SMALL_FILES, "start")
    contexts = {True: tls_context(arena.rig.proxy_ca), False: tls_context(arena.rig.pki.ca_cert)}

    def first(contender: Contender) -> Callable[[], Sample]:
        def measure() -> Sample:
            got = time_to_first_request(
                lambda: contender.server(SMALL_FILES),
                lambda service: arena.small_target(contender, service),
                context=contexts[contender.forward],
            )
            got.service.stop()
            return {"ms": got.seconds * 1000}

        return _tolerant(contender, keys, measure)

    systems = {c.name: first(c) for c in contenders if not c.why_not(*keys)}
    found = rounds(systems, count=opts.rounds, reference=REFERENCE, cpus=CPUS)
    out.add(
        f"\n### (d) From process start to the first served request (1 KiB, HTTPS; median of "
        f"{opts.rounds} rounds, a new process each)\n"
    )
    titles = ["ms (lower is better)", "range", "vs fetchproxy"]
    out.add(row("system", "mode/how", *titles))
    out.add("|---|---|--:|--:|--:|")
    for contender in contenders:
        if contender.why_not(*keys) or contender.name not in found:
            out.add(_cannot_row(contender, keys, len(titles)))
            continue
        series = found[contender.name]
        out.add(
            row(
                contender.name,
                contender.how,
                cell(series.median("ms")),
                spread(series.values("ms")),
                percent(series.ratio("ms")),
            )
        )
    out.add(f"\n({machine_busy(found)})")
