"""Engines: what listens for a build's requests and answers them, behind one life cycle.

Two engines exist: fetchproxy's own HTTP/1.1 replay server (:mod:`fetchproxy.replay.server`)
and mitmproxy with fetchproxy's addons (``addons/embed.py``: record, and replay over HTTP/2).
Each is configured entirely by its constructor and started and stopped through
:class:`Engine`, which writes the life cycle once: ``start()`` binds and returns the addresses
(a failed start leaves nothing listening and raises :class:`ProxyStartError`), calls the
``on_running`` callback exactly once as soon as the listener is bound, and ``stop()`` is safe
at any time and more than once. :mod:`fetchproxy.run.engines` picks the engine.

Also here, because both engines apply them alike: the client gate of the user sandbox
(:func:`admitted`) and the error of a listener that cannot bind (:func:`cannot_listen`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from fetchproxy.errors import FetchproxyError

Address = tuple[str, int]
"""A host and port an engine listens on."""


class ProxyStartError(FetchproxyError, OSError):
    """The proxy could not start: the port is taken, an option is wrong, a file is bad."""


def admitted(peer: object, only_client_ports: set[int] | None) -> bool:
    """The client gate of the user sandbox: whether the client at ``peer`` (its peer name) may
    be served. Without ``only_client_ports`` everyone may; with it, only 127.0.0.1 from one of
    those source ports (the relay's)."""
    if only_client_ports is None:
        return True
    return isinstance(peer, tuple) and peer[0] == "127.0.0.1" and peer[1] in only_client_ports


def cannot_listen(listen: Address, reason: str, *, in_use: bool) -> ProxyStartError:
    """The error of an engine that could not bind ``listen``; ``in_use``: the port is taken."""
    hint = " — another program listens there; choose another port (0 picks a free one)"
    host, port = listen
    return ProxyStartError(f"cannot listen on {host}:{port}: {reason}{hint if in_use else ''}")


class Engine(abc.ABC):
    """One engine's life cycle: ``await start()``, then ``await stop()``.

    Subclasses implement :meth:`_start` (bind, begin serving, return the bound addresses) and
    :meth:`_stop` (stop listening, drop connections, release everything; it must also undo a
    half-finished ``_start``). An engine whose listener is bound somewhere ``_start`` cannot see
    the end of (mitmproxy binds inside its own hooks) calls :meth:`_running` itself.
    """

    def __init__(self, *, on_running: Callable[[], None] | None = None) -> None:
        self.addresses: list[Address] = []
        self._on_running = on_running
        self._state = "new"

    @property
    def turned_away(self) -> int:
        """Clients the client gate refused."""
        return 0

    async def start(self) -> list[Address]:
        """Listen and serve; the addresses listened on."""
        if self._state != "new":
            raise RuntimeError(f"an engine starts once; this one is {self._state}")
        self._state = "starting"
        try:
            self.addresses = await self._start()
        except BaseException:
            self._state = "stopped"
            await self._stop()
            raise
        self._running()
        self._state = "running"
        return self.addresses

    async def stop(self) -> None:
        """Stop listening and serving; idempotent, and harmless before ``start()``."""
        if self._state in ("new", "stopped"):
            self._state = "stopped"
            return
        self._state = "stopped"
        await self._stop()

    def _running(self) -> None:
        """Call ``on_running``, once: the listener is bound."""
        callback, self._on_running = self._on_running, None
        if callback is not None:
            callback()

    @abc.abstractmethod
    async def _start(self) -> list[Address]: ...

    @abc.abstractmethod
    async def _stop(self) -> None: ...
