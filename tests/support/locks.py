"""Lock entries for tests, spelled flat: the key's fields and the answer's side by side."""

from __future__ import annotations

from typing import Any

from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import KEY_FIELDS, Fetch

_KEY_ATTRS = frozenset(f.attr for f in KEY_FIELDS)


def make_fetch(**fields: Any) -> Fetch:
    """A :class:`Fetch` from ``method=…, url=…, status=…, digest=…`` and the rest (the key's
    fields go to its :class:`RequestKey`; ``method`` defaults to GET)."""
    key = {name: fields.pop(name) for name in list(fields) if name in _KEY_ATTRS}
    key.setdefault("method", "GET")
    return Fetch(key=RequestKey(**key), **fields)
