"""URL normalization: the ``url`` of a request key, and URLs made fit for messages.

Pure functions over strings; no I/O and no mitmproxy. The rules, with examples, are in
``docs/normalization.md``. Two spellings of a URL normalize alike only when every server must
treat them alike; anything else keeps them apart, because replay serves exact matches only.
:func:`redact_url` is for messages and logs: it never raises and never shows a secret.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Collection
from encodings import idna
from typing import Final

from fetchproxy.errors import FetchproxyError

DEFAULT_SECRET_PARAMS: frozenset[str] = frozenset(
    {
        "token",
        "access_token",  # OAuth 2 bearer token in a query (RFC 6750 2.3)
        "api_key",
        "signature",  # also CloudFront's Signature
        "sig",  # Azure shared access signatures
        "client_secret",  # OAuth 2 client credentials (RFC 6749 2.3.1)
        "private_token",  # GitLab personal access tokens
        "X-Amz-Signature",  # AWS SigV4 presigned URLs ...
        "X-Amz-Credential",
        "X-Amz-Security-Token",  # ... made with temporary (STS) credentials
        "X-Goog-Signature",  # Google Cloud Storage V4 signed URLs
        "X-Goog-Credential",
        "account",  # the user name of Basic credentials, in Docker's token requests
    }
)
"""Query parameters removed from every key, matched case-insensitively."""

DEFAULT_PORTS: Final = {"http": 80, "https": 443}
"""The port a URL of each scheme has when it names none."""
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_URI_RE = re.compile(r"(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#.*)?", re.DOTALL)
_PORT_RE = re.compile(r"[0-9]{1,5}")
_NOT_IN_LABEL_RE = re.compile(r"[^a-z0-9_-]")
_IPV4_LIKE_RE = re.compile(r"[0-9.]+")
_IPV6_RE = re.compile(r"\[([^\]]*)\](?::(.*))?", re.DOTALL)
_IDNA_DOTS_RE = re.compile("[.\u3002\uff0e\uff61]")
_UNPRINTABLE_RE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_OWS = " \t"  # HTTP optional whitespace


def _escape_re(safe: frozenset[str]) -> re.Pattern[str]:
    """Matches what normalization rewrites: any escape, and any character not in ``safe``."""
    return re.compile("%[0-9A-Fa-f]{2}|[^" + re.escape("".join(sorted(safe))) + "]")


_PATH_ESCAPE_RE = _escape_re(_UNRESERVED | frozenset("!$&'()*+,;=:@/"))  # pchar and "/"
_QUERY_ESCAPE_RE = _escape_re(_UNRESERVED | frozenset("!$&'()*+,;=:@/?"))


class InvalidURLError(FetchproxyError, ValueError):
    """A URL that cannot be a key: not absolute http(s), or a malformed host or port."""

    def __init__(
        self, url: str, reason: str, *, secret_params: Collection[str] = DEFAULT_SECRET_PARAMS
    ) -> None:
        self.url = redact_url(url, secret_params=secret_params)
        self.reason = reason
        super().__init__(f"invalid URL '{self.url}': {reason}")


class _BadURL(Exception):  # noqa: N818 -- internal, carries the reason to normalize_url
    pass


def normalize_url(url: str, *, secret_params: Collection[str] = DEFAULT_SECRET_PARAMS) -> str:
    """The normalized absolute http(s) URL; raise :class:`InvalidURLError` saying what is wrong."""
    try:
        return _normalize_url(url, _secret_names(secret_params))
    except _BadURL as error:
        raise InvalidURLError(url, str(error), secret_params=secret_params) from None


def _normalize_url(url: str, secrets: frozenset[str]) -> str:
    match = _URI_RE.fullmatch(url)
    assert match is not None  # every string matches RFC 3986's appendix B expression
    scheme, authority, path, query = match.groups()
    if scheme is None:
        raise _BadURL("not an absolute URL; expected http://HOST/PATH or https://HOST/PATH")
    scheme = scheme.lower() if scheme.isascii() else scheme
    if scheme not in DEFAULT_PORTS:
        raise _BadURL(
            f"scheme '{_printable(scheme)}' is not supported; fetchproxy records http and https"
        )
    hostport = (authority or "").rpartition("@")[2]
    if not hostport or hostport.startswith(":"):
        raise _BadURL(f"no host; expected {scheme}://HOST/PATH")
    host, port = _split_host_port(hostport)
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _remove_dot_segments(_normalize_component(path, _PATH_ESCAPE_RE)) or "/"
    query = _normalize_query(query or "", secrets)
    return f"{scheme}://{netloc}{path}{'?' if query else ''}{query}"


def split_netloc(netloc: str) -> tuple[str, int | None]:
    """The host and port (None: not given) of a normalized URL's ``host[:port]``."""
    if netloc.endswith("]") or ":" not in netloc:
        return netloc, None
    host, _, port = netloc.rpartition(":")
    return host, int(port)


def origin_of(url: str) -> tuple[str, int]:
    """``(host, port)`` of a normalized http(s) URL (a key's), its scheme's default port when
    it names none: the host and port as origin patterns match them."""
    scheme, _, rest = url.partition("://")
    host, port = split_netloc(rest.split("/", 1)[0])
    return host, port if port is not None else DEFAULT_PORTS.get(scheme, 0)


def is_address(host: str) -> bool:
    """Whether a normalized host is an address (``[v6]``, dotted IPv4) rather than a name."""
    return host.startswith("[") or _IPV4_LIKE_RE.fullmatch(host) is not None


def _split_host_port(hostport: str) -> tuple[str, int | None]:
    if hostport.startswith("["):
        match = _IPV6_RE.fullmatch(hostport)
        if match is None:
            raise _BadURL(f"'{_printable(hostport)}' is not a valid IPv6 address literal")
        host, port = _normalize_ipv6(match[1]), match[2]
    else:
        host, colon, port = hostport.rpartition(":")
        if not colon:
            host, port = port, None
        host = _normalize_host(host)
    if not port:
        return host, None
    if not _PORT_RE.fullmatch(port.lstrip("0") or "0") or not 0 < int(port) < 65536:
        raise _BadURL(f"port '{_printable(port)}' is not a number from 1 to 65535")
    return host, int(port)


def _normalize_ipv6(literal: str) -> str:
    """``[address]`` in RFC 5952 text form (Python < 3.13 prints mapped IPv4 in hex)."""
    try:
        address = None if "%" in literal else ipaddress.IPv6Address(literal)  # no zone ids
    except ValueError:
        address = None
    if address is None:
        raise _BadURL(f"'[{_printable(literal)}]' is not a valid IPv6 address literal")
    mapped = address.ipv4_mapped
    return f"[::ffff:{mapped}]" if mapped else f"[{address.compressed}]"


def _normalize_host(host: str) -> str:
    if "%" in host:
        try:
            host = _percent_decode(host).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise _BadURL(f"host '{_printable(host)}' is not valid percent-encoded UTF-8") from None
    labels = host.lower().split(".") if host.isascii() else _IDNA_DOTS_RE.split(host)
    if labels[-1] == "" and len(labels) > 1:  # a fully qualified name keeps its final dot
        labels.pop()
        fqdn = "."
    else:
        fqdn = ""
    ascii_labels = [_normalize_label(label, host) for label in labels]
    result = ".".join(ascii_labels)
    if len(result) > 253:
        raise _BadURL("host is longer than 253 characters")
    if _IPV4_LIKE_RE.fullmatch(result):
        try:
            return str(ipaddress.IPv4Address(result + fqdn))
        except ValueError:
            raise _BadURL(f"'{result}{fqdn}' is not a valid IPv4 address") from None
    return result + fqdn


def _normalize_label(label: str, host: str) -> str:
    if not label:
        raise _BadURL(f"host '{_printable(host)}' has an empty label")
    given = label
    if not label.isascii():
        try:
            label = idna.ToASCII(label).decode("ascii")
        except UnicodeError:
            label = "xn--"  # not an A-label: rejected below
    label = label.lower()
    if label.startswith("xn--") and not _is_a_label(label):
        raise _BadURL(f"host label '{_printable(given)}' is not valid IDNA")
    if len(label) > 63:
        raise _BadURL(f"host label '{label}' is longer than 63 characters")
    bad = _NOT_IN_LABEL_RE.search(label)
    if bad:
        raise _BadURL(
            f"host '{_printable(host)}' contains {bad[0]!r}, which a host name cannot contain"
        )
    return label


def _is_a_label(label: str) -> bool:
    """Punycode for printable non-ASCII text (IDNA 2003 or 2008: both reach the wire)."""
    encoded = label[4:].encode("ascii")
    try:
        decoded = encoded.decode("punycode")
    except UnicodeError:
        return False
    return not decoded.isascii() and decoded.isprintable() and decoded.encode("punycode") == encoded


def _normalize_query(query: str, secrets: frozenset[str]) -> str:
    params: list[tuple[str, str | None]] = []
    for field in query.split("&"):
        if not field:
            continue
        name, equals, value = field.partition("=")
        name = _normalize_component(name, _QUERY_ESCAPE_RE)
        if name.lower() not in secrets:
            value = _normalize_component(value, _QUERY_ESCAPE_RE)
            params.append((name, value if equals else None))
    params.sort(key=lambda param: param[0])  # stable: equal names keep their order
    return "&".join(name if value is None else f"{name}={value}" for name, value in params)


def _secret_names(secret_params: Collection[str]) -> frozenset[str]:
    if secret_params is DEFAULT_SECRET_PARAMS:
        return _DEFAULT_SECRET_NAMES
    return frozenset(_secret_name(name) for name in secret_params)


def _secret_name(name: str) -> str:
    try:
        return _normalize_component(name, _QUERY_ESCAPE_RE).lower()
    except _BadURL:  # a lone surrogate: no normalized name can equal it
        return name


def _normalize_component(text: str, escapes: re.Pattern[str]) -> str:
    """Decode unreserved escapes, upper-case the others, percent-encode what is not allowed."""
    return escapes.sub(_fix_escape, text)


def _fix_escape(match: re.Match[str]) -> str:
    text = match[0]
    if len(text) == 3:  # %XX
        char = chr(int(text[1:], 16))
        return char if char in _UNRESERVED else text.upper()
    try:
        data = text.encode("utf-8", "surrogateescape")  # mitmproxy's spelling of raw bytes
    except UnicodeEncodeError:
        raise _BadURL(
            f"contains U+{ord(text):04X}, a lone surrogate that cannot be encoded as UTF-8"
        ) from None
    return "".join(f"%{byte:02X}" for byte in data)


def _percent_decode(text: str) -> bytes:
    parts = text.split("%")
    data = bytearray(parts[0].encode("utf-8"))
    for part in parts[1:]:
        if not re.match(r"[0-9A-Fa-f]{2}", part):
            raise ValueError(part)
        data.append(int(part[:2], 16))
        data += part[2:].encode("utf-8")
    return bytes(data)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path (or ``""``)."""
    if "." not in path:
        return path
    segments = path.split("/")[1:]
    output: list[str] = []
    for index, segment in enumerate(segments):
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
            continue
        if index == len(segments) - 1:  # a final dot segment leaves a directory: "/a/b/.." -> "/a/"
            output.append("")
    return "/" + "/".join(output)


def redact_url(url: str, *, secret_params: Collection[str] = DEFAULT_SECRET_PARAMS) -> str:
    """``url`` as written, minus userinfo, fragment and secret parameters; for messages and logs.

    Never raises. Control characters and lone surrogates are percent-encoded so the result
    prints on one line.
    """
    try:
        secrets = frozenset(_lenient_name(name) for name in secret_params)
        match = _URI_RE.fullmatch(url)
        assert match is not None
        scheme, authority, path, query = match.groups()
        if authority is not None:
            head = f"//{authority.rpartition('@')[2]}"
        else:  # best effort for "user:pass@host/path"-like garbage
            first, slash, rest = path.partition("/")
            head, path = "", f"{first.rpartition('@')[2]}{slash}{rest}"
        text = f"{scheme}:" if scheme is not None else ""
        text += head + path
        if query is not None:
            fields = [
                f for f in query.split("&") if _lenient_name(f.partition("=")[0]) not in secrets
            ]
            text += "?" + "&".join(fields) if fields else ""
        return _printable(text)
    except Exception:  # noqa: BLE001 -- a message must never fail because its URL is garbage
        return "<unprintable URL>"


def _lenient_name(name: str) -> str:
    try:
        return _percent_decode(name).decode("utf-8", "replace").lower()
    except ValueError:
        return name.lower()


def _printable(text: str) -> str:
    return _UNPRINTABLE_RE.sub(_escape_unprintable, text)


def _escape_unprintable(match: re.Match[str]) -> str:
    data = match[0].encode("utf-8", "surrogatepass")
    return "".join(f"%{byte:02X}" for byte in data)


_DEFAULT_SECRET_NAMES = _secret_names(tuple(DEFAULT_SECRET_PARAMS))


_QUOTED_RE = re.compile(r"b?'(?:[^'\\]|\\.)*'|b?\"(?:[^\"\\]|\\.)*\"", re.DOTALL)
_HEX_DUMP_RE = re.compile(r"\b[0-9a-fA-F]{32,}\b")
"""Sixteen bytes or more in hex: no word a message needs, and whatever the client sent."""
_URL_IN_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_text(text: str, *, secret_params: Collection[str] = DEFAULT_SECRET_PARAMS) -> str:
    """A message from a third party (mitmproxy, an origin) fit for a log: every quoted value
    (``b'GET /x?token=…'``, ``'Host: …'``) and every hex dump (mitmproxy's ``Cannot parse
    ClientHello: 1603…`` is the client's bytes) is cut out, every URL in it redacted. Such
    messages quote request lines and header values, which may hold credentials."""
    text = _QUOTED_RE.sub("'…'", text)
    text = _HEX_DUMP_RE.sub(lambda m: f"<{len(m[0]) // 2} bytes>", text)
    return _URL_IN_TEXT_RE.sub(lambda m: redact_url(m[0], secret_params=secret_params), text)
