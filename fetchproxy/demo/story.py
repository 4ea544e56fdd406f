"""``fetchproxy demo``: the whole story on embedded defaults, with no network and no set-up.

A local HTTPS origin with its own CA; a small build script recorded in the sandbox (or, without
root, with ``--no-sandbox``, said so); the lock it wrote; the origin stopped and the same build
replayed byte-identically; a build that fetches one new URL refused with exit status 3; and the
reviewer's view of a change with ``lock diff``. Every step prints the command it runs.
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from fetchproxy.demo.origin import BASE, HOST, PORT, DemoOrigin
from fetchproxy.sandbox import available_sandbox

BUILD = f"""\
# The demo's build: fetch an index, the latest release (through a redirect), a pinned
# release, and probe for an optional file that does not exist.
set -e
out=$1
curl -fsS {BASE}/index.txt -o "$out/index.txt"
curl -fsSL {BASE}/latest -o "$out/tool-latest.tar.gz"
curl -fsS {BASE}/pool/tool-1.0.tar.gz -o "$out/tool-1.0.tar.gz"
if curl -fsS {BASE}/pool/OPTIONAL -o "$out/OPTIONAL" 2>/dev/null; then :; else
  echo "build: no OPTIONAL file (404), carrying on"
fi
echo "build: fetched $(ls "$out" | wc -l) files"
if curl -sS --noproxy '*' --max-time 3 {BASE}/index.txt -o /dev/null 2>/dev/null; then
  echo "build: reached the origin directly, around the proxy (no sandbox)"
else
  echo "build: a direct connection around the proxy fails: the sandbox has no other route"
fi
"""

BUILD_NEW = f"""\
# The same build after someone added one more download, which it treats as optional.
set -e
sh build.sh "$1"
curl -fsS {BASE}/pool/NOTICE -o "$1/NOTICE" || echo "build: no NOTICE, carrying on"
"""

BUILD_V2 = f"""\
# The build after an upgrade: tool 1.1 instead of 1.0, and the NOTICE file.
set -e
out=$1
curl -fsS {BASE}/index.txt -o "$out/index.txt"
curl -fsSL {BASE}/latest -o "$out/tool-latest.tar.gz"
curl -fsS {BASE}/pool/tool-1.1.tar.gz -o "$out/tool-1.1.tar.gz"
curl -fsS {BASE}/pool/NOTICE -o "$out/NOTICE"
"""


class Demo:
    def __init__(self, directory: Path, *, sandbox: bool) -> None:
        self.dir = directory
        self.sandbox = sandbox
        self.steps = 6
        self.step = 0
        self.env = {
            **os.environ,
            # relative to the demo's directory, where every command runs
            "FETCHPROXY_STORE": "store",
            "FETCHPROXY_LOCK": "fetchproxy.lock.toml",
        }

    def heading(self, title: str) -> None:
        self.step += 1
        print(f"\n== {self.step}/{self.steps} {title}", flush=True)

    def say(self, text: str) -> None:
        for line in text.rstrip("\n").split("\n"):
            print(f"   {line}")
        sys.stdout.flush()

    def fetchproxy(
        self, *args: str, expect: Sequence[int] = (0,)
    ) -> subprocess.CompletedProcess[str]:
        shown = list(args)
        self.say(f"$ fetchproxy {shlex.join(shown)}")
        result = _with_progress(
            [sys.executable, "-m", "fetchproxy", *args], cwd=self.dir, env=self.env
        )
        output = (result.stdout + result.stderr).rstrip("\n")
        if output:
            self.say(output)
        if result.returncode not in expect:
            raise DemoFailedError(
                f"`fetchproxy {shlex.join(shown)}` exited {result.returncode}, expected "
                f"{' or '.join(map(str, expect))}"
            )
        self.say(f"(exit status {result.returncode})")
        return result

    def run_flags(self) -> list[str]:
        return [] if self.sandbox else ["--no-sandbox"]


class DemoFailedError(Exception):
    """A step did not do what the demo shows it doing: a bug, reported as such."""


def _with_progress(
    argv: list[str], *, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; on a terminal, a spinner shows while it takes more than a second."""
    done = threading.Event()

    def spin() -> None:
        if done.wait(1.0):
            return
        for frame in itertools.cycle("|/-\\"):
            sys.stderr.write(f"\r   {frame} running…")
            sys.stderr.flush()
            if done.wait(0.15):
                sys.stderr.write("\r" + " " * 20 + "\r")
                return

    spinner = threading.Thread(target=spin, daemon=True) if sys.stderr.isatty() else None
    if spinner is not None:
        spinner.start()
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    finally:
        done.set()
        if spinner is not None:
            spinner.join()


def run_demo(directory: Path | None = None) -> int:
    """Run the demo in ``directory`` (a fresh temporary one by default); the exit status."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="fetchproxy-demo-") as tmp:
            return _run(Path(tmp))
    directory.mkdir(parents=True, exist_ok=True)
    return _run(directory)


def _run(directory: Path) -> int:
    kind, reason = available_sandbox("auto")
    print("fetchproxy demo: record a build's fetches, replay them, refuse anything new.")
    print(f"working in {directory}")
    if kind == "user":
        print("note: not root: the build runs in the unprivileged user sandbox (loopback only).")
    elif kind is None:
        print(f"note: {reason}\nnote: the demo runs the build with --no-sandbox instead.")
    demo = Demo(directory, sandbox=kind is not None)
    (directory / "build.sh").write_text(BUILD)
    (directory / "build-new.sh").write_text(BUILD_NEW)
    (directory / "build-v2.sh").write_text(BUILD_V2)
    for name in ("out-record", "out-replay", "out-new", "out-v2"):
        (directory / name).mkdir(exist_ok=True)
    started = time.monotonic()
    try:
        _story(demo, directory)
    except DemoFailedError as exc:
        print(f"\nfetchproxy demo: FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"\nfetchproxy demo: done in {time.monotonic() - started:.1f} s.")
    return 0


def _story(demo: Demo, directory: Path) -> None:
    origin = DemoOrigin(directory)
    demo.heading("A local HTTPS origin with its own CA")
    origin.start()
    demo.say(f"serving {BASE}/ : an index, a redirect, two 3 MiB tarballs, a NOTICE file")
    try:
        demo.heading("Record: the build runs in the sandbox, and every fetch goes into the lock")
        demo.say("build.sh:\n" + BUILD)
        demo.fetchproxy(
            "record",
            *demo.run_flags(),
            "--allow-origin",
            f"{HOST}:{PORT}",
            "--upstream-ca",
            origin.ca_path.name,
            "--",
            "sh",
            "build.sh",
            "out-record",
        )
        demo.heading("The lock it wrote: fetchproxy.lock.toml")
        demo.say((directory / "fetchproxy.lock.toml").read_text())
    finally:
        origin.stop()

    demo.heading("The origin is gone: replay serves the same bytes from the store")
    demo.fetchproxy("replay", *demo.run_flags(), "--", "sh", "build.sh", "out-replay")
    recorded = _files(directory / "out-record")
    replayed = _files(directory / "out-replay")
    if recorded != replayed:
        raise DemoFailedError("replayed files differ from the recorded ones")
    demo.say(f"all {len(recorded)} files byte-identical to the recorded run")

    demo.heading("A build that fetches something new is refused, and says so")
    demo.say("build-new.sh:\n" + BUILD_NEW)
    demo.fetchproxy("replay", *demo.run_flags(), "--", "sh", "build-new.sh", "out-new", expect=(3,))
    log = (directory / "fetchproxy.lock.log.jsonl").read_text().strip().split("\n")
    demo.say("the event log (fetchproxy.lock.log.jsonl) says:\n" + log[-1])

    demo.heading("Reviewing an upgrade: the new lock against the old one")
    demo.say(
        "Later, the build moves to tool 1.1 and fetches NOTICE; meanwhile the origin has\n"
        "re-published index.txt with different bytes under the same URL."
    )
    origin = DemoOrigin(directory, revision=2)
    origin.start()
    try:
        demo.fetchproxy(
            "record",
            *demo.run_flags(),
            "--allow-origin",
            f"{HOST}:{PORT}",
            "--upstream-ca",
            origin.ca_path.name,
            "--lock",
            "v2.lock.toml",
            "--",
            "sh",
            "build-v2.sh",
            "out-v2",
        )
    finally:
        origin.stop()
    demo.fetchproxy("lock", "diff", "fetchproxy.lock.toml", "v2.lock.toml", expect=(1,))


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}
