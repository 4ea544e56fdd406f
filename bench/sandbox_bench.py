"""What a sandboxed build costs: sandbox set-up, the build's start, and teardown, per source tree.

    python bench/sandbox_bench.py                                   # this checkout
    python bench/sandbox_bench.py --tree ../before --tree . --rounds 10
    python bench/sandbox_bench.py --tree ../before --tree . --sandbox user --terminal

One run is what docs/sandbox.md measures: ``with Sandbox() as sandbox:
sandbox.spawn(["/bin/true"], ...).wait()``, timed from before ``__enter__`` to after
``__exit__``. Each round starts one process per tree (``PYTHONPATH`` = the tree, this
interpreter's packages) that does ``--runs`` such runs, the trees in turn, their order
rotated every round, so that a drift in the machine's load reaches every tree alike (each
tree's package is compiled first, as an installation is: the supervisor writes no .pyc). The
report gives each tree's median, minimum and maximum over all runs and the median of the
per-round ratios of medians to the first tree (the paired figure to compare by).
``--terminal`` runs the processes with a pty as their controlling terminal and stdin,
stdout and stderr, so that the build gets a terminal of its own (where the tree makes one).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import pty
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, pathlib, statistics, sys, time
import fetchproxy
from fetchproxy.sandbox import Sandbox, UserSandbox
kind, runs, cwd = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
cls = Sandbox if kind == "root" else UserSandbox
times = []
for _ in range(runs):
    start = time.perf_counter()
    with cls() as sandbox:
        status = sandbox.spawn(["/bin/true"], env={"PATH": "/usr/bin:/bin"}, cwd=cwd).wait()
        assert status == 0, status
    times.append(time.perf_counter() - start)
result = json.dumps({"package": fetchproxy.__file__, "times": times})
with open(sys.argv[4], "w") as f:
    f.write(result)
"""


def run_tree(tree: Path, kind: str, runs: int, cwd: Path, *, terminal: bool) -> list[float]:
    """``runs`` timings (seconds) from a fresh process that imports fetchproxy from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        # -P: not the current directory first on sys.path, PYTHONPATH decides
        command = [sys.executable, "-P", "-c", CHILD, kind, str(runs), str(cwd), out.name]
        if terminal:
            pid, controller = pty.fork()
            if pid == 0:
                os.execve(sys.executable, command, env)
            while True:  # drain what the terminal shows until the process is gone
                try:
                    if not os.read(controller, 65536):
                        break
                except OSError:
                    break
            _, status = os.waitpid(pid, 0)
            os.close(controller)
            if status != 0:
                raise SystemExit(f"{tree}: the timing process failed (status {status})")
        else:
            subprocess.run(command, env=env, check=True)
        result = json.loads(Path(out.name).read_text())
    expected = (tree.resolve() / "fetchproxy" / "__init__.py").as_posix()
    if result["package"] != expected:
        raise SystemExit(f"{tree}: imported {result['package']}, not {expected}")
    return [float(t) for t in result["times"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", help="a source tree (repeat)")
    parser.add_argument("--sandbox", choices=("root", "user"), default="root")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=10, help="runs per tree per round")
    parser.add_argument("--terminal", action="store_true", help="run under a pty")
    options = parser.parse_args()
    trees: list[Path] = options.tree or [Path(__file__).resolve().parent.parent]
    for tree in trees:  # the supervisor runs with -B: without .pyc files it compiles each time
        compileall.compile_dir(tree / "fetchproxy", quiet=1)
    samples: dict[Path, list[float]] = {tree: [] for tree in trees}
    ratios: dict[Path, list[float]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as work:
        for round_number in range(options.rounds):
            shift = round_number % len(trees)
            medians = {}
            for tree in trees[shift:] + trees[:shift]:
                times = run_tree(
                    tree, options.sandbox, options.runs, Path(work), terminal=options.terminal
                )
                samples[tree] += times
                medians[tree] = statistics.median(times)
            for tree in trees:
                ratios[tree].append(medians[tree] / medians[trees[0]])
            print(f"round {round_number + 1}/{options.rounds} done", file=sys.stderr)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"{options.sandbox} sandbox, {'with' if options.terminal else 'without'} a terminal; "
        f"{options.rounds} rounds x {options.runs} runs per tree; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {' '.join(load)}\n"
    )
    print("| tree | median | min | max | vs first tree (median of per-round ratios) |")
    print("|---|--:|--:|--:|--:|")
    for tree in trees:
        times = samples[tree]
        print(
            f"| {tree} | {statistics.median(times) * 1000:.1f} ms | {min(times) * 1000:.1f} ms "
            f"| {max(times) * 1000:.1f} ms | {statistics.median(ratios[tree]):.2f} |"
        )


if __name__ == "__main__":
    main()
