"""Lock load and write speed at scale, against stdlib tomllib and tomlkit in the same run.

    python bench/lock_bench.py [--entries 100000] [--repeat 3]

Prints the median of ``--repeat`` runs for: load (fetchproxy's reader, fast path), render +
atomic write, tomllib parsing the same file, and tomlkit parse/dump on a tenth of the entries
(tomlkit is far too slow for the full file; its per-entry rate is what the table shows).
The target: a 100,000-entry lock loads in under 1 s and writes in under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import tomlkit

from fetchproxy.digest import digest_bytes
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import load_lock, render_lock, write_lock
from fetchproxy.lock.model import Fetch, Lock


def make_lock(entries: int) -> Lock:
    fetches = []
    for i in range(entries):
        body = i.to_bytes(8, "little")
        fetches.append(
            Fetch(
                key=RequestKey(
                    method="GET",
                    url=f"https://files{i % 50}.example.org/pool/main/p/pkg{i}/"
                    f"pkg{i}_1.{i % 7}.tar.gz",
                ),
                status=200,
                digest=digest_bytes(body),
                size=1000 + i,
                content_type="application/gzip",
            )
        )
    return Lock.from_fetches(fetches)


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    lock = make_lock(args.entries)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.lock.toml"
        write_lock(path, lock)
        text = path.read_text()
        size_mb = len(text.encode()) / 1e6

        def write() -> None:
            path.unlink()
            write_lock(path, lock)

        load = median_seconds(lambda: load_lock(path), args.repeat)
        render = median_seconds(lambda: render_lock(lock), args.repeat)
        written = median_seconds(write, args.repeat)
        stdlib = median_seconds(lambda: tomllib.loads(text), args.repeat)
        tenth = render_lock(Lock(lock.fetches[: max(args.entries // 10, 1)]))
        kit_parse = median_seconds(lambda: tomlkit.parse(tenth), 1) * 10
        document = tomlkit.parse(tenth)
        kit_dump = median_seconds(lambda: tomlkit.dumps(document), 1) * 10

    print(f"lock of {args.entries:,} entries, {size_mb:.1f} MB, median of {args.repeat}")
    rows = [
        ("fetchproxy load (parse + validate)", load),
        ("fetchproxy render", render),
        ("fetchproxy write (render + atomic write)", written),
        ("tomllib.loads (parse only)", stdlib),
        ("tomlkit.parse (x10 from 1/10 of entries)", kit_parse),
        ("tomlkit.dumps (x10 from 1/10 of entries)", kit_dump),
    ]
    for name, seconds in rows:
        print(f"  {name:<44} {seconds:8.3f} s   {seconds / load:6.1f}x load")
    verdict = "meets" if load < 1 and written < 1 else "MISSES"
    print(f"target (load < 1 s and write < 1 s): {verdict}")


if __name__ == "__main__":
    main()
