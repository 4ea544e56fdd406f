"""Request bodies as a key sees them: without their ``Content-Encoding``.

A client may compress a request body (git does above 1 KiB; some npm and pip clients do too).
The key holds the digest of the body a server would act on, so that the same request keys alike
whether it came compressed or not, in record and in replay alike. Pure: bytes in, bytes out.

``gzip``, ``x-gzip``, ``deflate`` (zlib, or raw deflate as some clients send it), ``br`` and
``zstd`` are decoded, in the reverse order of a list of codings; ``identity`` is nothing. A body
in any other coding, a corrupt one, or one that would inflate past :data:`MAX_DECODED` keeps its
bytes as they came: a key over raw bytes can only miss, never match a wrong entry.

The decoders are imported with this module, before any build runs: nothing a build sends can
make the launcher load code later (docs/sandbox.md).
"""

from __future__ import annotations

import zlib

import brotli  # type: ignore[import-untyped]  # mitmproxy's dependency, no type hints
import zstandard

MAX_DECODED = 64 * 1024 * 1024
"""The largest decoded body: past it the body is keyed on the bytes as sent."""


class _TooLargeError(Exception):
    pass


def decoded_body(body: bytes, content_encoding: str | None, *, most: int = MAX_DECODED) -> bytes:
    """``body`` without the codings ``content_encoding`` lists; as it came when that fails or
    would be longer than ``most`` bytes (decoding stops there)."""
    if not body or not content_encoding:
        return body
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    data = body
    try:
        for coding in reversed(codings):
            data = _decode(data, coding, most)
    except (_TooLargeError, ValueError, zlib.error, brotli.error, zstandard.ZstdError):
        return body
    return data


def _decode(data: bytes, coding: str, most: int) -> bytes:
    if coding == "identity":
        return data
    if coding in ("gzip", "x-gzip"):
        return _inflate(data, 16 + zlib.MAX_WBITS, most)
    if coding == "deflate":
        try:
            return _inflate(data, zlib.MAX_WBITS, most)
        except zlib.error:
            return _inflate(data, -zlib.MAX_WBITS, most)  # raw deflate, as some clients send it
    if coding == "br":
        decoder = brotli.Decompressor()
        out = bytearray()
        for start in range(0, len(data), 1 << 16):
            out += decoder.process(data[start : start + (1 << 16)])
            _check_size(len(out), most)
        if not decoder.is_finished():
            raise ValueError("truncated brotli stream")
        return bytes(out)
    if coding == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        out = bytearray()
        while chunk := reader.read(1 << 16):
            out += chunk
            _check_size(len(out), most)
        return bytes(out)
    raise ValueError(f"unknown content coding {coding!r}")


def _inflate(data: bytes, wbits: int, most: int) -> bytes:
    inflater = zlib.decompressobj(wbits=wbits)
    out = inflater.decompress(data, most + 1)
    _check_size(len(out), most)
    if not inflater.eof or inflater.unused_data:
        raise zlib.error("truncated or trailing data")
    return out


def _check_size(size: int, most: int) -> None:
    if size > most:
        raise _TooLargeError
