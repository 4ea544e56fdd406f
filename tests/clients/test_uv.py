"""uv through the real sandbox: ``uv pip install`` from a static index, recorded and replayed.

uv (Rust, reqwest with rustls) reads ``HTTPS_PROXY`` and trusts ``SSL_CERT_FILE``: what
fetchproxy sets is enough, uv gets no flag or variable of its own for the network. The index is
served as a CDN serves files (HEAD, ``Accept-Ranges: bytes``, ``206`` for a ``Range``), in two
shapes:

- **without PEP 658 metadata** uv reads each wheel's ``METADATA`` out of the wheel itself: a
  HEAD, then a ``Range`` GET of the zip's tail, and later the whole wheel. This is where record
  and replay used to differ: record answered the ``Range`` with the whole body (uv then took the
  host for one without ranges and sent no HEAD for the next wheel), a replayed HEAD lacked
  ``Accept-Ranges``, and whether uv sends a HEAD at all depends on its concurrency;
- **with PEP 658/714** ``.metadata`` files (``data-core-metadata``), which uv reads instead.

Each is recorded once, the origin is stopped, and the install is replayed ``--exact`` several
times, each with a fresh uv cache and target: the same installed files every time, every lock
entry used, nothing refused, no origin connection.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.clients.support.builds import LOCK, events, fetchproxy, prepare_work
from tests.clients.support.pip_index import BASE_PYTHON, installed
from tests.support.real_origins import HTTPSOrigin, make_wheel, simple_index, static_site
from tests.support.tools import missing_tool

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

REPLAYS = 5
"""Replays of one lock, each from a fresh cache, each ``--exact``. Before record answered ranges,
uv's timing decided whether a replay sent a HEAD (none in 8 of 37 replays, and --exact failed)."""

UV_WHEELS = (
    make_wheel(
        "demo-dep",
        "1.0",
        {
            "demo_dep/__init__.py": 'GREETING = "hello from demo-dep"\n',
            # incompressible, so the wheel is bigger than the 16 KiB tail uv reads by range
            "demo_dep/blob.txt": random.Random(1).randbytes(48 * 1024).hex(),
        },
    ),
    make_wheel(
        "demo-pkg",
        "1.0",
        {"demo_pkg/__init__.py": 'from demo_dep import GREETING\n\nVERSION = "1.0"\n'},
        requires=["demo-dep>=1.0"],
    ),
)


def uv() -> str:
    """uv, installed beside this Python (``pip install uv``): the sandbox sees the venv."""
    found = Path(sys.executable).parent / "uv"
    if not found.is_file():
        missing_tool(f"uv not found beside {sys.executable}: pip install uv")
    return str(found)


def uv_install(index_url: str, *more: str) -> list[str]:
    return [uv(), "pip", "install", "--index-url", index_url, "--target", "site", "demo-pkg", *more]


def uv_env(work: Path, run: str) -> dict[str, str]:
    """A fresh cache for each run (a warm one would satisfy the install with no request), no
    uv configuration file, the base Python, no Python downloads; uv's client says what it does
    (``RUST_LOG``: its HEADs and its range reads)."""
    return {
        "UV_CACHE_DIR": str(work / f"uv-cache-{run}"),
        "UV_NO_CONFIG": "1",
        "UV_PYTHON": BASE_PYTHON,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
        "RUST_LOG": "uv_client=trace",
    }


def locked(work: Path) -> list[tuple[str, str]]:
    """(method, path) of each lock entry, in the lock's order."""
    entries = tomllib.loads((work / LOCK).read_text())["fetch"]
    return [(e["method"], e["url"].split("/", 3)[3]) for e in entries]


def range_reads(output: str) -> list[str]:
    """The wheels uv read its metadata from by range, in its own words."""
    return re.findall(r"Getting metadata for `([^`]+)` by range request", output)


def heads(output: str) -> list[str]:
    """The wheels uv sent a HEAD for."""
    return re.findall(r"Sending fresh HEAD request for: \S+/files/(\S+)", output)


WHEELS = sorted(w.filename for w in UV_WHEELS)
SITE = [
    ".lock",  # uv's own, empty
    *(
        f"{package}{suffix}"
        for package in ("demo_dep", "demo_pkg")
        for suffix in (
            # uv marks every package it installs REQUESTED
            *(f"-1.0.dist-info/{n}" for n in ("INSTALLER", "METADATA", "RECORD", "REQUESTED")),
            "-1.0.dist-info/WHEEL",
            "/__init__.py",
            *(("/blob.txt",) if package == "demo_dep" else ()),
        )
    ),
]


@pytest.mark.parametrize("metadata", [False, True], ids=["range-reads", "pep658-metadata"])
def test_uv_installs_the_same_from_every_replay(tmp_path: Path, metadata: bool) -> None:
    """Without PEP 658, uv reads both wheels' metadata by range in record and in every replay:
    record answers its ``Range`` with ``206`` from the whole body (the origin gets no
    ``Range``), as replay does, and the replayed HEAD says ``Accept-Ranges`` as the origin's
    did. A HEAD counts as used when its GET was served, so ``--exact`` holds when uv sends
    none."""
    files = simple_index(UV_WHEELS, metadata=metadata)
    work, store = prepare_work(tmp_path), tmp_path / "store"
    with HTTPSOrigin(tmp_path / "origin", static_site(files, ranges=True)) as origin:
        index_url = f"{origin.url}/simple/"
        recorded = fetchproxy(
            work, store, "record", "--upstream-ca", origin.ca_path,
            "--", *uv_install(index_url), env=uv_env(work, "record"),
        )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    site = installed(work / "site")
    assert sorted(site) == SITE
    index = [("GET", "simple/demo-dep/"), ("GET", "simple/demo-pkg/")]
    if metadata:
        assert locked(work) == [
            *(
                ("GET", f"files/{wheel}{suffix}")
                for wheel in WHEELS
                for suffix in ("", ".metadata")
            ),
            *index,
        ]
        assert range_reads(recorded.stderr) == heads(recorded.stderr) == []
    else:
        assert locked(work) == [
            *((method, f"files/{wheel}") for wheel in WHEELS for method in ("GET", "HEAD")),
            *index,
        ]
        assert sorted(range_reads(recorded.stderr)) == sorted(heads(recorded.stderr)) == WHEELS
        assert [r.header("range") for r in origin.requests if r.method == "GET"] == [""] * 6

    for n in range(REPLAYS):
        shutil.rmtree(work / "site")
        replayed = fetchproxy(
            work, store, "replay", "--exact", "--", *uv_install(index_url),
            env=uv_env(work, f"replay-{n}"),
        )  # fmt: skip
        assert_replay_exact(replayed, work)
        assert installed(work / "site") == site
        assert sorted(range_reads(replayed.stderr)) == ([] if metadata else WHEELS)
    if not metadata:
        # the same two packages asked for with --no-deps: uv reads no metadata and sends no
        # HEAD, and the HEAD entries are used by their GETs, as when uv's timing leaves one out
        shutil.rmtree(work / "site")
        replayed = fetchproxy(
            work, store, "replay", "--exact", "--", *uv_install(index_url, "--no-deps", "demo-dep"),
            env=uv_env(work, "no-heads"),
        )  # fmt: skip
        assert_replay_exact(replayed, work)
        assert heads(replayed.stderr) == range_reads(replayed.stderr) == []
        assert installed(work / "site") == site


def assert_replay_exact(replayed: subprocess.CompletedProcess[str], work: Path) -> None:
    """The replay succeeded under ``--exact``: nothing refused, every entry used (how many
    requests that took depends on the HEADs uv sent)."""
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert re.search(
        rf"^fetchproxy: served \d+ fetches \([^)]*\) from {LOCK}; refused 0$",
        replayed.stderr,
        re.MULTILINE,
    ), replayed.stderr
    assert "went unused" not in replayed.stderr
    assert events(work) == []
