"""docs/config.md lists every setting of fetchproxy.toml, and no other."""

from __future__ import annotations

import re

from fetchproxy.lock.config import SETTINGS
from tests.support import REPO


def test_every_setting_is_documented() -> None:
    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\| `([a-z-]+\.[a-z-]+)` \|", text, flags=re.MULTILINE)
    assert sorted(documented) == sorted(f"{s.table}.{s.key}" for s in SETTINGS)
