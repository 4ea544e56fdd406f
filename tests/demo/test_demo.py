"""`fetchproxy demo` runs the whole story and reproduces the committed demo lock byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

DEMO_LOCK = REPO / "lockfiles" / "demo.lock.toml"


@pytest.mark.root
def test_demo_runs_every_step_and_reproduces_the_committed_lock(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fetchproxy", "demo", "--dir", str(tmp_path)],
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
