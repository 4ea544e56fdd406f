"""The exit statuses: one enum, and the README's table says exactly what it says."""

from __future__ import annotations

import re

from fetchproxy.run.outcome import SIGNALLED, ExitStatus, build_status_code
from tests.support import REPO


def _readme_table() -> dict[str, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+|the build's own) \| (.+) \|$", text, flags=re.MULTILINE)
    return dict(rows)


def test_the_readme_lists_every_exit_status_and_no_other() -> None:
    table = _readme_table()
    assert sorted(int(code) for code in table if code.isdigit()) == sorted(ExitStatus)
    assert "the build's own" in table
    assert "128 + N" in table["the build's own"]


def test_the_readme_says_what_each_status_means() -> None:
    """A word from each status's docstring appears in its row (renumbering cannot slip by)."""
    table = _readme_table()
    assert "record could not store an answer" in table[str(ExitStatus.INCOMPLETE.value)]
    assert "usage error" in table[str(ExitStatus.USAGE.value)]
    assert "replay refused" in table[str(ExitStatus.NOT_HERMETIC.value)]
    assert "cannot be run" in table[str(ExitStatus.CANNOT_EXECUTE.value)]
    assert "cannot be found" in table[str(ExitStatus.NOT_FOUND.value)]


def test_a_signalled_build_exits_128_plus_the_signal() -> None:
    assert build_status_code(-9) == SIGNALLED + 9
    assert build_status_code(5) == 5
