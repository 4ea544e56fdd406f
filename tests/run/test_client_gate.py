"""In the user sandbox the proxy listens on the host's loopback: only its relay may use it."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error

import pytest

from fetchproxy.run.relay import Relay
from tests.support.clients import urlfetch, urllib_opener
from tests.support.origin import SMALL
from tests.support.proxy import REPLAY_ENGINES, Rig

pytestmark = REPLAY_ENGINES


class RelayThread:
    """A relay from a fresh loopback listener to ``target``, on its own event loop."""

    def __init__(self, target: str, ports: set[int]) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.relay = Relay(self.listener, (host, int(port)), source_ports=ports)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.relay.start(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.relay.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_only_the_relay_reaches_a_gated_proxy(rig: Rig) -> None:
    recorder = rig.start("record")
    assert rig.get(recorder, "/small.txt").body == SMALL
    assert recorder.stop() == 0

    ports: set[int] = set()
    replayer = rig.start("replay", only_client_ports=ports)
    relay = RelayThread(replayer.url, ports)
    try:
        through_relay = urllib_opener(relay.url, rig.paths.ca_cert)
        assert urlfetch(through_relay, rig.origin.url("/small.txt")).body == SMALL
        direct = urllib_opener(replayer.url, rig.paths.ca_cert)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urlfetch(direct, rig.origin.url("/small.txt"))
    finally:
        relay.close()
    assert replayer.stop() == 0
    assert replayer.run.engine.turned_away == 1
    assert replayer.replay.stats.served == 1
    assert ports == set()  # every relay connection released its port
