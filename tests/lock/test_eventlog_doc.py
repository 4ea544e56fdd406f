"""docs/event-log.md lists every event and every refusal reason the code writes, and no other."""

from __future__ import annotations

import re

from fetchproxy.lock.eventlog import EVENTS
from fetchproxy.replay.decisions import REASONS
from tests.support import REPO

DOC = (REPO / "docs" / "event-log.md").read_text(encoding="utf-8")


def _first_column(heading: str) -> list[str]:
    section = DOC.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE)


def test_every_event_is_documented() -> None:
    assert sorted(_first_column("## One shape")) == sorted(EVENTS)


def test_every_refusal_reason_is_documented() -> None:
    assert sorted(_first_column("## Refusal reasons")) == sorted(REASONS)
