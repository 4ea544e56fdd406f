"""The ``fetchproxy`` command as tests run it: as a process, and its parser."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fetchproxy.cli import build_parser, chosen

TEST_ORIGINS = ("--allow-origin", "127.0.0.2")
"""The tests' origins listen on the host's loopback (127.0.0.2): a sandboxed ``record`` must be
told it may reach them (it reaches no host-local address otherwise)."""


def with_test_origins(args: Sequence[str]) -> list[str]:
    """``args`` with :data:`TEST_ORIGINS` after a leading ``record``."""
    if args and args[0] == "record":
        return ["record", *TEST_ORIGINS, *args[1:]]
    return list(args)


def run_fetchproxy(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    timeout: float = 120,
    test_origins: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``python -m fetchproxy ARGS`` as users run it (after ``prefix``, e.g. ``setpriv``), its
    output captured; ``env`` replaces the environment. A ``record`` may reach the tests'
    origins (:data:`TEST_ORIGINS`) unless ``test_origins`` is False."""
    argv = with_test_origins(args) if test_origins else list(args)
    return subprocess.run(
        [*prefix, sys.executable, "-m", "fetchproxy", *argv],
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
    """The event log's lines, without the end-of-replay ``used`` and ``fetch-set`` lines; the
    ``unused`` ones only when asked for."""
    events = [json.loads(line) for line in io.StringIO(log.read_text()) if line.strip()]
    hidden = {"used", "fetch-set"} if unused else {"used", "fetch-set", "unused"}
    return [e for e in events if e["event"] not in hidden]


def files_under(*roots: Path) -> Sequence[Path]:
    """Every regular file below ``roots`` (or the roots themselves when they are files)."""
    found: list[Path] = []
    for root in roots:
        if root.is_file():
            found.append(root)
        elif root.is_dir():
            found.extend(p for p in sorted(root.rglob("*")) if p.is_file())
    return found


def run_command(*argv: str) -> int:
    """Run ``fetchproxy ARGV`` in this process as :func:`fetchproxy.cli.main` would, but let
    what it raises escape (``main`` turns it into a message and status 2)."""
    command = chosen(argv)
    assert command is not None, f"no command in {argv}"
    args = build_parser(only=command.words).parse_args(argv)
    status: int = importlib.import_module(f"fetchproxy.cli.{command.module}").run(args)
    return status
