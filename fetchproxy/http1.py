"""HTTP/1.1 requests as the direct replay server reads them (RFC 9112), and the heads it writes.

Pure functions over bytes: no sockets, no TLS. The server finds the end of a head
(``\\r\\n\\r\\n``), hands it to :func:`parse_head`, reads the body :func:`body_framing` says
follows, and builds the request's URL with :func:`request_url` the way the key expects it.
"""

from __future__ import annotations

import importlib
import re
import zlib
from dataclasses import dataclass

MAX_HEAD = 64 * 1024
"""The longest request head accepted (request line and headers)."""
MAX_BODY = 64 * 1024 * 1024
"""The largest request body accepted (git's upload-pack requests are far smaller)."""

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION_RE = re.compile(r"HTTP/1\.[01]")
_CHUNK_SIZE_RE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")
_METHOD_START_RE = re.compile(rb"[A-Z]{1,20}( |$)")


class HTTPParseError(ValueError):
    """A request that is not valid HTTP/1.1; ``status`` is what to answer (then close)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def values(self, name: str) -> list[str]:
        """Every value of header ``name`` (lower case), in order."""
        return [value for key, value in self.headers if key.lower() == name]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after the answer."""
        tokens = {t.strip().lower() for v in self.values("connection") for t in v.split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


def looks_like_http(data: bytes) -> bool:
    """Whether ``data``, the first bytes of a stream, can be the start of an HTTP/1 request."""
    return _METHOD_START_RE.match(data[:21]) is not None


def parse_head(raw: bytes | bytearray) -> RequestHead:
    """The request line and headers of ``raw``, a head without its final empty line."""
    text = raw.decode("utf-8", "surrogateescape")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1] or not _TOKEN_RE.fullmatch(parts[0]):
        raise HTTPParseError(f"not an HTTP/1.1 request line: {lines[0][:100]!r}")
    method, target, version = parts
    if not _VERSION_RE.fullmatch(version):
        raise HTTPParseError(f"unsupported HTTP version {version[:20]!r}", 505)
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN_RE.fullmatch(name):
            raise HTTPParseError(f"not a header line: {line[:100]!r}")
        headers.append((name, value.strip(" \t")))
    return RequestHead(method, target, version, headers)


@dataclass(frozen=True, slots=True)
class Framing:
    """How the request body is delimited: ``length`` bytes, or chunked."""

    length: int = 0
    chunked: bool = False


NO_BODY = Framing()


def body_framing(head: RequestHead) -> Framing:
    """The body that follows ``head`` (RFC 9112, section 6.3)."""
    encodings = head.values("transfer-encoding")
    if encodings:
        codings = [c.strip().lower() for v in encodings for c in v.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise HTTPParseError(f"unsupported transfer-encoding {', '.join(codings)!r}", 501)
        return Framing(chunked=True)
    lengths = {v.strip() for v in head.values("content-length")}
    if not lengths:
        return NO_BODY
    if len(lengths) != 1 or not next(iter(lengths)).isdigit():
        raise HTTPParseError(f"invalid content-length {', '.join(sorted(lengths))!r}")
    length = int(next(iter(lengths)))
    if length > MAX_BODY:
        raise HTTPParseError(f"request body of {length} bytes is over {MAX_BODY}", 413)
    return Framing(length=length) if length else NO_BODY


def read_chunked(data: bytes | bytearray, start: int) -> tuple[bytes, int] | None:
    """Decode a chunked body starting at ``data[start]``: (body, end offset), or None if
    ``data`` does not hold all of it yet. Trailers are read and dropped."""
    parts: list[bytes] = []
    size = 0
    at = start
    while True:
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            if len(data) - at > 1024:
                raise HTTPParseError("chunk size line too long")
            return None
        match = _CHUNK_SIZE_RE.fullmatch(data, at, line_end)
        if match is None:
            raise HTTPParseError(f"invalid chunk size line {bytes(data[at:line_end][:40])!r}")
        length = int(match.group(1), 16)
        at = line_end + 2
        if length == 0:
            break
        size += length
        if size > MAX_BODY:
            raise HTTPParseError(f"request body over {MAX_BODY} bytes", 413)
        if len(data) < at + length + 2:
            return None
        if data[at + length : at + length + 2] != b"\r\n":
            raise HTTPParseError("chunk not followed by CRLF")
        parts.append(bytes(data[at : at + length]))
        at += length + 2
    while True:  # trailer section, ended by an empty line
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            return None
        if line_end == at:
            return b"".join(parts), at + 2
        at = line_end + 2


def decode_content(body: bytes, encoding: str | None) -> bytes:
    """A request body without its ``Content-Encoding``, as the key wants it: the recorder keyed
    the body mitmproxy decoded (gzip, deflate, br, zstd).

    Anything this cannot decode is returned as it came, as mitmproxy does (the key then covers
    the raw bytes).
    """
    coding = (encoding or "").strip().lower()
    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
        if coding == "br":  # brotli: a dependency of mitmproxy, imported when needed
            return bytes(importlib.import_module("brotli").decompress(body))
        if coding == "zstd":
            return _zstd_decompress(body)
    except Exception:  # noqa: BLE001 -- every codec has its own error: keep the raw bytes
        return body
    return body


def _zstd_decompress(body: bytes) -> bytes:
    """zstd with whichever module mitmproxy's version brought (none: the raw bytes)."""
    for name in ("compression.zstd", "backports.zstd"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return bytes(module.decompress(body))
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        return body
    reader = zstandard.ZstdDecompressor().stream_reader(body)
    return bytes(reader.read())


def split_authority(authority: str) -> tuple[str, int | None]:
    """``host:port`` (or ``[v6]:port``, or a bare host) → (host, port); host without brackets."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise HTTPParseError(f"invalid authority {authority[:100]!r}")
        host, rest = authority[1:end], authority[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            raise HTTPParseError(f"invalid authority {authority[:100]!r}")
        return host, int(rest[1:]) if rest else None
    host, colon, port = authority.rpartition(":")
    if not colon:
        return authority, None
    if not port.isdigit() or not host or ":" in host:
        raise HTTPParseError(f"invalid authority {authority[:100]!r}")
    return host, int(port)


def request_url(
    head: RequestHead, *, scheme: str, tunnel: tuple[str, int] | None
) -> tuple[str, str]:
    """The absolute URL of the request, as the key is computed from it, and its path.

    Inside a ``CONNECT`` tunnel (``tunnel`` = its host and port) the port is the tunnel's and
    the host is the ``Host`` header's, else the tunnel's. A proxy request names its URL in
    absolute form; a ``Host`` header still names the host. Raises :class:`HTTPParseError`.
    """
    target = head.target
    host_header = head.get("host")
    if target.startswith("/"):
        if tunnel is None:
            raise HTTPParseError(
                f"{head.method} {target[:100]}: a proxy request needs an absolute URL "
                "(or a CONNECT tunnel)"
            )
        host, port, path = tunnel[0], tunnel[1], target
    else:
        scheme_end = target.find("://")
        if scheme_end < 0:
            raise HTTPParseError(f"{head.method} {target[:100]!r}: not an absolute URL")
        scheme = target[:scheme_end].lower()
        if scheme not in ("http", "https"):
            raise HTTPParseError(f"{head.method} {target[:100]!r}: not an http(s) URL")
        rest = target[scheme_end + 3 :]
        slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path = rest[:slash], rest[slash:]
        if "@" in authority:
            authority = authority.rsplit("@", 1)[1]
        host, given_port = split_authority(authority)
        port = given_port or (443 if scheme == "https" else 80)
        if tunnel is not None:
            port = tunnel[1]
        if not path.startswith("/"):
            path = "/" + path
    if host_header:
        host = split_authority(host_header.strip())[0] or host
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}{path}", path


def response_head(
    version: str, status: int, reason: str, headers: tuple[tuple[str, str], ...]
) -> bytes:
    """The status line and headers of an answer, ending in the empty line."""
    lines = [f"{version} {status} {reason}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers)
    lines.append("\r\n")
    return "".join(lines).encode("utf-8", "surrogateescape")
