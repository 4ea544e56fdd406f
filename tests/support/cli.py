"""The ``fetchproxy`` command as tests run it: as a process, and its parser."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fetchproxy.cli import build_parser


def run_fetchproxy(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m fetchproxy ARGS`` as users run it (after ``prefix``, e.g. ``setpriv``), its
    output captured; ``env`` replaces the environment."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "fetchproxy", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def parse_cli(*argv: str) -> argparse.Namespace:
    """Arguments as the ``fetchproxy`` command parses them."""
    return build_parser().parse_args(argv)


def read_events(log: Path, *, unused: bool = False) -> list[dict[str, object]]:
    """The event log's lines; the end-of-replay ``unused`` lines only when asked for."""
    events = [json.loads(line) for line in io.StringIO(log.read_text()) if line.strip()]
    return [e for e in events if unused or e["event"] != "unused"]


def files_under(*roots: Path) -> Sequence[Path]:
    """Every regular file below ``roots`` (or the roots themselves when they are files)."""
    found: list[Path] = []
    for root in roots:
        if root.is_file():
            found.append(root)
        elif root.is_dir():
            found.extend(p for p in sorted(root.rglob("*")) if p.is_file())
    return found
