"""No code is loaded while the build runs: everything is imported before, and the rest refused.

The launcher runs outside every namespace, and each module it would import lazily while serving
(a codec for an IDNA host, a decompressor for a request body, a part of mitmproxy) is a file a
build might have had a chance to change. So :func:`preload` imports, before the build starts,
every module either engine can need, and :class:`ImportGuard` refuses any import while the
build runs (an audit hook, so it also covers imports deep inside mitmproxy): a request that would
load code fails instead, and the run ends saying which module it was — a bug to report, never a
silent load. docs/sandbox.md ("The launcher's own code") has the reasons.
"""

from __future__ import annotations

import importlib
import logging
import sys
from types import TracebackType
from typing import Self

logger = logging.getLogger("fetchproxy.run")

COMMON = (
    # host names and body codings a build controls
    "encodings.idna",
    "encodings.punycode",
    "encodings.utf_8",
    "encodings.latin_1",
    "encodings.ascii",
    "stringprep",
    "unicodedata",
    "gzip",
    "zlib",
    "brotli",
    "zstandard",
    # what TLS, sockets, logging and the books reach for lazily
    "ssl",
    "concurrent.futures.thread",
    "email.utils",
    "json",
    "fetchproxy.keys.rules",
    "fetchproxy.replay.replayer",
)
"""Modules both engines may need while serving."""

MITMPROXY = (
    "mitmproxy.addons",
    "mitmproxy.net.encoding",
    "mitmproxy.net.http.url",
    "mitmproxy.proxy.layers",
    "mitmproxy.proxy.layers.http",
    "mitmproxy.proxy.layers.tls",
    "mitmproxy.proxy.layers.tcp",
    "mitmproxy.proxy.layers.udp",
    "mitmproxy.proxy.layers.websocket",
    "mitmproxy.proxy.layers.dns",
    "mitmproxy.proxy.layers.quic",
    "mitmproxy.proxy.layers.http._http1",
    "mitmproxy.proxy.layers.http._http2",
    "mitmproxy.proxy.layers.http._upstream_proxy",
    "mitmproxy.proxy.server",
    "mitmproxy.tls",
    "mitmproxy.certs",
    "mitmproxy.dns",
    "mitmproxy.websocket",
    "mitmproxy.utils.strutils",
    "mitmproxy.utils.human",
    "h2.connection",
    "h11",
    "wsproto",
)
"""What the mitmproxy engine loads lazily while it serves (found by running every path with
the guard on: tests/run/test_containment.py)."""


def preload(*, mitmproxy: bool) -> None:
    """Import everything an engine may need while the build runs."""
    for name in (*COMMON, *(MITMPROXY if mitmproxy else ())):
        importlib.import_module(name)


class ImportGuard:
    """While active, every import of a module not yet loaded is refused (and remembered).

    Python's audit hooks cannot be removed, so one hook is installed per process and the guard
    switches it on and off.
    """

    _installed = False
    _active: ImportGuard | None = None

    def __init__(self) -> None:
        self.refused: list[str] = []

    def __enter__(self) -> Self:
        if not ImportGuard._installed:
            sys.addaudithook(_audit)
            ImportGuard._installed = True
        ImportGuard._active = self
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        ImportGuard._active = None
        if self.refused:
            logger.error(
                "refused to load %s while the build ran (a request that needed it failed): "
                "this is a bug in fetchproxy, please report it",
                ", ".join(sorted(set(self.refused))),
            )


def _audit(event: str, args: tuple[object, ...]) -> None:
    guard = ImportGuard._active
    if guard is None or event != "import":
        return
    name = str(args[0])
    if name in sys.modules:  # a cached module's submodule lookup, nothing loaded
        return
    guard.refused.append(name)
    raise ImportError(f"fetchproxy: no code is loaded while the build runs ({name})")
