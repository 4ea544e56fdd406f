"""What ``--intercept transparent`` costs a whole build, against the explicit proxy, same run.

    python bench/transparent_bench.py                       # 5 rounds, 40 fetches per build
    python bench/transparent_bench.py --rounds 10 --fetches 100

As root (the root sandbox). A local HTTPS origin on 127.0.0.30:443, named
``files.example.test`` in a mount namespace of this script's own (its /etc/hosts), serves
small files and a medium one. The build fetches them with curl (``--fetches`` small ones, one
connection each, and the large one) and Python's urllib (ten, on one process), the same
programs in every mode (Node's ``fetch`` is left out: it cannot use the explicit proxy, so the
builds would differ); it is recorded once,
then each round runs three replays (direct engine), their order rotated every round:

- ``explicit``: the default, every client told the proxy by the variables;
- ``explicit+rules``: the same build with ``--intercept transparent`` (the rules, the route and
  the DNS stub set up, but every client still goes to the explicit proxy);
- ``transparent``: ``--intercept transparent`` and every proxy variable removed, so each
  connection is a DNS lookup at the stub and a redirected TCP connection.

Each replay is timed whole (``fetchproxy replay -- sh build.sh``, the interpreter's start
included); the report gives each mode's median and the median of the per-round ratios to
``explicit``: compare by the ratios (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.origin import Origin, make_pki, standard_site  # noqa: E402

NAME = "files.example.test"
ADDRESS = "127.0.0.30"
UNSET = (
    "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY "
    "npm_config_proxy npm_config_https_proxy no_proxy NO_PROXY\n"
)


def build(fetches: int, *, explicit: bool) -> str:
    curl = "curl -sSf -o /dev/null" + ("" if explicit else " --noproxy '*'")
    small = f"https://{NAME}/small.txt"
    python = (
        "import urllib.request as u; "
        + ("o = u.build_opener(); " if explicit else "o = u.build_opener(u.ProxyHandler({})); ")
        + f"[o.open('{small}').read() for _ in range(10)]"
    )
    lines = [
        "set -e",
        f"for i in $(seq 1 {fetches}); do {curl} {small}; done",
        f"{curl} https://{NAME}/medium.bin",
        f'python3 -I -c "{python}"',
    ]
    return ("" if explicit else UNSET) + "\n".join(lines) + "\n"


def fetchproxy(work: Path, *args: str) -> float:
    """One whole run's seconds; the run must succeed."""
    hosts = work / "launcher-hosts"
    mount = 'mount --bind "$0" /etc/hosts && exec "$@"'
    env = {k: v for k, v in os.environ.items() if not k.startswith("FETCHPROXY_")}
    env["FETCHPROXY_STORE"] = str(work / "store")
    start = time.perf_counter()
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", mount, str(hosts), sys.executable, "-m", "fetchproxy", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"fetchproxy {' '.join(args)} failed:\n{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fetches", type=int, default=40)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.home()) as directory:
        work = Path(directory)
        (work / "launcher-hosts").write_text(f"127.0.0.1 localhost\n{ADDRESS} {NAME}\n")
        (work / "explicit.sh").write_text(build(options.fetches, explicit=True))
        (work / "transparent.sh").write_text(build(options.fetches, explicit=False))
        pki = make_pki(work / "pki", [NAME])
        with Origin(standard_site(), pki, address=(ADDRESS, 443), name=NAME, http2=False):
            ca = str(pki.ca_cert)
            record = (
                "record",
                "--allow-origin",
                NAME,
                "--allow-origin",
                ADDRESS,
                "--upstream-ca",
                ca,
            )
            fetchproxy(work, *record, "--", "sh", "explicit.sh")
            fetchproxy(work, *record, "--keep", "--intercept", "transparent", "--", "sh",
                       "transparent.sh")  # fmt: skip
        modes = {
            "explicit": ("replay", "--", "sh", "explicit.sh"),
            "explicit+rules": ("replay", "--intercept", "transparent", "--", "sh", "explicit.sh"),
            "transparent": ("replay", "--intercept", "transparent", "--", "sh", "transparent.sh"),
        }
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        names = list(modes)
        for round_ in range(options.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for mode in order:
                times[mode].append(fetchproxy(work, *modes[mode]))
    print(
        f"{options.rounds} rounds, a build of {options.fetches + 11} fetches; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'mode':<16} {'median':>9} {'ratio to explicit (median of rounds)':>38}")
    for mode in names:
        ratios = [t / e for t, e in zip(times[mode], times["explicit"], strict=True)]
        print(
            f"{mode:<16} {statistics.median(times[mode]) * 1000:>7.0f}ms "
            f"{statistics.median(ratios):>38.3f}"
        )


if __name__ == "__main__":
    main()
