"""What a sandboxed build costs: sandbox set-up, the build's start, and teardown, per source tree.

    python bench/sandbox_bench.py                                   # this checkout
    python bench/sandbox_bench.py --tree ../before --tree . --rounds 10
    python bench/sandbox_bench.py --tree ../before --tree . --sandbox user --terminal
    python bench/sandbox_bench.py --tree ../before --tree . --command "$(cat build.sh)" --runs 2

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
``--command``: the build is ``sh -c COMMAND`` instead of ``/bin/true``, run in a fresh
directory with a fresh ``HOME`` beside it (outside /tmp, which the sandbox makes private),
and a first row runs it without any sandbox: the whole-build overhead. ``--replay``: each
tree runs the build as users do, ``fetchproxy replay -- sh -c COMMAND`` (a lock with no entry,
so the proxy, the sandbox, the build and the summary, in a process of its own), against the
same build run directly.

    python bench/sandbox_bench.py --tree ../before --tree . --replay --command "$(cat build.sh)"
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
import json, os, pathlib, shutil, subprocess, sys, tempfile, time
import fetchproxy
from fetchproxy.sandbox import Sandbox, UserSandbox
kind, runs, base, command = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3]), sys.argv[5]
argv = ["sh", "-c", command] if command else ["/bin/true"]
env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"}
times = []
for _ in range(runs):
    run = pathlib.Path(tempfile.mkdtemp(dir=base))
    (run / "work").mkdir()
    (run / "home").mkdir()
    env["HOME"] = str(run / "home")
    start = time.perf_counter()
    if kind == "direct":
        done = subprocess.run(argv, env=env, cwd=run / "work", stdout=subprocess.DEVNULL)
        status = done.returncode
    elif kind == "replay":  # the product, as users run it: proxy, sandbox, build, summary
        lock = run / "fetchproxy.lock.toml"
        lock.write_text("version = 1\\n")
        replay = [sys.executable, "-m", "fetchproxy", "replay", "--lock", str(lock),
                  "--store", str(run / "store"), "--", *argv]
        replay_env = {**env, "PYTHONPATH": os.environ["PYTHONPATH"]}
        done = subprocess.run(replay, env=replay_env, cwd=run / "work",
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        status = done.returncode
    else:
        with (Sandbox if kind == "root" else UserSandbox)() as sandbox:
            out = os.open(os.devnull, os.O_WRONLY)
            status = sandbox.spawn(argv, env=env, cwd=run / "work", stdout=out).wait()
            os.close(out)
    times.append(time.perf_counter() - start)
    assert status == 0, status
    shutil.rmtree(run)
result = json.dumps({"package": fetchproxy.__file__, "times": times})
with open(sys.argv[4], "w") as f:
    f.write(result)
"""


def run_tree(
    tree: Path, kind: str, runs: int, base: Path, build: str, *, terminal: bool
) -> list[float]:
    """``runs`` timings (seconds) from a fresh process that imports fetchproxy from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        # -P: not the current directory first on sys.path, PYTHONPATH decides
        command = [sys.executable, "-P", "-c", CHILD, kind, str(runs), str(base), out.name, build]
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
    parser.add_argument("--command", default="", help="the build, for sh -c (default: true)")
    parser.add_argument(
        "--replay", action="store_true", help="each tree's `fetchproxy replay -- BUILD`"
    )
    options = parser.parse_args()
    trees: list[Path] = options.tree or [Path(__file__).resolve().parent.parent]
    for tree in trees:  # the supervisor runs with -B: without .pyc files it compiles each time
        compileall.compile_dir(tree / "fetchproxy", quiet=1)
    # (label, tree, kind): without a sandbox first when the build is a real one
    kind = "replay" if options.replay else options.sandbox
    systems = [(str(tree), tree, kind) for tree in trees]
    if options.command or options.replay:
        systems.insert(0, ("no sandbox", trees[0], "direct"))
    samples: dict[str, list[float]] = {label: [] for label, _, _ in systems}
    ratios: dict[str, list[float]] = {label: [] for label, _, _ in systems}
    # not under /tmp: the build's HOME must be a host directory the sandbox shows as it is
    with tempfile.TemporaryDirectory(prefix=".sandbox-bench-", dir=Path.home()) as work:
        for round_number in range(options.rounds):
            shift = round_number % len(systems)
            medians = {}
            for label, tree, kind in systems[shift:] + systems[:shift]:
                times = run_tree(
                    tree,
                    kind,
                    options.runs,
                    Path(work),
                    options.command,
                    terminal=options.terminal,
                )
                samples[label] += times
                medians[label] = statistics.median(times)
            for label, _, _ in systems:
                ratios[label].append(medians[label] / medians[systems[0][0]])
            print(f"round {round_number + 1}/{options.rounds} done", file=sys.stderr)
    load = Path("/proc/loadavg").read_text().split()[:3]
    build = "sh -c COMMAND" if options.command else "/bin/true"
    how = "`fetchproxy replay --`" if options.replay else f"{options.sandbox} sandbox"
    print(
        f"{how}, {build}, {'with' if options.terminal else 'without'} a "
        "terminal; "
        f"{options.rounds} rounds x {options.runs} runs per tree; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {' '.join(load)}\n"
    )
    print("| tree | median | min | max | vs first row (median of per-round ratios) |")
    print("|---|--:|--:|--:|--:|")
    for label, _, _ in systems:
        times = samples[label]
        print(
            f"| {label} | {statistics.median(times) * 1000:.1f} ms | {min(times) * 1000:.1f} ms "
            f"| {max(times) * 1000:.1f} ms | {statistics.median(ratios[label]):.2f} |"
        )


if __name__ == "__main__":
    main()
