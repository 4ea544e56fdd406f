"""The real tools a test needs, found on PATH — or a clear failure that says how to get them.

CI installs every tool the tests use (``.ci/run``), so a missing one fails the test with the
package to install: a test that skipped there would hide that it never ran. A developer without
them can set ``FETCHPROXY_TEST_SKIP_MISSING_TOOLS=1`` to skip those tests instead; under CI
(``CI`` set) the variable is refused, so a missing tool still fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SKIP_VARIABLE = "FETCHPROXY_TEST_SKIP_MISSING_TOOLS"


def missing_tool(message: str) -> None:
    """Fail (or, outside CI with :data:`SKIP_VARIABLE` set, skip) the test with ``message``."""
    text = f"{message} (.ci/run installs it; {SKIP_VARIABLE}=1 skips such tests outside CI)"
    if os.environ.get(SKIP_VARIABLE) and not os.environ.get("CI"):
        pytest.skip(text)
    pytest.fail(text)


def require(*tools: str, install: str) -> dict[str, Path]:
    """The path of each of ``tools``; ``install`` says how to get the missing ones (e.g.
    ``apt-get install maven``)."""
    found = {tool: shutil.which(tool) for tool in tools}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        missing_tool(f"{', '.join(missing)} not found on PATH: {install}")
    return {tool: Path(path) for tool, path in found.items() if path is not None}
