"""The replay addon: answer from the lock and the store, refuse everything else.

A thin translator: each request goes to the run's :class:`~fetchproxy.replay.replayer.Replayer`
as a :class:`~fetchproxy.keys.rules.RawRequest`, and what it decides (a hit and its answer, or a
refusal) becomes the flow's response. No upstream connection is ever opened: ``server_connect``
fails every connection that is not to fetchproxy's own loopback blob server, which streams large
bodies (see ``blobserver.py``).

Embedded (``fetchproxy replay --http2``), the replayer comes through the constructor. In a stock
``mitmdump -s addons/replay.py`` the addon makes its own from the options ``replay_lock``,
``replay_store`` and ``replay_log``, and closes its books when mitmproxy shuts down.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mitmproxy import addonmanager, ctx, exceptions, http, tcp, udp
from mitmproxy.proxy import server_hooks

from fetchproxy.addons import flows
from fetchproxy.addons.answers import LockAnswers
from fetchproxy.errors import FetchproxyError
from fetchproxy.lock.config import config_path_for, load_config
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.replay.book import ReplayBook
from fetchproxy.replay.replayer import Hit, Replayer
from fetchproxy.store import open_store

logger = logging.getLogger("fetchproxy.replay")

_HIT = "fetchproxy.hit"


class Replay:
    """Replays one lock. Options (stock mitmproxy only): ``replay_lock``, ``replay_store``,
    ``replay_log``."""

    def __init__(self, replayer: Replayer | None = None) -> None:
        self._embedded = replayer is not None
        self.replayer = replayer
        self.answers: LockAnswers | None = None

    def load(self, loader: addonmanager.Loader) -> None:
        if self._embedded:
            return
        loader.add_option("replay_lock", str, "fetchproxy.lock.toml", "The lock to replay.")
        loader.add_option(
            "replay_store",
            str,
            "",
            "The content-addressed store for bodies (empty: $FETCHPROXY_STORE or the cache dir).",
        )
        loader.add_option(
            "replay_log", str, "", "The JSON-lines event log (empty: beside the lock)."
        )

    def configure(self, updated: set[str]) -> None:
        if self._embedded or not updated & {"replay_lock", "replay_store", "replay_log"}:
            return
        lock = Path(ctx.options.replay_lock)
        store = open_store(ctx.options.replay_store)
        try:
            rules = load_config(config_path_for(lock)).rules
            log = Path(ctx.options.replay_log) if ctx.options.replay_log else None
            book = ReplayBook.open(lock, store, log)
        except FetchproxyError as exc:
            raise exceptions.OptionsError(str(exc)) from None
        if self.replayer is not None:
            self.replayer.book.close()
        self.replayer = Replayer(book, VerifiedBlobs(store), rules)

    async def running(self) -> None:
        if self.answers is None and self.replayer is not None:
            self.answers = LockAnswers(self.replayer.blobs)
            await self.answers.start()

    # -------------------------------------------------------------------------------- requests

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or self.replayer is None:
            return
        replayer = self.replayer
        request = flow.request
        lookup = replayer.lookup(flows.raw_request(flow))
        if lookup.key is not None:
            flow.metadata[flows.KEY] = lookup.key
        decision = replayer.decide(
            lookup,
            method=request.method,
            websocket=request.headers.get("upgrade", "").lower() == "websocket",
            range_header=request.headers.get("range"),
        )
        if not isinstance(decision, Hit):
            flow.response = flows.response_from(flow, decision.answer, decision.text)
            return
        refused = await replayer.verify(decision)
        if refused is not None:
            flow.response = flows.response_from(flow, refused.answer, refused.text)
            return
        assert self.answers is not None, "replay answers requests only while running"
        await self.answers.answer(flow, decision.fetch, decision.answer)
        flow.metadata[_HIT] = decision
        replayer.served(decision)

    # -------------------------------------------------------------------------------- responses

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self.answers is None or self.answers.responseheaders(flow) is not False:
            return
        hit = flow.metadata.get(_HIT)
        if isinstance(hit, Hit) and self.replayer is not None:
            # the blob server could not serve it: nothing of the body was sent yet
            refused = self.replayer.withdrawn(hit, "the blob server could not serve the blob")
            flow.response = flows.response_from(flow, refused.answer, refused.text)

    # -------------------------------------------------------------------------------- connections

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        """Fail closed: replay connects to nothing but its own blob server."""
        address = data.server.address
        if self.answers is not None and self.answers.is_blob_server(address):
            return
        # HTTP flows never get here (they are answered or refused in `request`); raw TCP inside
        # a CONNECT does, just before `tcp_start` refuses it. Either way: no connection.
        data.server.error = "fetchproxy replay never connects upstream"
        logger.warning(
            "replay: blocked a connection to %s (replay never connects upstream)", address
        )

    def error(self, flow: http.HTTPFlow) -> None:
        """A body streaming from the store was cut off: count and log it if the blob was bad."""
        if self.answers is None or self.replayer is None:
            return
        corrupt = self.answers.corrupt_while_streaming(flow)
        hit = flow.metadata.get(_HIT)
        if corrupt is not None and isinstance(hit, Hit):
            self.replayer.cut_off(hit, corrupt)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        self._kill_raw(flow)

    def udp_start(self, flow: udp.UDPFlow) -> None:
        self._kill_raw(flow)

    def _kill_raw(self, flow: tcp.TCPFlow | udp.UDPFlow) -> None:
        if self.replayer is not None:
            self.replayer.refuse_raw(flow.server_conn.address)
        flow.kill()

    async def done(self) -> None:
        if self.answers is not None:
            await self.answers.close()
            self.answers = None
        if not self._embedded and self.replayer is not None:
            self.replayer.book.close()


addons = [Replay()]
"""For ``mitmdump -s addons/replay.py``."""
