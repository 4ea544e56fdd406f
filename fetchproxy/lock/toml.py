"""TOML spellings, for the lock's writer and for messages: values as TOML writes them."""

from __future__ import annotations

import datetime
import re
from typing import Final

_LITERAL_UNSAFE_RE = re.compile(r"['\x00-\x1f\x7f]")
"""What a TOML literal string (``'...'``) cannot hold, or holds unreadably (a tab)."""
_BASIC_ESCAPE_RE = re.compile(r'["\\\x00-\x1f\x7f]')
"""What a TOML basic string must escape."""
_BASIC_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")
"""A TOML bare key: what may stand unquoted before the `=`."""


def toml_basic_string(text: str) -> str:
    """``text`` as a TOML basic string: ``"..."``, escaping quotes, backslashes and controls."""
    return '"' + _BASIC_ESCAPE_RE.sub(_basic_escape, text) + '"'


def _basic_escape(match: re.Match[str]) -> str:
    char = match[0]
    return _BASIC_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def toml_spelling(value: object) -> str:
    """``value`` as TOML spells it, for messages: ``true``, ``1.5``, ``'text'``, ``[1, 2]``.

    A string is a literal string (``'text'``) when one can hold it readably, else a basic string
    (``"it's\\n"``). Values TOML has no spelling for (only a caller of the API can pass one)
    keep Python's ``repr``.
    """
    if isinstance(value, str):
        return toml_basic_string(value) if _LITERAL_UNSAFE_RE.search(value) else f"'{value}'"
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # 1.5, 1e+16, inf, -inf, nan: Python's spelling is TOML's
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_spelling(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        pairs = (f"{toml_key(key)} = {toml_spelling(item)}" for key, item in value.items())
        return "{ " + ", ".join(pairs) + " }"
    return repr(value)


def toml_key(key: object) -> str:
    """``key`` as a TOML key: bare when it can be, else quoted."""
    if isinstance(key, str) and BARE_KEY_RE.fullmatch(key):
        return key
    return toml_basic_string(str(key))
