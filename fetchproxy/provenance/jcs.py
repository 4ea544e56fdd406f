"""Canonical JSON: the JSON Canonicalization Scheme (RFC 8785), for the values this package makes.

Objects with string keys, arrays, strings, integers, booleans and null. Floats are refused
(nothing here needs one, and their canonical form is the hard part of RFC 8785), as are integers
beyond 2**53-1, which not every reader holds exactly, and strings that are not Unicode (a lone
surrogate). The output is UTF-8: no whitespace, object members sorted by their names' UTF-16
code units, strings escaped only where JSON must (RFC 8785 section 3.2.2.2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

MAX_INTEGER: Final = 2**53 - 1

_ESCAPE_RE: Final = re.compile(r'["\\\x00-\x1f]')
_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")


class CanonicalJSONError(ValueError):
    """A value RFC 8785 cannot canonicalize here; the message names where it is."""


def canonical_json(value: object) -> bytes:
    """The RFC 8785 bytes of ``value``; raise :class:`CanonicalJSONError` naming the bad part."""
    parts: list[str] = []
    _write(value, parts, "$")
    return "".join(parts).encode("utf-8")


def _write(value: object, parts: list[str], where: str) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        if abs(value) > MAX_INTEGER:
            raise CanonicalJSONError(f"{where}: {value} is beyond 2**53-1")
        parts.append(str(int(value)))
    elif isinstance(value, str):
        parts.append(_string(value, where))
    elif isinstance(value, Mapping):
        _write_object(value, parts, where)
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _write(item, parts, f"{where}[{index}]")
        parts.append("]")
    else:
        raise CanonicalJSONError(f"{where}: {type(value).__name__} has no canonical JSON form")


def _write_object(value: Mapping[object, object], parts: list[str], where: str) -> None:
    names: list[str] = []
    for name in value:
        if not isinstance(name, str):
            raise CanonicalJSONError(f"{where}: member name {name!r} is not a string")
        names.append(name)
    parts.append("{")
    for index, name in enumerate(sorted(names, key=_utf16_order)):
        if index:
            parts.append(",")
        parts.append(_string(name, where))
        parts.append(":")
        _write(value[name], parts, f"{where}.{name}")
    parts.append("}")


def _utf16_order(name: str) -> bytes:
    # Big-endian UTF-16 bytes compare as the code units do.
    return name.encode("utf-16-be", "surrogatepass")


def _string(text: str, where: str) -> str:
    if _SURROGATE_RE.search(text):
        raise CanonicalJSONError(f"{where}: a string holds a lone surrogate, which is not Unicode")
    return '"' + _ESCAPE_RE.sub(_escape, text) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match[0]
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"
