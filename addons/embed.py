"""The mitmproxy engine: one in-process mitmproxy with fetchproxy's addons.

:class:`MitmproxyEngine` starts mitmproxy on the running event loop with its terminal log and
dumper off, ``connection_strategy=lazy`` (an eager strategy dials the origin at CONNECT time,
which replay must never do), upstream TLS verified against the system and certifi bundles plus
any ``--upstream-ca``, and the record or the replay addon it is given. ``start()`` returns once
the listeners accept connections or raises :class:`~fetchproxy.engine.ProxyStartError` with
mitmproxy's own reason; ``stop()`` closes the listeners first (mitmproxy leaves them open
otherwise), lets a recording's fetches in flight be stored, and then shuts down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from mitmproxy import exceptions, master, options
from mitmproxy.addons import default_addons

from fetchproxy.addons.lifecycle import Lifecycle
from fetchproxy.addons.record import Record
from fetchproxy.addons.replay import Replay
from fetchproxy.addons.transparent import Intercepted
from fetchproxy.ca import CAError, upstream_trust
from fetchproxy.digest import digest_bytes, hex_of
from fetchproxy.engine import Address, Engine, ProxyStartError, cannot_listen
from fetchproxy.files import write_atomic
from fetchproxy.keys.intercepted import NameBook

SETTLE_TIMEOUT = 30.0
"""How long ``stop()`` waits for fetches in flight to be stored before recording ends."""

logger = logging.getLogger("fetchproxy.embed")


class _StartupErrors(logging.Handler):
    """Collects what mitmproxy logs as errors while it starts (instead of its ErrorCheck)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _said_by_the_record_addon(record: logging.LogRecord) -> bool:
    """mitmproxy's own warning for an origin whose TLS failed: the record addon reports the
    same failure, with the URL and what to do, so the warning is left out."""
    return not record.getMessage().startswith("Server TLS handshake failed")


_CONNECTION_LOG = "mitmproxy.proxy.server"


def upstream_trust_bundle(confdir: Path, extra: Sequence[Path]) -> Path:
    """The certifi and system bundles plus ``extra``, as one file in ``confdir``.

    mitmproxy's ``ssl_verify_upstream_trusted_ca`` replaces its default trust, so everything
    has to be in the one file.
    """
    try:
        data = upstream_trust(extra)
    except CAError as exc:
        raise ProxyStartError(str(exc)) from None
    # Named by content: mitmproxy caches its upstream TLS context by file name (lru_cache), and
    # two runs with different bundles may share a confdir (several `serve` processes, tests).
    bundle = confdir / f"upstream-trust-{hex_of(digest_bytes(data))[:16]}.pem"
    write_atomic(bundle, data)
    return bundle


class MitmproxyEngine(Engine):
    """One in-process mitmproxy running ``addon`` (record, or replay over HTTP/2)."""

    def __init__(
        self,
        addon: Record | Replay,
        *,
        confdir: Path,
        listen: Address = ("127.0.0.1", 0),
        upstream_ca: Sequence[Path] = (),
        http2: bool = False,
        only_client_ports: set[int] | None = None,
        on_running: Callable[[], None] | None = None,
        extra_options: Mapping[str, Any] | None = None,
        transparent: Address | None = None,
        names: NameBook | None = None,
    ) -> None:
        super().__init__(on_running=on_running)
        self.transparent = transparent
        """``--intercept transparent``: a second listener, for connections the edge
        redirected, whose synthetic destinations ``names`` turns back into names."""
        self.intercepted = Intercepted(names) if names is not None else None
        self.addon = addon
        self.confdir = confdir
        self.listen = listen
        self.upstream_ca = tuple(upstream_ca)
        self.http2 = http2
        self.extra_options = dict(extra_options or {})
        self.lifecycle = Lifecycle(self._running, only_client_ports=only_client_ports)
        self._master: master.Master | None = None
        self._task: asyncio.Task[None] | None = None
        self._errors = _StartupErrors()

    @property
    def turned_away(self) -> int:
        return self.lifecycle.turned_away

    async def _start(self) -> list[Address]:
        opts = options.Options()
        self._master = master.Master(opts)
        own = [] if self.intercepted is None else [self.intercepted]
        self._master.addons.add(self.lifecycle, *own, *default_addons(), self.addon)
        modes = {}
        if self.transparent is not None:
            host, port = self.listen
            thost, tport = self.transparent
            modes["mode"] = [f"regular@{host}:{port}", f"transparent@{thost}:{tport}"]
        mitm_log = logging.getLogger("mitmproxy")
        mitm_log.addHandler(self._errors)
        mitm_log.propagate = False  # startup errors end up in ProxyStartError, said once
        try:
            opts.update(
                listen_host=self.listen[0],
                listen_port=self.listen[1],
                confdir=str(self.confdir),
                connection_strategy="lazy",
                ssl_verify_upstream_trusted_ca=str(
                    upstream_trust_bundle(self.confdir, self.upstream_ca)
                ),
                http2=self.http2,
                http3=False,
                **modes,
                **self.extra_options,
            )
        except exceptions.OptionsError as exc:
            mitm_log.removeHandler(self._errors)
            mitm_log.propagate = True
            # On an OptionsError mitmproxy rolls the options back and configures the addons
            # again with the old values; an error from that second round hides the real one,
            # which is its __context__.
            first: BaseException = exc
            cause: BaseException | None = exc
            while cause is not None:
                if isinstance(cause, exceptions.OptionsError):
                    first = cause
                cause = cause.__context__
            raise ProxyStartError(str(first)) from None
        loop = asyncio.get_running_loop()
        listening: asyncio.Future[list[Address]] = loop.create_future()
        self.lifecycle.listening = listening
        self._task = asyncio.create_task(self._master.run())
        waiters: set[asyncio.Future[Any]] = {self._task, listening}
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if listening.done() and not self._errors.messages and listening.result():
            mitm_log.removeHandler(self._errors)
            mitm_log.propagate = True
            if isinstance(self.addon, Record):  # removed in _stop()
                logging.getLogger(_CONNECTION_LOG).addFilter(_said_by_the_record_addon)
            return listening.result()
        await self._stop()  # what mitmproxy logs while it stops is its startup error too
        mitm_log.removeHandler(self._errors)
        mitm_log.propagate = True
        # mitmproxy's messages end in hints about its own options (`--mode ...`): first lines only
        reasons = "; ".join(m.splitlines()[0] for m in self._errors.messages if m.strip())
        raise cannot_listen(
            self.listen,
            reasons or "mitmproxy stopped while starting",
            in_use="address already in use" in reasons,
        )

    async def _stop(self) -> None:
        """Close the listeners, let fetches in flight finish (record), then shut down."""
        m = self._master
        if m is None:
            return
        proxyserver = m.addons.get("proxyserver")
        if proxyserver is not None:
            with suppress(Exception):
                await proxyserver.servers.update([])
        if isinstance(self.addon, Record):
            pending = await self.addon.settle(SETTLE_TIMEOUT)
            if pending:
                logger.warning(
                    "record: stopped with %d fetches still in flight; they are not in the lock",
                    pending,
                )
        m.shutdown()
        if self._task is not None:
            with suppress(asyncio.CancelledError):
                await self._task
        self._master = None
        logging.getLogger(_CONNECTION_LOG).removeFilter(_said_by_the_record_addon)
