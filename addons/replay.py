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

from addons import flows
from addons.answers import LockAnswers
from fetchproxy.eventlog import EventLog, default_log_path, key_fields
from fetchproxy.lock import Fetch, Lock
from fetchproxy.lockfile import LockFileError, load_lock
from fetchproxy.normalize import DEFAULT_SECRET_PARAMS, InvalidURLError, RequestKey
from fetchproxy.replaying import (
    CORRUPT_BLOB,
    NOT_HTTP,
    NOT_IN_LOCK,
    Answer,
    nearest,
    refusal,
    refusal_text,
)
from fetchproxy.store import (
    CorruptBlobError,
    DiskStore,
    Store,
    default_store_path,
)

logger = logging.getLogger("fetchproxy.replay")

SHOWN_REFUSALS = 10
"""Refused requests named in the end-of-run summary; the event log has every one."""


class ReplayStats:
    """What a replay run did, for the summary line."""

    def __init__(self) -> None:
        self.served = 0
        self.refused = 0
        self.bytes = 0


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
        self.lock = Lock()
        self.lock_path = Path("fetchproxy.lock.toml")
        self.events = EventLog(None)
        self.stats = ReplayStats()
        self.secret_params = secret_params
        self.used: set[RequestKey] = set()
        self.refused: list[RequestKey] = []
        """The first refused requests, for the summary (all of them are in the event log)."""
        self.answers: LockAnswers | None = None

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
        if "replay_store" in updated and self._given_store is None:
            root = ctx.options.replay_store
            self.store = DiskStore(Path(root) if root else default_store_path())
        if "replay_lock" in updated:
            self.lock_path = Path(ctx.options.replay_lock)
            try:
                self.lock = load_lock(self.lock_path)
            except LockFileError as exc:
                raise exceptions.OptionsError(str(exc)) from None
        if updated & {"replay_lock", "replay_store"} and self.store is not None:
            missing = sorted(d for d in self.lock.digests() if not self.store.contains(d))
            if missing:
                shown = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
                bodies = "recorded body is" if len(missing) == 1 else "recorded bodies are"
                raise exceptions.OptionsError(
                    f"{self.lock_path}: {len(missing)} {bodies} missing from the store "
                    f"{getattr(self.store, 'root', '(memory)')} ({shown}) — record again with "
                    "`fetchproxy record`, or point --store at the store it was recorded into"
                )
        if updated & {"replay_lock", "replay_log"}:
            log_path = Path(ctx.options.replay_log or default_log_path(self.lock_path))
            self.events.close()
            self.events = EventLog(log_path)

    async def running(self) -> None:
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
            flow.response = http.Response.make(
                400, f"fetchproxy: refused: {exc}\n", {"content-type": "text/plain"}
            )
            self.stats.refused += 1
            self.events.emit("refused", reason="invalid-request", error=str(exc))
            return
        if flow.request.headers.get("upgrade", "").lower() == "websocket":
            self._refuse(flow, key, reason=NOT_HTTP)
            return
        fetch = self.lock.lookup(key)
        if fetch is None:
            self._refuse(flow, key, reason=NOT_IN_LOCK)
            return
        assert self.answers is not None, "replay answers requests only while running"
        try:
            self.stats.bytes += await self.answers.answer(flow, fetch)
        except CorruptBlobError as exc:
            logger.error("%s", exc)
            self._refuse(flow, key, reason=CORRUPT_BLOB, status=502)
            return
        self.used.add(key)
        self.stats.served += 1

    def _refuse(
        self, flow: http.HTTPFlow, key: RequestKey, *, reason: str, status: int = 403
    ) -> None:
        lock_name = str(self.lock_path)
        answer = refusal(key, lock_name=lock_name, reason=reason)
        if status != answer.status:
            answer = Answer(status, answer.headers, None)
        flow.response = flows.response_from(
            flow, answer, refusal_text(key, lock_name=lock_name, reason=reason).encode()
        )
        self._record_refusal(key, reason=reason)

    def _record_refusal(self, key: RequestKey, *, reason: str) -> None:
        self.stats.refused += 1
        if len(self.refused) < SHOWN_REFUSALS:
            self.refused.append(key)
        self.events.refused(key, reason=reason, nearest=nearest(self.lock, key))

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
            self.stats.served -= 1
            self.used.discard(key)
            self._record_refusal(key, reason=CORRUPT_BLOB)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        self._kill_raw(flow)

    def udp_start(self, flow: udp.UDPFlow) -> None:
        self._kill_raw(flow)

    def _kill_raw(self, flow: tcp.TCPFlow | udp.UDPFlow) -> None:
        address = flow.server_conn.address
        self.stats.refused += 1
        self.events.emit("refused", reason=NOT_HTTP, address=f"{address}")
        logger.warning("replay: refused a non-HTTP connection to %s", address)
        flow.kill()

    async def done(self) -> None:
        if self.answers is not None:
            await self.answers.close()
            self.answers = None
        for fetch in self.unused():
            self.events.emit("unused", key=key_fields(fetch.key))
        self.events.close()

    def unused(self) -> list[Fetch]:
        """Lock entries no request asked for in this run."""
        return [f for f in self.lock.fetches if f.key not in self.used]
