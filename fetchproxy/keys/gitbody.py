"""Canonical request bodies for git smart-HTTP fetches (``POST .../git-upload-pack``).

git's request body names the client (``agent=git/2.39.5``), the run (``session-id=...``, when
both sides set ``transfer.advertiseSID``) and whether stderr is a terminal (``no-progress``).
None of these selects the response's objects, yet keyed on raw bytes they make a lock recorded
on a laptop miss in CI. :func:`canonical_body` drops exactly those items, keeps everything
else (commands, ``want``/``have``/``shallow``/``deepen*``/``filter``/``done``, ``ref-prefix``,
side-band and other capabilities that shape the response) in the client's order, and
returns the result as pkt-lines, so the request key's body digest is taken over it.

Pure: no I/O. Anything it does not fully understand is returned unchanged and so keys on
its raw bytes: a miss, never a wrong answer.
"""

from __future__ import annotations

import re
import zlib

UPLOAD_PACK_REQUEST = "application/x-git-upload-pack-request"
MAX_INFLATED_SIZE = 64 * 1024 * 1024
"""Larger gzip bodies are keyed on their raw bytes rather than inflated."""

_FLUSH, _DELIM = 0, 1  # special pkt-lines "0000" and "0001"
_HEX4_RE = re.compile(rb"[0-9a-fA-F]{4}")
_VOLATILE_PREFIXES = (b"agent=", b"session-id=")
_Packet = bytes | int  # a payload, or the number of a special packet


def canonical_body(path: str, content_type: str | None, body: bytes) -> bytes:
    """The body a request is keyed on: canonical pkt-lines for upload-pack, else ``body``.

    ``body`` may still be gzip-compressed (git compresses bodies over 1 KiB and says so in
    ``Content-Encoding``); it is recognised by its magic bytes, which no pkt-line starts with,
    and the canonical form is the same as for the inflated body. Never raises.
    """
    if not body or not _is_upload_pack_request(path, content_type):
        return body
    data = _gunzip(body) if body.startswith(b"\x1f\x8b") else body
    packets = None if data is None else _parse_pkt_lines(data)
    if not packets:
        return body
    if isinstance(packets[0], bytes) and packets[0].startswith(b"command="):
        canonical = _canonical_v2(packets)
    elif isinstance(packets[0], bytes) and packets[0].startswith(b"want "):
        canonical = _canonical_v0(packets)
    else:
        canonical = None
    return body if canonical is None else _serialize(canonical)


def _is_upload_pack_request(path: str, content_type: str | None) -> bool:
    if content_type is None:
        return False
    media_type = content_type.partition(";")[0].strip(" \t").lower()
    return media_type == UPLOAD_PACK_REQUEST and path.partition("?")[0].endswith("/git-upload-pack")


def _canonical_v0(packets: list[_Packet]) -> list[_Packet] | None:
    """Protocol v0/v1: capabilities follow the first ``want``; they are a set, so sorted."""
    first = packets[0]
    assert isinstance(first, bytes)
    want, oid, *capabilities = first.removesuffix(b"\n").split(b" ")
    if not oid:
        return None
    kept = sorted(
        {
            capability
            for capability in capabilities
            if capability
            and capability != b"no-progress"
            and not capability.startswith(_VOLATILE_PREFIXES)
        }
    )
    return [b" ".join([want, oid, *kept]) + b"\n", *packets[1:]]


def _canonical_v2(packets: list[_Packet]) -> list[_Packet] | None:
    """Protocol v2: ``command=``, capability lines, delim, arguments, flush; maybe repeated."""
    canonical: list[_Packet] = []
    section = "start"
    for packet in packets:
        if isinstance(packet, int):
            if packet == _DELIM and section == "capabilities":
                section = "arguments"
            elif packet == _FLUSH and section != "start":
                section = "start"
            else:
                return None
        else:
            line = packet.removesuffix(b"\n")
            if section == "start":
                if not line.startswith(b"command="):
                    return None
                section = "capabilities"
            elif _is_volatile_v2(section, line):
                continue
        canonical.append(packet)
    return canonical if section == "start" else None


def _is_volatile_v2(section: str, line: bytes) -> bool:
    if section == "capabilities":
        return line.startswith(_VOLATILE_PREFIXES)
    return section == "arguments" and line == b"no-progress"


def _parse_pkt_lines(data: bytes) -> list[_Packet] | None:
    packets: list[_Packet] = []
    position = 0
    while position < len(data):
        header = data[position : position + 4]
        if not _HEX4_RE.fullmatch(header):
            return None
        length = int(header, 16)
        if length < 4:  # flush, delim, response-end; 3 is not a pkt-line
            if length == 3:
                return None
            packets.append(length)
            position += 4
            continue
        if position + length > len(data):
            return None
        packets.append(data[position + 4 : position + length])
        position += length
    return packets


def _serialize(packets: list[_Packet]) -> bytes:
    out = bytearray()
    for packet in packets:
        if isinstance(packet, int):
            out += b"%04x" % packet
        else:
            out += b"%04x" % (len(packet) + 4) + packet
    return bytes(out)


def _gunzip(body: bytes) -> bytes | None:
    """One gzip member inflated, or None when it is corrupt, truncated, trailed or too big."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, MAX_INFLATED_SIZE + 1)
    except zlib.error:
        return None
    if len(data) > MAX_INFLATED_SIZE or not inflater.eof or inflater.unused_data:
        return None
    return data
