"""`fetchproxy demo` runs the whole story and reproduces the committed demo lock byte for byte.

The demo's origin listens at a fixed address (127.0.0.2:18443, so that its lock is the same on
every machine). Each test runs the demo in a network namespace of its own, where that address is
free whatever the host's processes hold.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

DEMO_LOCK = REPO / "lockfiles" / "demo.lock.toml"
OWN_NETWORK = ("unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "--")
"""A command prefix: run in a fresh network namespace whose loopback is up."""


@pytest.mark.root
def test_demo_runs_every_step_and_reproduces_the_committed_lock(tmp_path: Path) -> None:
    """... while another process holds the host's 127.0.0.2:18443: it runs in its own namespace."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.2", 18443))
        holder.listen()
        result = subprocess.run(
            [*OWN_NETWORK, sys.executable, "-m", "fetchproxy", "demo", "--dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    for step in range(1, 7):
        assert f"== {step}/6 " in result.stdout
    assert "all 3 files byte-identical to the recorded run" in result.stdout
    assert "(exit status 3)" in result.stdout
    assert "CONTENT DRIFT" in result.stdout or "content drift" in result.stdout
    assert (tmp_path / "fetchproxy.lock.toml").read_bytes() == DEMO_LOCK.read_bytes()


@pytest.mark.root
def test_without_root_the_demo_says_so_and_uses_the_user_sandbox(tmp_path: Path) -> None:
    """Root keeping only CAP_SETFCAP stands in for a user: no root sandbox is possible."""
    result = subprocess.run(
        [
            *OWN_NETWORK,
            *("setpriv", "--bounding-set=-all,+setfcap", "--inh-caps=-all"),
            *(sys.executable, "-m", "fetchproxy", "demo", "--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "note: not root: the build runs in the unprivileged user sandbox" in result.stdout
    assert "a direct connection around the proxy fails" in result.stdout
    assert (tmp_path / "fetchproxy.lock.toml").read_bytes() == DEMO_LOCK.read_bytes()
