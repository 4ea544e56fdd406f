"""HTTP/1.1 requests as the direct replay server reads them (RFC 9112), and the heads it writes.

Pure functions over bytes: no sockets, no TLS. The server finds the end of a head
(``\\r\\n\\r\\n``), hands it to :func:`parse_head`, reads the body :func:`body_framing` says
follows, and builds the request's URL with :func:`request_url` the way the key expects it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD = 64 * 1024
"""The longest request head accepted (request line and headers)."""
MAX_BODY = 64 * 1024 * 1024
"""The largest request body accepted (git's upload-pack requests are far smaller)."""

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DIGITS_RE = re.compile(r"[0-9]{1,19}")
_VERSION_RE = re.compile(r"HTTP/1\.[01]")
_CHUNK_SIZE_RE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")
_UNSAFE_RE = re.compile(r"[\r\n\0]")
_METHOD_START_RE = re.compile(rb"[A-Z]{1,20}( |$)")


class HTTPParseError(ValueError):
    """A request that is not valid HTTP/1.1; ``status`` is what to answer (then close).

    Messages never quote a query string or a header value: they end up in the event log, and
    secrets (tokens, ``Authorization``) must not.
    """

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


def shown_target(target: str) -> str:
    """A request target fit for a message: at most 100 characters, no query string."""
    path, question, _ = target.partition("?")
    return path[:100] + ("?…" if question or len(path) > 100 else "")


def parse_head(raw: bytes | bytearray) -> RequestHead:
    """The request line and headers of ``raw``, a head without its final empty line."""
    text = raw.decode("utf-8", "surrogateescape")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1] or not _TOKEN_RE.fullmatch(parts[0]):
        raise HTTPParseError(
            f"not an HTTP/1.1 request line ({len(parts)} fields; "
            "METHOD SP TARGET SP HTTP/1.1 expected)"
        )
    method, target, version = parts
    if not _VERSION_RE.fullmatch(version):
        raise HTTPParseError(f"unsupported HTTP version {version[:20]!r}", 505)
    headers = []
    for number, line in enumerate(lines[1:], start=2):
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN_RE.fullmatch(name):
            raise HTTPParseError(f"line {number} of the request head is not a header line")
        headers.append((name, value.strip(" \t")))
    return RequestHead(method, target, version, headers)


def next_head(data: bytes | bytearray, pos: int) -> tuple[RequestHead, int] | None:
    """The request head starting at ``data[pos]`` and where its body starts; None while the
    head is incomplete."""
    end = data.find(b"\r\n\r\n", pos)
    if (end < 0 and len(data) - pos > MAX_HEAD) or end - pos > MAX_HEAD:
        raise HTTPParseError("request head too large", 431)
    if end < 0:
        return None
    return parse_head(data[pos:end]), end + 4


@dataclass(frozen=True, slots=True)
class Framing:
    """How the request body is delimited: ``length`` bytes, or chunked."""

    length: int = 0
    chunked: bool = False


NO_BODY = Framing()


def body_framing(head: RequestHead) -> Framing:
    """The body that follows ``head`` (RFC 9112, section 6.3)."""
    encodings = head.values("transfer-encoding")
    if encodings and head.values("content-length"):
        raise HTTPParseError("both transfer-encoding and content-length (RFC 9112, 6.3)")
    if encodings:
        codings = [c.strip().lower() for v in encodings for c in v.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise HTTPParseError(f"unsupported transfer-encoding {', '.join(codings)!r}", 501)
        return Framing(chunked=True)
    lengths = {v.strip() for v in head.values("content-length")}
    if not lengths:
        return NO_BODY
    if len(lengths) != 1 or not _DIGITS_RE.fullmatch(next(iter(lengths))):
        raise HTTPParseError(f"invalid content-length {', '.join(sorted(lengths))[:40]!r}")
    length = int(next(iter(lengths)))
    if length > MAX_BODY:
        raise HTTPParseError(f"request body of {length} bytes is over {MAX_BODY}", 413)
    return Framing(length=length) if length else NO_BODY


class ChunkedBody:
    """Decodes a chunked body as it arrives, from ``start`` in a buffer that only grows.

    :meth:`feed` resumes where the last call stopped, so a body arriving in many pieces is
    parsed once. Trailers are read (at most :data:`MAX_HEAD` bytes) and dropped.
    """

    def __init__(self, start: int) -> None:
        self._at = start
        self._parts: list[bytes] = []
        self._size = 0
        self._trailers_from: int | None = None

    def rebase(self, consumed: int) -> None:
        """The buffer lost its first ``consumed`` bytes."""
        self._at -= consumed
        if self._trailers_from is not None:
            self._trailers_from -= consumed

    def feed(self, data: bytes | bytearray) -> tuple[bytes, int] | None:
        """(body, end offset) once ``data`` holds the whole body, else None."""
        while self._trailers_from is None:
            line_end = data.find(b"\r\n", self._at)
            if line_end < 0:
                if len(data) - self._at > 1024:
                    raise HTTPParseError("chunk size line too long")
                return None
            match = _CHUNK_SIZE_RE.fullmatch(data, self._at, line_end)
            if match is None:
                raise HTTPParseError("invalid chunk size line")
            length = int(match.group(1), 16)
            if length == 0:
                self._at = self._trailers_from = line_end + 2
                break
            if self._size + length > MAX_BODY:
                raise HTTPParseError(f"request body over {MAX_BODY} bytes", 413)
            body_at = line_end + 2
            if len(data) < body_at + length + 2:
                return None
            if data[body_at + length : body_at + length + 2] != b"\r\n":
                raise HTTPParseError("chunk not followed by CRLF")
            self._parts.append(bytes(data[body_at : body_at + length]))
            self._size += length
            self._at = body_at + length + 2
        while True:  # the trailer section, ended by an empty line
            line_end = data.find(b"\r\n", self._at)
            if line_end < 0 or line_end - self._trailers_from > MAX_HEAD:
                if len(data) - self._trailers_from > MAX_HEAD:
                    raise HTTPParseError("chunked trailers too large", 431)
                return None
            if line_end == self._at:
                return b"".join(self._parts), line_end + 2
            self._at = line_end + 2


def read_chunked(data: bytes | bytearray, start: int) -> tuple[bytes, int] | None:
    """Decode a chunked body starting at ``data[start]``: (body, end offset), or None if
    ``data`` does not hold all of it yet."""
    return ChunkedBody(start).feed(data)


def decode_content(body: bytes, encoding: str | None) -> bytes:
    """A request body without its ``Content-Encoding``, as the recorder keyed it.

    The recorder keys the body mitmproxy's ``get_content(strict=False)`` gives, so this decodes
    with mitmproxy's own decoder (imported only for an encoded body): whatever it cannot decode
    is keyed as it came.
    """
    if not encoding:
        return body
    from mitmproxy.net import encoding as codings  # noqa: PLC0415 -- rare, and 15 ms

    try:
        decoded = codings.decode(body, encoding)
    except (ValueError, TypeError):
        return body
    return decoded if isinstance(decoded, bytes) else body


def split_authority(authority: str) -> tuple[str, int | None]:
    """``host:port`` (or ``[v6]:port``, or a bare host) → (host, port); host without brackets."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise HTTPParseError(f"invalid authority {authority[:100]!r}")
        host, rest = authority[1:end], authority[end + 1 :]
        if rest and not (rest.startswith(":") and _DIGITS_RE.fullmatch(rest[1:])):
            raise HTTPParseError(f"invalid authority {authority[:100]!r}")
        return host, int(rest[1:]) if rest else None
    host, colon, port = authority.rpartition(":")
    if not colon:
        return authority, None
    if not _DIGITS_RE.fullmatch(port) or not host or ":" in host:
        raise HTTPParseError(f"invalid authority {authority[:100]!r}")
    return host, int(port)


def request_url(
    head: RequestHead, *, scheme: str, tunnel: tuple[str, int] | None
) -> tuple[str, str]:
    """The absolute URL of the request, as the key is computed from it, and its path.

    The rule of mitmproxy's ``pretty_url``, which the recorder keys on: a ``Host`` header names
    host and port (the scheme's default port when it has none); without one, the tunnel's
    (inside ``CONNECT``) or the absolute target's; a request in origin form outside a tunnel
    needs one (``http``, as mitmproxy takes it). The default port is left out, as mitmproxy
    does, so both engines name a URL alike. Raises :class:`HTTPParseError`.
    """
    target = head.target
    if target.startswith("/"):
        if tunnel is not None:
            host, port, path = tunnel[0], tunnel[1], target
        elif head.values("host"):  # sent as if to the origin: mitmproxy goes by its Host
            host, port, path = "", _default_port(scheme), target
        else:
            raise HTTPParseError(
                f"{head.method} {shown_target(target)}: no absolute URL, CONNECT tunnel or "
                "Host header: the destination is unknown"
            )
    else:
        scheme_end = target.find("://")
        if scheme_end < 0:
            raise HTTPParseError(f"{head.method} {shown_target(target)}: not an absolute URL")
        scheme = target[:scheme_end].lower()
        if scheme not in ("http", "https"):
            raise HTTPParseError(f"{head.method} {shown_target(target)}: not an http(s) URL")
        rest = target[scheme_end + 3 :]
        slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path = rest[:slash], rest[slash:]
        if "@" in authority:
            authority = authority.rsplit("@", 1)[1]
        host, given_port = split_authority(authority)
        port = given_port or _default_port(scheme)
        if tunnel is not None:
            port = tunnel[1]
        if not path.startswith("/"):
            path = "/" + path
    host_header = ", ".join(head.values("host"))
    if host_header:
        named, named_port = split_authority(host_header.strip())
        host, port = named or host, named_port or _default_port(scheme)
    shown = f"[{host}]" if ":" in host else host
    if port != _default_port(scheme):
        shown += f":{port}"
    return f"{scheme}://{shown}{path}", path


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def response_head(
    version: str, status: int, reason: str, headers: tuple[tuple[str, str], ...]
) -> bytes:
    """The status line and headers of an answer, ending in the empty line.

    Raises :class:`ValueError` for a header with CR, LF or NUL in it (a lock edited by hand).
    """
    for name, value in headers:
        if _UNSAFE_RE.search(name) or _UNSAFE_RE.search(value):
            raise ValueError(f"header {name!r} has a line break or NUL in its value")
    lines = [f"{version} {status} {reason}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers)
    lines.append("\r\n")
    return "".join(lines).encode("utf-8", "surrogateescape")
