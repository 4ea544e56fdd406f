"""Work per 1 KiB HTTPS replay hit, counted rather than timed: source trees side by side.

    python bench/instructions_ab.py --tree ../before --tree .
    python bench/instructions_ab.py --tree ../before --tree . --requests 4000
    python bench/instructions_ab.py --tree ../before --tree . --connections 1 --keep /tmp/cg
    python bench/instructions_ab.py --tree ../before --tree . --plain

On a machine shared with other jobs, CPU seconds per request move with the neighbours (caches,
frequency, scheduling), by more than the change being judged. Valgrind's callgrind counts
instead: each tree's ``fetchproxy serve replay`` (the direct engine, as in ``ab_bench.py``'s
``small``) runs under it with instrumentation off, is warmed up with 300 hits (handshakes,
the small-body cache), then counts only ``--requests`` hits over ``--connections`` (8)
keep-alive connections through ``CONNECT`` and TLS (``--plain``: as plain-HTTP proxy requests,
absolute-form GETs, like ``ab_bench.py``'s plain half). Per hit it reports the instructions
executed in user space (Ir), the simulated L1 and last-level cache misses, and callgrind's
cycle estimate (Ir + 10 * L1 misses + 100 * last-level misses), with each tree's ratio to
the first.

What it cannot see: time in the kernel (count the system calls per hit with
``strace -c -f -p PID`` under the same load) and a real CPU's branch predictors. It
complements ``ab_bench.py``; it does not replace it. Needs ``valgrind`` (Debian's package).
``--keep DIR`` keeps each tree's ``callgrind.out`` (``DIR/0.out``, ``DIR/1.out``, …) for
``callgrind_annotate``, to see which functions the difference is in.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ab_bench import ORIGIN_PORT, SMALL, make_fixture, serve_argv, tree_env
from proxybench.loadgen import LoadError, Target, run_requests
from proxybench.systems import LOOPBACK, Services

WARMUP = 300
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


def totals(out: Path) -> dict[str, int]:
    """The ``totals:`` line of a callgrind output file, by event name."""
    names: list[str] = []
    values: list[int] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("totals:"):
            values = [int(v) for v in line.split()[1:]]
    if not names or len(names) != len(values):
        sys.exit(f"{out}: no totals line (did the server stop cleanly?)")
    return dict(zip(names, values, strict=True))


def per_hit(counts: dict[str, int], hits: int) -> dict[str, float]:
    l1 = counts["I1mr"] + counts["D1mr"] + counts["D1mw"]
    ll = counts["ILmr"] + counts["DLmr"] + counts["DLmw"]
    return {
        "instructions": counts["Ir"] / hits,
        "L1 misses": l1 / hits,
        "LL misses": ll / hits,
        "cycle estimate": (counts["Ir"] + 10 * l1 + 100 * ll) / hits,
    }


def plain_requests(port: int, paths: list[str], count: int, connections: int) -> None:
    """Exactly ``count`` plain-HTTP proxy requests for ``paths`` in turn, over keep-alive
    connections; every answer checked (a 200 with the small body)."""
    origin = f"{LOOPBACK}:{ORIGIN_PORT}"
    urls = [
        f"GET http://{origin}{p} HTTP/1.1\r\nHost: {origin}\r\nUser-Agent: ab\r\n\r\n".encode()
        for p in paths
    ]
    left = [count]

    async def worker(index: int) -> None:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        turn = index
        try:
            while left[0] > 0:
                left[0] -= 1
                writer.write(urls[turn % len(urls)])
                turn += 1
                head = await reader.readuntil(b"\r\n\r\n")
                lower = head.lower()
                at = lower.find(b"\r\ncontent-length:")
                if head[9:12] != b"200" or at < 0:
                    raise LoadError(f"plain HTTP: {head[:80]!r}")
                length = int(lower[at + 17 : lower.index(b"\r\n", at + 2)])
                if len(await reader.readexactly(length)) != SMALL:
                    raise LoadError("plain HTTP: not the small body")
        finally:
            writer.close()

    async def run() -> None:
        await asyncio.gather(*(worker(i) for i in range(connections)))

    asyncio.run(run())


def measure(
    tree: Path, hits: int, connections: int, work: Path, services: Services, *, plain: bool
) -> dict[str, float]:
    work.mkdir()
    fixture = make_fixture(work, large=1 << 20, startup_entries=10, lock_entries=10)
    out = work / "callgrind.out"
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--cache-sim=yes",
        f"--callgrind-out-file={out}",
        *serve_argv(fixture, fixture.serve_lock, work / "events.jsonl"),
    ]
    service = services.start_announcing(
        f"callgrind-{tree.name}",
        argv,
        env=tree_env(tree, fixture),
        prefix="fetchproxy: listening on ",
        timeout=300,
    )
    target = Target(
        origin_host="127.0.0.1",
        origin_port=ORIGIN_PORT,
        paths=fixture.small_paths,
        body_size=1024,
        trust=fixture.proxy_ca,
        proxy_port=service.port,
    )

    def load(count: int) -> None:
        if plain:
            plain_requests(service.port, list(fixture.small_paths), count, connections)
        else:
            run_requests(target, count, connections=connections)

    load(WARMUP)
    control = ["callgrind_control", "--instr"]
    subprocess.run([*control, "on", str(service.pid)], check=True, capture_output=True)
    load(hits)
    subprocess.run([*control, "off", str(service.pid)], check=True, capture_output=True)
    status = service.stop()
    if status != 0:
        sys.exit(f"{tree}: serve replay exited {status}")
    return per_hit(totals(out), hits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=2000, help="hits counted per tree")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections")
    parser.add_argument("--keep", type=Path, help="a directory to keep callgrind's outputs in")
    parser.add_argument("--plain", action="store_true", help="plain-HTTP proxy requests")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: apt-get install valgrind")
    trees = [tree.resolve() for tree in args.tree]
    work = Path(tempfile.mkdtemp(prefix="instructions-ab-"))
    try:
        with Services(work) as services:
            results = {
                tree: measure(
                    tree, args.requests, args.connections, work / str(i), services, plain=args.plain
                )
                for i, tree in enumerate(trees)
            }
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for i in range(len(trees)):
                shutil.copyfile(work / str(i) / "callgrind.out", args.keep / f"{i}.out")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results[trees[0]]
    kind = "plain-HTTP" if args.plain else "HTTPS"
    print(
        f"\n### per 1 KiB {kind} hit, {args.requests} hits over {args.connections} "
        f"connection(s) per tree (callgrind)\n"
    )
    heads = [f"{t.name}" for t in trees] + [f"{t.name} / {trees[0].name}" for t in trees[1:]]
    print("| metric | " + " | ".join(heads) + " |")
    print("|---|" + "--:|" * len(heads))
    for metric in base:
        values = [f"{results[t][metric]:,.0f}" for t in trees]
        ratios = [f"{results[t][metric] / base[metric]:.3f}" for t in trees[1:]]
        print(f"| {metric} | " + " | ".join(values + ratios) + " |")


if __name__ == "__main__":
    main()
