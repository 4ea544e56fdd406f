"""Request → key, decided in one place for every engine: :class:`KeyRules`.

An engine (the mitmproxy addons, the direct replay server) gathers what it saw of a request into
a :class:`RawRequest` — the method, the scheme, the server the request was actually sent to,
the target, the headers and the body as they came — and asks :meth:`KeyRules.key` for its key.
The engines decide nothing about keys themselves, so a request keys alike in record and replay.

Where the bytes came from is the server the proxy connected to (or, in replay, would connect
to): the ``CONNECT`` target inside a tunnel, else the authority of an absolute-form target.
A ``Host`` header that names another server is refused (:class:`HostMismatchError`): keyed by
the header, a lock would name a server the bytes never came from (docs/normalization.md). Only
a request in origin form outside a tunnel (a client that takes the proxy for the origin) is
placed by its ``Host`` header, its only destination.

A request on an *intercepted* connection (``--intercept transparent``: the client connected to
an address, not to the proxy) has for authority what :mod:`fetchproxy.keys.intercepted` makes
of that address, and must name its server itself, by TLS server name or ``Host`` header
(:class:`UnnamedServerError` otherwise); the checks above then hold as in a tunnel.

Pure: no I/O, no mitmproxy.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from fetchproxy.digest import digest_bytes
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.bodies import decoded_body
from fetchproxy.keys.gitbody import canonical_body
from fetchproxy.keys.intercepted import is_synthetic
from fetchproxy.keys.patterns import URLPattern
from fetchproxy.keys.request import RequestKey, normalize_request
from fetchproxy.keys.url import (
    DEFAULT_PORTS,
    DEFAULT_SECRET_PARAMS,
    InvalidURLError,
    is_address,
    normalize_url,
    redact_text,
    redact_url,
    split_netloc,
)

Headers = Sequence[tuple[str, str]]


class HostMismatchError(FetchproxyError, ValueError):
    """A request whose ``Host`` header names another server than the one it was sent to."""


class UnknownDestinationError(FetchproxyError, ValueError):
    """A request in origin form outside a tunnel, with no ``Host`` header: sent nowhere."""


class UnnamedServerError(UnknownDestinationError):
    """A request on an intercepted connection that names no server: no TLS server name and no
    ``Host`` header, or sent to a synthetic address the DNS stub never handed out."""


@dataclass(frozen=True, slots=True)
class RawRequest:
    """What an engine saw of a request, before any rule is applied.

    ``authority`` is the server the request goes to as ``host[:port]`` (an IPv6 address in
    brackets): the ``CONNECT`` target inside a tunnel, or the authority of an absolute-form
    target; None for a request in origin form outside a tunnel. ``target`` is the request
    target as sent (``/path?query``, or the absolute form).
    """

    method: str
    scheme: str
    authority: str | None
    target: str
    headers: Headers
    body: bytes = b""
    sni: str | None = None
    """The TLS server name the client asked for inside the tunnel, when it sent one."""
    intercepted: bool = False
    """The connection was redirected to the proxy (``--intercept transparent``): ``authority``
    is where the client connected (:func:`~fetchproxy.keys.intercepted.intercepted_authority`),
    and the request must name its server itself."""

    def header(self, name: str) -> str | None:
        """Every value of header ``name`` (lower case) joined by ``, ``; None when absent."""
        values = [value for key, value in self.headers if key.lower() == name]
        return ", ".join(values) if values else None


class KeyRules:
    """How one project's requests become keys: the built-in rules and its ``fetchproxy.toml``.

    ``accept_selects_nothing``: where ``Accept`` is not part of the key (the servers answer
    every ``Accept`` alike, e.g. a cargo sparse index that cargo 1.65 asks with ``*/*`` and
    cargo 1.95 with ``text/plain``); the key then says so with ``accept = "*"``
    (:data:`~fetchproxy.keys.request.ANY_ACCEPT`), so the lock tells how it was keyed.
    """

    def __init__(
        self,
        *,
        secret_params: Collection[str] = DEFAULT_SECRET_PARAMS,
        accept_selects_nothing: Sequence[URLPattern] = (),
    ) -> None:
        self.secret_params = frozenset(secret_params)
        self.accept_selects_nothing = tuple(accept_selects_nothing)

    def __repr__(self) -> str:
        patterns = [p.text for p in self.accept_selects_nothing]
        return (
            f"KeyRules(secret_params={sorted(self.secret_params)}, "
            f"accept_selects_nothing={patterns})"
        )

    def accept_selects(self, url: str) -> bool:
        """Whether ``Accept`` is part of the key of the normalized ``url``."""
        return not any(pattern.matches(url) for pattern in self.accept_selects_nothing)

    def key(self, request: RawRequest) -> RequestKey:
        """The key of ``request``.

        Raises :class:`~fetchproxy.keys.url.InvalidURLError` (a URL no key can name),
        :class:`~fetchproxy.keys.request.InvalidMethodError`, :class:`HostMismatchError` or
        :class:`UnnamedServerError`.
        """
        url, path = self._url(request)
        body_digest = None
        if request.body:
            body = decoded_body(request.body, request.header("content-encoding"))
            body = canonical_body(path, request.header("content-type"), body)
            body_digest = digest_bytes(body)
        return normalize_request(
            request.method,
            url,
            headers=request.headers,
            body_digest=body_digest,
            secret_params=self.secret_params,
            accept_selects=not self.accept_selects_nothing or self.accept_selects(self.url(url)),
        )

    def url(self, url: str) -> str:
        """``url`` normalized with this project's secret parameters (``InvalidURLError``)."""
        return normalize_url(url, secret_params=self.secret_params)

    def redact(self, url: str) -> str:
        """``url`` fit for a message: no user info, fragment or secret parameter."""
        return redact_url(url, secret_params=self.secret_params)

    def redact_text(self, text: str) -> str:
        """A third party's message fit for a log: no quoted value, every URL redacted."""
        return redact_text(text, secret_params=self.secret_params)

    def _check_sni(self, request: RawRequest, url: str) -> None:
        """The server name of the tunnel's TLS must be the host the key names, when that host
        is a name: the origin proves its identity for the SNI, and the lock must name the same
        server (an address as host says nothing about names)."""
        sni = request.sni or ""
        host, _ = split_netloc(url.split("/")[2])
        if not sni or is_address(host):
            return
        try:
            named = normalize_url(f"https://{sni}/", secret_params=()).split("/")[2]
        except InvalidURLError:
            named = sni
        if named != host:
            raise HostMismatchError(
                f"{request.method} {self.redact(url)}: its TLS server name ({_shown(sni)}) "
                "names another server than the one it was sent to"
            )

    def _target(self, request: RawRequest) -> tuple[str, str | None, str]:
        """The scheme, authority and path a request's target names (an absolute URL checked
        against the tunnel it was sent in)."""
        scheme, target, authority = request.scheme, request.target, request.authority
        if "://" in target.partition("?")[0] and not target.startswith("/"):
            scheme_part, _, rest = target.partition("://")
            scheme = scheme_part.lower()
            end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
            given, path = rest[:end].rpartition("@")[2], rest[end:]
            if authority is None:
                return scheme, given, path
            if not _same_server(scheme, given, authority):
                raise HostMismatchError(
                    f"{request.method} {self.redact(target)}: the URL names another server "
                    f"than the tunnel it was sent in ({_shown(authority)})"
                )
            return scheme, authority, path
        if target.startswith("/") or target == "*":
            return scheme, authority, target
        raise InvalidURLError(target, "not an absolute URL or a path")

    def _url(self, request: RawRequest) -> tuple[str, str]:
        """The absolute URL the key names, and the request's path (with its query)."""
        target = request.target
        scheme, authority, path = self._target(request)
        if scheme not in DEFAULT_PORTS:
            raise InvalidURLError(target, f"scheme '{scheme}' is not supported")
        hosts = [value.strip() for key, value in request.headers if key.lower() == "host"]
        if request.intercepted and authority is not None:
            _check_named(request, authority, named=bool(request.sni or hosts or path != target))
        if authority is None:
            if not hosts:
                raise UnknownDestinationError(
                    f"{request.method} {_shown_target(target)}: no absolute URL, CONNECT "
                    "tunnel or Host header: the destination is unknown"
                )
            authority = hosts[0]
        if not path.startswith("/"):
            path = "/" + path
        default = f":{DEFAULT_PORTS[scheme]}"
        shown = authority.removesuffix(default) if authority.endswith(default) else authority
        url = f"{scheme}://{shown}{path}"
        normal = self.url(url)  # a URL no key can name is said as such, before Host is compared
        if request.sni is not None:
            self._check_sni(request, normal)
        for host in hosts:
            if not _same_server(scheme, host, authority):
                raise HostMismatchError(
                    f"{request.method} {self.redact(f'{scheme}://{_shown(authority)}{path}')}: "
                    f"its Host header ({_shown(host)}) names another server than the one it "
                    "was sent to"
                )
        return url, path


def _check_named(request: RawRequest, authority: str, *, named: bool) -> None:
    """An intercepted request must name its server (``named``: by TLS server name, ``Host`` or
    an absolute URL), and must have been sent to an address that stands for one."""
    where = _shown(authority)
    if is_synthetic(authority.rpartition(":")[0]):
        raise UnnamedServerError(
            f"{request.method} {_shown_target(request.target)}: sent to {where}, an address "
            "the sandbox's DNS stub did not hand out in this run, so it stands for no server"
        )
    if not named:
        raise UnnamedServerError(
            f"{request.method} {_shown_target(request.target)}: intercepted on its way to "
            f"{where}, and names no server: neither a TLS server name nor a Host header"
        )


def _same_server(scheme: str, a: str, b: str) -> bool:
    """Whether authorities ``a`` and ``b`` name one server for ``scheme`` (the default port
    spelled or not, case, IDNA and IP spelling aside)."""
    if a == b:
        return True
    try:
        return normalize_url(f"{scheme}://{a}/", secret_params=()) == normalize_url(
            f"{scheme}://{b}/", secret_params=()
        )
    except InvalidURLError:
        return False


def _shown_target(target: str) -> str:
    """A request target fit for a message: at most 100 characters, never its query."""
    path, question, _ = target.partition("?")
    return redact_url(path[:100]) + ("?…" if question or len(path) > 100 else "")


def _shown(authority: str) -> str:
    """An authority fit for a message (at most 100 characters, control characters escaped)."""
    return redact_url(f"//{authority[:100]}")[2:]
