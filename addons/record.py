"""The record addon: forward each request upstream, store each answer, lock what may be locked.

Every body streams through the store's writer as it passes (hash + temp file, constant memory);
each finished fetch goes to the journal at once; the canonical lock is written at the end. The
rules (which headers to strip, what may be locked, which headers to keep) are the core's, in
:mod:`fetchproxy.recording`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from mitmproxy import addonmanager, ctx, exceptions, http

from fetchproxy.addons import flows
from fetchproxy.addons.answers import LockAnswers
from fetchproxy.errors import FetchproxyError
from fetchproxy.files import check_writable
from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS, InvalidURLError
from fetchproxy.lock.eventlog import EventLog, check_writable_log, default_log_path
from fetchproxy.lock.file import LockFileError, load_lock, write_lock
from fetchproxy.lock.journal import Journal, journal_path
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.record.rules import (
    STRIPPED_REQUEST_HEADERS,
    UPSTREAM_ACCEPT_ENCODING,
    fetch_from_answer,
    is_recordable,
)
from fetchproxy.store import (
    BlobWriter,
    Store,
    StoreError,
    open_store,
)

logger = logging.getLogger("fetchproxy.record")

_WRITER = "fetchproxy.writer"
_KEPT = "fetchproxy.kept"
_UNSTORED = "fetchproxy.unstored"


class _Tee:
    """mitmproxy's stream callable: every raw body chunk goes to the store, then on.

    A chunk the store cannot take (a full disk) ends the storing, never the answer: the
    client still gets every byte, and ``failure`` says why this fetch is not recorded.
    """

    def __init__(self, writer: BlobWriter) -> None:
        self.writer = writer
        self.chunks = 0
        self.failure: StoreError | None = None

    def __call__(self, chunk: bytes) -> bytes:
        if chunk and self.failure is None:
            try:
                self.writer.update(chunk)
            except StoreError as exc:
                self.failure = exc  # update() aborted the writer
            self.chunks += 1
        return chunk


class RecordStats:
    """What a record run did, for the summary line."""

    def __init__(self) -> None:
        self.recorded = 0
        self.kept = 0  # answered from the existing lock (--keep)
        self.passed = 0  # answered but not locked (5xx, websocket)
        self.failed = 0  # connection or TLS failures
        self.unstored = 0  # answered, but the store could not keep the body: not locked
        self.bytes = 0


class Record:
    """Options ``record_lock``, ``record_store``, ``record_log`` and ``record_keep``.

    By default a record is made afresh, like ``cargo update``: the new lock holds exactly what
    this run fetched. With ``record_keep`` (``fetchproxy record --keep``) it is incremental:
    requests the existing lock holds are answered from the store without contacting the origin,
    only the others go upstream and are added, and nothing is removed.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS,
    ) -> None:
        self._given_store = store
        self.store: Store | None = store
        self.lock_path = Path("fetchproxy.lock.toml")
        self.fetches: dict[RequestKey, Fetch] = {}
        self.stats = RecordStats()
        self.journal: Journal | None = None
        self.events = EventLog(None)
        self.log_path: Path | None = None
        self.secret_params = secret_params
        self._pending: set[str] = set()
        """Flows forwarded upstream whose answer is not yet stored (or failed)."""
        self.keep = False
        self.previous: Lock | None = None
        """The lock as it was before this run (None when there was none)."""
        self.answers: LockAnswers | None = None

    def load(self, loader: addonmanager.Loader) -> None:
        loader.add_option(
            "record_lock", str, "fetchproxy.lock.toml", "The lock file the recording writes."
        )
        loader.add_option(
            "record_store",
            str,
            "",
            "The content-addressed store for bodies (empty: $FETCHPROXY_STORE or the cache dir).",
        )
        loader.add_option(
            "record_log", str, "", "The JSON-lines event log (empty: beside the lock)."
        )
        loader.add_option(
            "record_keep",
            bool,
            False,
            "Keep the existing lock: answer what it holds from the store, record only the rest.",
        )

    def configure(self, updated: set[str]) -> None:
        """Everything a run will write is checked here, before anything listens or changes."""
        try:
            if "record_lock" in updated or "record_log" in updated:
                self.lock_path = Path(ctx.options.record_lock)
                check_writable(
                    self.lock_path, "record writes the lock and its journal there (--lock PATH)"
                )
                self.log_path = Path(ctx.options.record_log or default_log_path(self.lock_path))
                check_writable_log(self.log_path)
            if "record_store" in updated and self._given_store is None:
                self.store = open_store(ctx.options.record_store)
            if updated & {"record_lock", "record_store"} and self.store is not None:
                self.store.check_writable()
        except FetchproxyError as exc:
            raise exceptions.OptionsError(str(exc)) from None
        if updated & {"record_lock", "record_keep"}:
            self.keep = bool(ctx.options.record_keep)
            self.previous = self._previous_lock()

    def _previous_lock(self) -> Lock | None:
        """The lock as it is; a lock that exists but cannot be read stops the run unchanged."""
        if not self.lock_path.exists():
            return None
        try:
            return load_lock(self.lock_path)
        except LockFileError as exc:
            raise exceptions.OptionsError(
                f"{exc} (record does not overwrite a lock it cannot read: to record afresh, "
                "move it aside first)"
            ) from None

    async def running(self) -> None:
        # Opened now, not in configure: mitmproxy configures again with its defaults after an
        # option is refused, and that must not truncate the log beside a default lock.
        self.events.close()
        self.events = EventLog(self.log_path)
        if self.keep and self.answers is None and self.store is not None:
            self.answers = LockAnswers(self.store)
            await self.answers.start()
        if self.journal is None:
            self.journal = Journal(journal_path(self.lock_path), keep=self.keep)

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            return
        try:
            key = flows.request_key(flow, self.secret_params)
        except (InvalidURLError, ValueError) as exc:
            flow.response = http.Response.make(
                400,
                f"fetchproxy: cannot record this request: {exc}\n",
                {"content-type": "text/plain"},
            )
            self.events.emit("unrecordable", reason=str(exc))
            return
        if await self._answer_kept(flow, key):
            return
        headers = flow.request.headers
        for name in STRIPPED_REQUEST_HEADERS:
            headers.pop(name, None)
        headers["accept-encoding"] = UPSTREAM_ACCEPT_ENCODING
        self._pending.add(flow.id)

    async def _answer_kept(self, flow: http.HTTPFlow, key: RequestKey) -> bool:
        """With --keep: answer from the existing lock when it holds the request."""
        if self.answers is None or self.previous is None:
            return False
        fetch = self.previous.lookup(key)
        if fetch is None or not self.answers.store.contains(fetch.digest):
            return False
        try:
            await self.answers.answer(flow, fetch)
        except StoreError as exc:  # corrupt, or not the size the lock says
            logger.warning("%s; fetching it again", exc)
            return False
        flow.metadata[_KEPT] = True
        self.stats.kept += 1
        return True

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self.answers is not None and self.answers.responseheaders(flow) is not None:
            return  # a kept answer streamed from the store
        response = flow.response
        assert response is not None
        key = flow.metadata.get(flows.KEY)
        if (
            self.store is None
            or not isinstance(key, RequestKey)
            or not is_recordable(response.status_code)
            or flow.websocket is not None
        ):
            response.stream = True
            return
        try:
            writer = self.store.writer()
        except StoreError as exc:
            self._unstored(flow, key, exc)
            response.stream = True
            return
        tee = _Tee(writer)
        flow.metadata[_WRITER] = tee
        response.stream = tee

    async def response(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(_KEPT):
            return
        try:
            await self._store_response(flow)
        finally:
            self._pending.discard(flow.id)

    async def _store_response(self, flow: http.HTTPFlow) -> None:
        tee = flow.metadata.pop(_WRITER, None)
        response = flow.response
        key = flow.metadata.get(flows.KEY)
        if not isinstance(tee, _Tee) or response is None or not isinstance(key, RequestKey):
            if response is not None and key is not None and not flow.metadata.get(_UNSTORED):
                self.stats.passed += 1
            return
        if tee.chunks == 0 and response.raw_content:
            tee(response.raw_content)  # a body mitmproxy did not stream
        if tee.failure is not None:
            self._unstored(flow, key, tee.failure)
            return
        size = tee.writer.size
        try:
            digest = await asyncio.to_thread(tee.writer.commit)
        except StoreError as exc:  # commit() aborted the writer
            self._unstored(flow, key, exc)
            return
        except BaseException:
            tee.writer.abort()
            raise
        fetch = fetch_from_answer(
            key,
            status=response.status_code,
            headers=response.headers.items(multi=True),
            digest=digest,
            size=size,
            secret_params=self.secret_params,
        )
        self._add(fetch)

    def _unstored(self, flow: http.HTTPFlow, key: RequestKey, exc: StoreError) -> None:
        """The client got its answer but the store could not keep it: loud, and not locked."""
        flow.metadata[_UNSTORED] = True
        self.stats.unstored += 1
        logger.error("record: %s %s was not recorded: %s", key.method, key.url, exc)
        self.events.emit("unstored", url=key.url, method=key.method, error=str(exc))

    def _add(self, fetch: Fetch) -> None:
        key = fetch.key
        previous = self.fetches.get(key)
        if previous is not None and previous != fetch:
            logger.warning(
                "%s %s answered differently within one run (%s, %d bytes, then %s, %d bytes): "
                "the origin is not deterministic; the lock keeps the last answer",
                key.method,
                key.url,
                previous.digest,
                previous.size,
                fetch.digest,
                fetch.size,
            )
            self.events.emit("drift-in-run", url=key.url, method=key.method)
        if previous is None:
            self.stats.recorded += 1
            self.stats.bytes += fetch.size
        self.fetches[key] = fetch
        if self.journal is not None:
            self.journal.append(fetch)

    def error(self, flow: http.HTTPFlow) -> None:
        self._pending.discard(flow.id)
        tee = flow.metadata.pop(_WRITER, None)
        if isinstance(tee, _Tee):
            tee.writer.abort()
        self.stats.failed += 1
        key = flow.metadata.get(flows.KEY)
        what = f"{key.method} {key.url}" if isinstance(key, RequestKey) else "a request"
        message = flow.error.msg if flow.error else "unknown error"
        hint = (
            " — if the origin uses its own CA, pass --upstream-ca PATH"
            if "certificate verify failed" in message.lower()
            else ""
        )
        logger.error("record: %s failed, not recorded: %s%s", what, message, hint)
        self.events.emit("failed", url=getattr(key, "url", None), error=message)

    async def settle(self, timeout: float) -> int:
        """Wait until every forwarded fetch is stored or failed; how many are still pending.

        A client can have the whole body before the ``response`` hook has committed it, so a
        run that stops right after its last fetch must wait here before writing the lock.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._pending and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return len(self._pending)

    def new_lock(self) -> Lock:
        """What this run recorded; with --keep, on top of the existing lock."""
        base = self.previous if self.keep and self.previous is not None else Lock()
        return base.updated(self.fetches.values())

    def write_lock(self) -> bool:
        """Write the canonical lock of everything recorded; remove the journal. Returns changed."""
        changed = write_lock(self.lock_path, self.new_lock())
        if self.journal is not None:
            self.journal.close(remove=True)
            self.journal = None
        return changed

    def abandon(self) -> Path | None:
        """Leave the lock as it is; the journal, if this run recorded anything (else None)."""
        journal, self.journal = self.journal, None
        if journal is None:
            return None
        journal.close(remove=False)  # a run that recorded nothing never made the file
        return journal.path if journal.appended else None

    async def done(self) -> None:
        if self.answers is not None:
            await self.answers.close()
            self.answers = None
        self.events.close()
