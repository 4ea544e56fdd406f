"""HTTP/1.1 messages as the direct replay server reads and writes them (RFC 9112): pure.

Request heads are parsed by :func:`parse_head`, their body framing found by
:func:`body_framing`, and answers' heads written by :func:`answer_bytes`. Nothing here keeps
state or touches a socket: :mod:`fetchproxy.replay.connection` runs the request/answer cycle
over these functions, and :mod:`fetchproxy.replay.server` moves the bytes.

The parser is strict where leniency lets two readers of the same bytes disagree about where a
message ends (request smuggling): a bare LF or a bare CR anywhere in a head, a header line
folded over two lines, whitespace before a header's colon, both ``Transfer-Encoding`` and
``Content-Length``, two different ``Content-Length`` values, a transfer coding other than a
final ``chunked``, or ``Transfer-Encoding`` in HTTP/1.0 are refused with a 400 (501 for a coding
it does not know, 505 for another HTTP version), never guessed at.
"""

from __future__ import annotations

import http
import re
from dataclasses import dataclass, field

MAX_HEAD = 64 * 1024
"""The longest request head accepted (request line and headers): past it, 431."""
MAX_BODY = 1024 * 1024
"""The largest request body accepted, as sent (chunked or not, before any content coding):
past it, 413. A key needs a request body only for the POSTs a lock keys by their body: git's
upload-pack negotiation, which lists wanted and common commits at about 50 bytes each (git
gzips bodies over 1 KiB, so 1 MiB holds some 50,000 of them), and small API queries. Every
connection may hold one body this size while it arrives, so this limit times the connection
cap bounds what request bodies can cost."""

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DIGITS_RE = re.compile(r"[0-9]{1,19}")
_VERSION_RE = re.compile(r"HTTP/1\.[01]")
_ANY_VERSION_RE = re.compile(r"HTTP/[0-9](?:\.[0-9])?")
_TARGET_BAD_RE = re.compile(r"[\x00-\x20\x7f]")
_VALUE_BAD_RE = re.compile(r"[\x00\r\n]")
_HEADER_LINE = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\0]*"
_HEADER_BLOCK_RE = re.compile(rf"{_HEADER_LINE}(?:\r\n{_HEADER_LINE})*")
"""Header lines (``NAME:VALUE``, NAME a token) separated by CRLF: a head's header block."""
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


class BodyTooLargeError(HTTPParseError):
    """A request whose body is over the limit (:data:`MAX_BODY`): well-formed, but not one
    replay reads."""

    def __init__(self, head: RequestHead, size: int | None, most: int = MAX_BODY) -> None:
        told = f"of {size:,} bytes " if size is not None else ""
        super().__init__(
            f"{head.method} {shown_target(head.target)}: request body {told}over the "
            f"{most:,}-byte limit",
            413,
        )
        self.head = head


@dataclass(slots=True)
class RequestHead:
    """A parsed request head: the request line, the header lines in order, and their values
    by lower-case name (``by_name``, what :func:`parse_head` indexed; :meth:`of` makes one)."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    by_name: dict[str, list[str]] = field(repr=False, compare=False)

    @classmethod
    def of(
        cls, method: str, target: str, version: str, headers: list[tuple[str, str]]
    ) -> RequestHead:
        """A head from its parts, its headers indexed by lower-case name."""
        by_name: dict[str, list[str]] = {}
        for name, value in headers:
            by_name.setdefault(name.lower(), []).append(value)
        return cls(method, target, version, headers, by_name)

    def get(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        found = self.by_name.get(name)
        return found[0] if found else None

    def values(self, name: str) -> list[str]:
        """Every value of header ``name`` (lower case), in order."""
        return self.by_name.get(name) or []

    @property
    def keep_alive(self) -> bool:
        """Whether the client wants the connection kept open after the answer (RFC 9112, 9.3):
        HTTP/1.1 unless it says ``close``; HTTP/1.0 only when it says ``keep-alive``."""
        said = self.by_name.get("connection")
        if not said:
            return self.version != "HTTP/1.0"
        tokens = {t.strip().lower() for v in said for t in v.split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens and "close" not in tokens
        return "close" not in tokens

    @property
    def expects_continue(self) -> bool:
        """Whether the client waits for ``100 Continue`` before it sends the body (HTTP/1.1
        only: an HTTP/1.0 client cannot have meant it, RFC 9110, 10.1.1)."""
        return self.version == "HTTP/1.1" and any(
            v.strip().lower() == "100-continue" for v in self.values("expect")
        )


def looks_like_http(data: bytes) -> bool:
    """Whether ``data``, the first bytes of a stream, can be the start of an HTTP/1 request."""
    return _METHOD_START_RE.match(data[:21]) is not None


def shown_target(target: str) -> str:
    """A request target fit for a message: at most 100 characters, no query string."""
    path, question, _ = target.partition("?")
    return path[:100] + ("?…" if question or len(path) > 100 else "")


def parse_head(raw: bytes | bytearray) -> RequestHead:
    """The request line and headers of ``raw``, a head without its final empty line."""
    try:
        return _parse_head(raw)
    except HTTPParseError:
        # A head that passes every check holds no CR or LF but its line ends; one that fails
        # is said to have a bare one first, if it has (where two readers would split it into
        # different lines).
        crlfs = raw.count(b"\r\n")
        if raw.count(b"\n") != crlfs:
            raise HTTPParseError("a bare LF in the request head (lines end in CRLF)") from None
        if raw.count(b"\r") != crlfs:
            raise HTTPParseError("a bare CR in the request head") from None
        raise


def _parse_head(raw: bytes | bytearray) -> RequestHead:
    """:func:`parse_head` but for the bare CR and LF it names first."""
    text = raw.decode("utf-8", "surrogateescape")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1] or not _is_token(parts[0]):
        raise HTTPParseError(
            f"not an HTTP/1.1 request line ({len(parts)} fields; "
            "METHOD SP TARGET SP HTTP/1.1 expected)"
        )
    method, target, version = parts
    if version != "HTTP/1.1" and not _VERSION_RE.fullmatch(version):
        # named only when it is one, say HTTP/2.0: the request line may hold anything
        shown = version if _ANY_VERSION_RE.fullmatch(version) else "a version it is not"
        raise HTTPParseError(f"unsupported HTTP version {shown} (HTTP/1.1 or 1.0 expected)", 505)
    # (printable ASCII without a space, which split the line: what the expression allows)
    if not (target.isascii() and target.isprintable()) and _TARGET_BAD_RE.search(target):
        raise HTTPParseError("a control character in the request target")
    headers: list[tuple[str, str]] = []
    by_name: dict[str, list[str]] = {}
    if len(lines) == 1:
        return RequestHead(method, target, version, headers, by_name)
    # Every header line checked at once (one match over the block, the hot path of a
    # hit); a block that fails it is walked line by line to say which line and why.
    checked = _HEADER_BLOCK_RE.fullmatch(text, len(lines[0]) + 2)
    for number, line in enumerate(lines[1:], 2):
        name, _, value = line.partition(":")
        if not checked:
            _header(line, f"line {number} of the request head")  # raises if it is bad
        value = value.strip(" \t")
        headers.append((name, value))
        lower = name.lower()
        if lower in by_name:
            by_name[lower].append(value)
        else:
            by_name[lower] = [value]
    return RequestHead(method, target, version, headers, by_name)


_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "PATCH"))
"""Methods known to be tokens: a set lookup, where most requests need no expression."""


def _is_token(text: str) -> bool:
    return text in _METHODS or _TOKEN_RE.fullmatch(text) is not None


def parse_trailer(raw: bytes) -> tuple[str, str]:
    """A line of a chunked body's trailer section, without its CRLF: a header line."""
    if b"\r" in raw:
        raise HTTPParseError("a bare CR in a trailer line")
    return _header(raw.decode("utf-8", "surrogateescape"), "a trailer line")


def _header(line: str, where: str) -> tuple[str, str]:
    name, colon, value = line.partition(":")
    if not colon or not _TOKEN_RE.fullmatch(name):
        raise HTTPParseError(f"{where} is not a header line")
    if _VALUE_BAD_RE.search(value):
        raise HTTPParseError(f"{where} has a NUL in its value")
    return name, value.strip(" \t")


@dataclass(frozen=True, slots=True)
class Framing:
    """How the request body is delimited: ``length`` bytes, or chunked."""

    length: int = 0
    chunked: bool = False


NO_BODY = Framing()


def body_framing(head: RequestHead, most: int = MAX_BODY) -> Framing:
    """The body that follows ``head`` (RFC 9112, section 6); :class:`BodyTooLargeError` when
    its length is known to be over ``most``."""
    by_name = head.by_name
    encodings = by_name.get("transfer-encoding")
    lengths_given = by_name.get("content-length")
    if not encodings and not lengths_given:
        return NO_BODY
    if encodings and lengths_given:
        raise HTTPParseError("both transfer-encoding and content-length (RFC 9112, 6.3)")
    if encodings:
        if head.version == "HTTP/1.0":
            raise HTTPParseError("transfer-encoding in an HTTP/1.0 request (RFC 9112, 6.1)")
        codings = [c.strip().lower() for v in encodings for c in v.split(",") if c.strip()]
        if not codings or codings[-1] != "chunked":
            raise HTTPParseError("a transfer-encoding that does not end in chunked (RFC 9112, 6.3)")
        if codings != ["chunked"]:
            # not the value: messages never quote a header value, which may hold a secret
            raise HTTPParseError("a transfer-encoding other than chunked alone", 501)
        return Framing(chunked=True)
    lengths = {v.strip() for v in lengths_given or ()}
    if len(lengths) != 1 or not _DIGITS_RE.fullmatch(next(iter(lengths))):
        what = "differing values" if len(lengths) != 1 else "not a decimal number"
        raise HTTPParseError(f"invalid content-length ({what})")
    length = int(next(iter(lengths)))
    if length > most:
        raise BodyTooLargeError(head, length, most)
    return Framing(length=length) if length else NO_BODY


_BAD_AUTHORITY = "invalid authority (host:port or [IPv6]:port expected)"


def split_authority(authority: str) -> tuple[str, int | None]:
    """``host:port`` (or ``[v6]:port``, or a bare host) → (host, port); host without brackets."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise HTTPParseError(_BAD_AUTHORITY)
        host, rest = authority[1:end], authority[end + 1 :]
        if rest and not (rest.startswith(":") and _DIGITS_RE.fullmatch(rest[1:])):
            raise HTTPParseError(_BAD_AUTHORITY)
        return host, int(rest[1:]) if rest else None
    host, colon, port = authority.rpartition(":")
    if not colon:
        return authority, None
    if not _DIGITS_RE.fullmatch(port) or not host or ":" in host:
        raise HTTPParseError(_BAD_AUTHORITY)
    return host, int(port)


def reason_phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (RFC 9110, section 15), or ``""``."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


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


def with_connection(
    headers: tuple[tuple[str, str], ...], *, version: str, keep_alive: bool
) -> tuple[tuple[str, str], ...]:
    """An answer's headers plus what says whether the connection stays open, when needed:
    ``close`` when it will not, ``keep-alive`` to an HTTP/1.0 client when it will."""
    if not keep_alive:
        return (*headers, ("connection", "close"))
    if version == "HTTP/1.0":
        return (*headers, ("connection", "keep-alive"))
    return headers
