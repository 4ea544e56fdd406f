"""Tables 3 and 4: the memory of a proxy moving one huge body, and over many small hits.

Every row is a fresh process, so ``VmHWM`` is the peak of exactly that work.
"""

from __future__ import annotations

import time

from proxybench.loadgen import curl_download, run_requests
from proxybench.rig import (
    CEILING,
    Options,
    Rig,
    settle_record,
    start_fetchproxy,
)
from proxybench.rounds import (
    Report,
    human,
    megabytes,
    row,
    say,
)
from proxybench.systems import ANSWER_EVERYTHING, Services

RSS_TARGET = 120 * 10**6


# ------------------------------------------------------------------------------ 3. peak memory


def bench_huge(services: Services, rig: Rig, opts: Options, out: Report) -> None:
    say(f"3. peak RSS moving a {human(rig.huge_size)} body (a fresh process each)")
    labels = {
        "record": "fetchproxy record",
        "replay": "fetchproxy replay (cold)",
        "mitmdump": "mitmdump streaming (reference)",
    }
    rows: list[str] = []
    for protocol in opts.huge_protocols:
        http2 = protocol == "HTTP/2"
        for kind in ("record", "replay", "mitmdump"):
            name = f"huge-{kind}-{'h2' if http2 else 'h1'}"
            if kind == "mitmdump":
                proxy = services.start_mitmdump(
                    name, confdir=rig.confdir, upstream_ca=rig.pki.ca_cert, stream=True
                )
            else:
                proxy = start_fetchproxy(services, rig, name, kind, http2=http2)
            idle = proxy.memory().rss
            got = curl_download(
                rig.url("/huge.bin"),
                trust=rig.proxy_ca,
                expected_size=rig.huge_size,
                proxy=proxy.url,
                http2=http2,
                max_seconds=900,
            )
            if kind == "record":
                settle_record(rig, proxy, 0)
            peak = proxy.memory().peak
            proxy.stop()
            verdict = ""
            if kind != "mitmdump":
                verdict = " ✓" if peak <= RSS_TARGET else " ✗"
                out.target(
                    f"peak RSS <= 120 MB, {labels[kind]} of {human(rig.huge_size)}, {protocol}",
                    megabytes(peak),
                    met=peak <= RSS_TARGET,
                )
            rows.append(
                row(
                    f"{labels[kind]}, {protocol}",
                    f"{got.megabytes_per_second:,.0f}",
                    megabytes(idle),
                    megabytes(peak) + verdict,
                )
            )
            say(f"  {labels[kind]}, {protocol}: peak {megabytes(peak)}")
    out.add(
        f"\n### 3. Memory moving one {human(rig.huge_size)} body, a fresh process each "
        "(target ≤ 120 MB)\n"
    )
    out.add(row("proxy, client ↔ proxy", "MB/s", "RSS before", "peak RSS (VmHWM)"))
    out.add("|---|--:|--:|--:|")
    out.extend(rows)


# ------------------------------------------------------------------------------ 4. flat memory


def bench_flat(services: Services, rig: Rig, opts: Options, out: Report) -> None:
    say(f"4. memory over {opts.requests:,} 1 KiB hits")
    checkpoints = sorted({c for c in (1000, opts.requests // 2, opts.requests) if c > 0})
    rows, late_growth = [], []
    for label in ("fetchproxy replay", f"{CEILING} (reference)"):
        if label == "fetchproxy replay":
            proxy = start_fetchproxy(services, rig, "flat-replay", "replay")
        else:
            proxy = services.start_mitmdump(
                "flat-ceiling",
                confdir=rig.confdir,
                upstream_ca=rig.pki.ca_cert,
                script=ANSWER_EVERYTHING,
            )
        target = rig.small_target(proxy)
        started = time.perf_counter()
        done, rss = 0, []
        for checkpoint in checkpoints:  # fresh connections at every checkpoint
            run_requests(target, checkpoint - done, connections=opts.connections)
            done = checkpoint
            rss.append(proxy.memory().rss)
        rate = done / (time.perf_counter() - started)
        peak = proxy.memory().peak
        proxy.stop()
        late_growth.append(rss[-1] - rss[-2] if len(rss) > 1 else 0)
        rows.append(
            row(
                label,
                *(f"{value / 1e6:.1f} MB" for value in rss),
                f"{(rss[-1] - rss[0]) / 1e6:+.1f} MB",
                f"{peak / 1e6:.1f} MB",
                f"{rate:,.0f}",
            )
        )
    out.add(
        f"\n### 4. Memory over {opts.requests:,} 1 KiB replay hits ({opts.connections} "
        "connections, new ones at every checkpoint)\n"
    )
    columns = [f"RSS after {c:,}" for c in checkpoints]
    out.add(row("proxy", *columns, "growth", "peak", "req/s"))
    out.add("|---" + "|--:" * (len(columns) + 3) + "|")
    out.extend(rows)
    ours, theirs = late_growth
    out.target(
        f"memory flat over {opts.requests:,} hits (the last {opts.requests - checkpoints[-2]:,} "
        "add no more than mitmdump's own + 1 MB)",
        f"{ours / 1e6:+.1f} MB (mitmdump {theirs / 1e6:+.1f} MB)",
        met=ours <= theirs + 10**6,
    )
