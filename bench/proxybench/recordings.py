"""Each contender records every workload once from the origin: what its replay will serve.

A recording that fails (the recorder crashes, runs out of memory, answers wrongly, or takes longer
than ``--record-timeout``) marks that workload "cannot" for the contender, with the reason; the
table of recordings shows the time each took and the recorder's peak RSS.
"""

from __future__ import annotations

import signal
import time

from proxybench.loadgen import curl_download, run_requests
from proxybench.peers import SMALL_FILES, Arena, Contender, why_failed
from proxybench.rounds import Report, human, megabytes, row, say
from proxybench.systems import ServiceError
from proxybench.versus import FAILURES, PeerOptions


def record_fixtures(
    arena: Arena, contenders: list[Contender], opts: PeerOptions, out: Report
) -> None:
    """Every contender records the 1 KiB files and each body once; the table of how it went."""
    say("recording: every system records the 1 KiB files and each body once from the origin")
    keys = (SMALL_FILES, *(body.key for body in arena.bodies))
    for contender in contenders:
        if contender.recorder is None:
            continue
        for key in keys:
            if contender.can(key):
                _record(arena, contender, key, opts)
    out.add(
        f"\n### Recording the fixture once (one run each; the 1 KiB files one at a time, "
        f"{len(arena.rig.small_paths)} requests)\n"
    )
    titles = [f"{len(arena.rig.small_paths)} x 1 KiB"]
    titles += [f"{human(body.size)} body: s, recorder's peak RSS" for body in arena.bodies]
    out.add(row("recorded with", *titles))
    out.add("|---" + "|--:" * len(titles) + "|")
    for contender in contenders:
        if contender.recorder is None:
            continue
        cells = []
        for key in keys:
            if not contender.can(key):
                cells.append(f"cannot: {contender.cannot[key]}")
                continue
            seconds, peak = contender.recorded[key]
            cells.append(
                f"{seconds:.2f} s" + (f", {megabytes(peak)}" if key != SMALL_FILES else "")
            )
        out.add(row(contender.recording, *cells))


def _record(arena: Arena, contender: Contender, key: str, opts: PeerOptions) -> None:
    assert contender.recorder is not None
    service = None
    began = time.perf_counter()
    try:
        service = contender.recorder(key)
        began = time.perf_counter()
        if key == SMALL_FILES:
            target = arena.small_target(contender, service)
            run_requests(target, len(arena.rig.small_paths), connections=1)
        else:
            body = next(body for body in arena.bodies if body.key == key)
            url, trust, proxy = arena.body_request(contender, service, body)
            curl_download(
                url,
                trust=trust,
                expected_size=body.size,
                proxy=proxy,
                max_seconds=opts.record_timeout,
            )
        seconds = time.perf_counter() - began
        peak = service.memory().peak
        status = service.stop()
        if status not in {0, -signal.SIGTERM}:
            raise ServiceError(f"exit status {status}:\n{service.log_tail()}")
        contender.recorded[key] = (seconds, peak)
        say(f"  {contender.name}: recorded {key} in {seconds:.2f} s")
    except FAILURES as error:
        reason = why_failed(service, error, time.perf_counter() - began)
        contender.cannot[key] = f"recording failed: {reason}"
        say(f"  {contender.name}: {contender.cannot[key]}")
        if service is not None and not service.stopped:
            service.stop(timeout=10)
