"""Which engine runs a proxy: the direct replay server, or mitmproxy with fetchproxy's addons.

Replay over HTTP/1.1 (the default) runs on :class:`~fetchproxy.directrun.DirectReplayRun`;
recording, and replay with ``--http2``, on :class:`~fetchproxy.proxy.ProxyRun`. mitmproxy is
imported only when it is needed (it takes half a second).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fetchproxy.replay.directrun import DirectReplayRun
from fetchproxy.run.settings import ProxySettings

if TYPE_CHECKING:
    from fetchproxy.addons.embed import ProxyRun

    Run = ProxyRun | DirectReplayRun


def make_run(settings: ProxySettings, *, on_running: Callable[[], None] | None = None) -> Run:
    """The run for ``settings``; ``on_running`` is called once its listener is bound."""
    if settings.direct:
        return DirectReplayRun(settings, on_running=on_running)
    from fetchproxy.addons.embed import ProxyRun  # noqa: PLC0415 -- mitmproxy loads slowly

    return ProxyRun(settings, on_running=on_running)
