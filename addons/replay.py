"""The replay addon: answer from the lock and the store, refuse everything else.

A request whose key the lock holds is answered locally with the recorded status, headers and
bytes; anything else gets a 403 refusal and an event-log line naming the nearest entry. No
upstream connection is ever opened: ``server_connect`` kills any connection that is not to
fetchproxy's own loopback blob server, which streams large bodies (see
:mod:`fetchproxy.blobserver`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from mitmproxy import addonmanager, ctx, exceptions, http, tcp, udp
from mitmproxy.proxy import server_hooks

from fetchproxy.addons import flows
from fetchproxy.addons.answers import LockAnswers
from fetchproxy.files import WriteError
from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS, InvalidURLError
from fetchproxy.lock.eventlog import EventLog, check_writable_log, default_log_path
from fetchproxy.lock.file import LockFileError, load_lock
from fetchproxy.lock.model import Lock
from fetchproxy.replay.book import MissingBodiesError, ReplayBook, check_bodies
from fetchproxy.replay.decisions import (
    CORRUPT_BLOB,
    INVALID_REQUEST,
    NOT_HTTP,
    NOT_IN_LOCK,
    invalid_request,
    refusal,
    store_refusal,
)
from fetchproxy.store import (
    Store,
    StoreError,
    open_store,
)

logger = logging.getLogger("fetchproxy.replay")

_BODY_BYTES = "fetchproxy.body-bytes"


class Replay:
    """Options ``replay_lock``, ``replay_store`` and ``replay_log``."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS,
    ) -> None:
        self._given_store = store
        self.store: Store | None = store
        self.book = ReplayBook(Lock(), Path("fetchproxy.lock.toml"), EventLog(None))
        self.secret_params = secret_params
        self.answers: LockAnswers | None = None
        self.log_path: Path | None = None

    def load(self, loader: addonmanager.Loader) -> None:
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
        book = self.book
        if "replay_store" in updated and self._given_store is None:
            self.store = open_store(ctx.options.replay_store)
        if "replay_lock" in updated:
            book.lock_path = Path(ctx.options.replay_lock)
            try:
                book.lock = load_lock(book.lock_path)
            except LockFileError as exc:
                raise exceptions.OptionsError(str(exc)) from None
        if updated & {"replay_lock", "replay_store"} and self.store is not None:
            try:
                check_bodies(book.lock, book.lock_path, self.store)
            except MissingBodiesError as exc:
                raise exceptions.OptionsError(str(exc)) from None
        if updated & {"replay_lock", "replay_log"}:
            self.log_path = Path(ctx.options.replay_log or default_log_path(book.lock_path))
            try:
                check_writable_log(self.log_path)
            except WriteError as exc:
                raise exceptions.OptionsError(str(exc)) from None

    async def running(self) -> None:
        # Opened now, not in configure: mitmproxy configures again with its defaults after an
        # option is refused, and that must not truncate the log beside a default lock.
        self.book.events.close()
        self.book.events = EventLog(self.log_path)
        if self.answers is None and self.store is not None:
            self.answers = LockAnswers(self.store)
            await self.answers.start()

    # -------------------------------------------------------------------------------- requests

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            return
        try:
            key = flows.request_key(flow, self.secret_params)
        except (InvalidURLError, ValueError) as exc:
            refused = invalid_request(str(exc))
            flow.response = flows.response_from(flow, refused.answer, refused.text)
            self.book.refuse_other(INVALID_REQUEST, error=str(exc))
            return
        if flow.request.headers.get("upgrade", "").lower() == "websocket":
            self._refuse(flow, key, reason=NOT_HTTP)
            return
        fetch = self.book.lookup(key)
        if fetch is None:
            self._refuse(flow, key, reason=NOT_IN_LOCK)
            return
        assert self.answers is not None, "replay answers requests only while running"
        try:
            body_bytes = await self.answers.answer(flow, fetch)
        except StoreError as exc:  # corrupt, or not the size the lock says
            logger.error("%s", exc)
            reason, status = store_refusal(exc)
            self._refuse(flow, key, reason=reason, status=status, error=str(exc))
            return
        flow.metadata[_BODY_BYTES] = body_bytes
        self.book.served(key, body_bytes)

    def _refuse(
        self,
        flow: http.HTTPFlow,
        key: RequestKey,
        *,
        reason: str,
        status: int = 403,
        error: str | None = None,
    ) -> None:
        refused = refusal(key, lock_name=str(self.book.lock_path), reason=reason, status=status)
        flow.response = flows.response_from(flow, refused.answer, refused.text)
        self.book.refuse(key, reason=reason, error=error)

    # -------------------------------------------------------------------------------- responses

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self.answers is not None and self.answers.responseheaders(flow) is False:
            # the blob server could not serve it
            self._refuse(flow, flow.metadata[flows.KEY], reason=CORRUPT_BLOB, status=502)

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
        if self.answers is None or not self.answers.corrupt_while_streaming(flow):
            return
        key = flow.metadata.get(flows.KEY)
        if isinstance(key, RequestKey):
            self.book.revoke(key, flow.metadata.get(_BODY_BYTES, 0), reason=CORRUPT_BLOB)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        self._kill_raw(flow)

    def udp_start(self, flow: udp.UDPFlow) -> None:
        self._kill_raw(flow)

    def _kill_raw(self, flow: tcp.TCPFlow | udp.UDPFlow) -> None:
        self.book.refuse_raw(flow.server_conn.address)
        flow.kill()

    async def done(self) -> None:
        if self.answers is not None:
            await self.answers.close()
            self.answers = None
        self.book.close()
