"""A real build through fetchproxy, as the real-client tests run one: :func:`fetchproxy` runs
``fetchproxy ARGS`` from the build's working directory (:func:`prepare_work`) with an
environment free of local configuration; :func:`lock_entries`, :func:`events` and
:func:`assert_replay_served` read what the run left; :func:`resolving` gives a client a host
name for the origins' address (Go-based clients never proxy a loopback IP)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.cli import with_test_origins
from tests.support.real_origins import HOST
from tests.support.tools import require

LOCK = "fetchproxy.lock.toml"


def fetchproxy(
    work: Path,
    store: Path,
    *args: str | Path,
    env: Mapping[str, str] = {},
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``fetchproxy ARGS`` run from ``work`` (after ``prefix``), with a build environment free
    of local config."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PIP_", "FETCHPROXY_"))
    }
    return subprocess.run(
        [*prefix, sys.executable, "-m", "fetchproxy", *with_test_origins([str(a) for a in args])],
        cwd=work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **base,
            "FETCHPROXY_STORE": str(store),
            "HOME": str(work / "home"),  # under the working directory: the build sees it
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "PIP_CONFIG_FILE": os.devnull,  # pip reads no configuration file at all
            "PIP_NO_INPUT": "1",
            **env,
        },
    )


def lock_entries(work: Path) -> int:
    return (work / LOCK).read_text().count("\n[[fetch]]\n")


def events(work: Path) -> list[dict[str, object]]:
    log = work / "fetchproxy.lock.log.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    found = [json.loads(line) for line in lines if line.strip()]
    return [event for event in found if event["event"] not in ("used", "fetch-set")]


def assert_replay_served(
    replayed: subprocess.CompletedProcess[str], work: Path, *, requests: int
) -> None:
    """The replay succeeded, answered ``requests`` requests and used every lock entry."""
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    summary = re.search(
        rf"^fetchproxy: served (\d+) fetch(?:es)? \([^)]*\) from {LOCK}; refused (\d+)$",
        replayed.stderr,
        re.MULTILINE,
    )
    assert summary is not None, replayed.stderr
    assert (int(summary[1]), int(summary[2])) == (requests, 0)
    assert "went unused" not in replayed.stderr
    assert events(work) == []  # no refusal, no unused entry


def prepare_work(tmp_path: Path) -> Path:
    """The build's working directory (a subdirectory: /tmp's own children are private)."""
    work = tmp_path / "work"
    (work / "home").mkdir(parents=True)
    return work


def resolving(tmp_path: Path, name: str, *, address: str = HOST) -> list[str]:
    """A command prefix: run in a private mount namespace whose /etc/hosts also maps ``name`` to
    the origins' 127.0.0.2, or ``address`` (the host's file is never touched)."""
    require("unshare", install="apt-get install util-linux")
    hosts = tmp_path / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n{address} {name}\n")
    script = 'mount --bind "$0" /etc/hosts && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(hosts)]
