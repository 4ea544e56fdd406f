"""The import guard: while the build runs, the launcher loads no code (fetchproxy.run.imports)."""

from __future__ import annotations

import subprocess
import sys


def test_an_import_while_the_build_runs_is_refused_and_said() -> None:
    """In a fresh interpreter (the guard's audit hook stays for the process's life)."""
    code = (
        "import logging, sys\n"
        "from fetchproxy.run.imports import ImportGuard, preload\n"
        "logging.basicConfig(format='%(message)s')\n"
        "preload(mitmproxy=False)\n"
        "before = set(sys.modules)\n"
        "with ImportGuard() as guard:\n"
        "    import json  # loaded already: fine\n"
        "    try:\n"
        "        import colorsys\n"
        "    except ImportError as exc:\n"
        "        print('refused:', exc)\n"
        "print(sorted(set(sys.modules) - before), guard.refused)\n"
        "import colorsys  # after the build: allowed again\n"
        "print('colorsys' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "refused: fetchproxy: no code is loaded while the build runs (colorsys)",
        "[] ['colorsys']",
        "True",
    ]
    assert "refused to load colorsys while the build ran" in done.stderr
