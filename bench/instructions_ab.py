"""Work per 1 KiB HTTPS replay hit, counted rather than timed: source trees side by side.

    python bench/instructions_ab.py --tree ../before --tree .
    python bench/instructions_ab.py --tree ../before --tree . --requests 4000
    python bench/instructions_ab.py --tree ../before --tree . --connections 1 --keep /tmp/cg

On a machine shared with other jobs, CPU seconds per request move with the neighbours (caches,
frequency, scheduling), by more than the change being judged. Valgrind's callgrind counts
instead: each tree's ``fetchproxy serve replay`` (the direct engine, as in ``ab_bench.py``'s
``small``) runs under it with instrumentation off, is warmed up with 300 hits (handshakes,
the small-body cache), then counts only ``--requests`` hits over ``--connections`` (8)
keep-alive connections through ``CONNECT`` and TLS. Per hit it reports the instructions
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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ab_bench import ORIGIN_PORT, make_fixture, serve_argv, tree_env
from proxybench.loadgen import Target, run_requests
from proxybench.systems import Services

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


def measure(
    tree: Path, hits: int, connections: int, work: Path, services: Services
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
    run_requests(target, WARMUP, connections=connections)
    control = ["callgrind_control", "--instr"]
    subprocess.run([*control, "on", str(service.pid)], check=True, capture_output=True)
    run_requests(target, hits, connections=connections)
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
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: apt-get install valgrind")
    trees = [tree.resolve() for tree in args.tree]
    work = Path(tempfile.mkdtemp(prefix="instructions-ab-"))
    try:
        with Services(work) as services:
            results = {
                tree: measure(tree, args.requests, args.connections, work / str(i), services)
                for i, tree in enumerate(trees)
            }
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for i in range(len(trees)):
                shutil.copyfile(work / str(i) / "callgrind.out", args.keep / f"{i}.out")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results[trees[0]]
    print(
        f"\n### per 1 KiB HTTPS hit, {args.requests} hits over {args.connections} "
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
