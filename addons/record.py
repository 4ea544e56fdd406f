"""The record addon: forward each request upstream, store each answer, hand it to the books.

A thin translator between mitmproxy's flows and the core: the request's key comes from
:class:`~fetchproxy.keys.rules.KeyRules`, what to strip before forwarding and which entry an
answer becomes from :mod:`fetchproxy.record.rules`, and every outcome goes to the run's
:class:`~fetchproxy.record.book.RecordBook`, which journals, counts and writes the lock. Every
body streams through the store's writer as it passes (hash + temp file, constant memory).

Embedded (``fetchproxy record``), the book, store and rules come through the constructor, and
the engine finishes the book. In a stock ``mitmdump -s addons/record.py`` the addon opens its
own from the options ``record_lock``, ``record_store``, ``record_log`` and ``record_keep``, and
writes the lock when mitmproxy shuts down.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import weakref
from collections.abc import Collection
from pathlib import Path

from mitmproxy import addonmanager, connection, ctx, exceptions, http
from mitmproxy.proxy import server_hooks

from fetchproxy.addons import flows
from fetchproxy.addons.answers import LockAnswers
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.rules import KeyRules
from fetchproxy.keys.url import origin_of
from fetchproxy.lock.config import config_path_for, load_config
from fetchproxy.record.book import RecordBook
from fetchproxy.record.origins import (
    IPAddress,
    OriginPolicy,
    shown_origin,
)
from fetchproxy.record.rules import (
    KEPT_HEADERS,
    STRIPPED_REQUEST_HEADERS,
    UPSTREAM_ACCEPT_ENCODING,
    client_headers,
    fetch_from_answer,
    is_recordable,
    unclean_headers,
)
from fetchproxy.record.tokens import (
    TOKEN_ANSWER_LIMIT,
    may_be_token_answer,
    redacted_token_answer,
)
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.replay.decisions import (
    ORIGIN_NOT_ALLOWED,
    answer_for,
    invalid_request,
    refusal,
    unkeyable,
)
from fetchproxy.replay.ranges import ByteRange, Unsatisfiable, parse_range
from fetchproxy.store import BlobWriter, Store, StoreError, open_store

logger = logging.getLogger("fetchproxy.record")

_WRITER = "fetchproxy.writer"
_ANSWERED = "fetchproxy.answered"
"""``flow.metadata``: fetchproxy answered this flow itself (a refusal, or from the lock)."""
_UNSTORED = "fetchproxy.unstored"
RANGE_IN_MEMORY = 64 * 1024 * 1024
"""The largest part of a body record keeps in memory to answer a ``Range`` with; a larger part
is answered with the whole body (which RFC 9110 allows), docs/lock-format.md."""
_RANGE = "fetchproxy.range"
"""``flow.metadata``: the client's ``Range``, taken off before the request went upstream."""
_ORIGINAL = "fetchproxy.original"
"""``flow.metadata``: the origin's own status and headers, before a range was cut from them."""


class _Tee:
    """mitmproxy's stream callable: every raw body chunk goes to the store, then on.

    A chunk the store cannot take (a full disk) ends the storing, never the answer: the
    client still gets every byte, and ``failure`` says why this fetch is not recorded. With a
    ``window`` (the client asked for a range) the store gets the whole body and the client
    only the bytes from ``start`` to ``end`` — the answer replay gives it — once the whole body
    has arrived: a client that has its part closes, and the rest must still come from the origin.
    With ``hold`` (a body that may be a token answer, :mod:`fetchproxy.record.tokens`) the
    store gets nothing until :meth:`release` knows what to store: the bytes stay in memory,
    off the disk, up to the limit past which no body is a token answer.
    """

    def __init__(
        self, writer: BlobWriter, window: tuple[int, int] | None = None, *, hold: bool = False
    ) -> None:
        self.writer = writer
        self.chunks = 0
        self.failure: StoreError | None = None
        self.window = window
        self._position = 0
        self._part: list[bytes] = []
        self._held: list[bytes] | None = [] if hold else None
        self._held_size = 0

    def __call__(self, chunk: bytes) -> bytes:
        if chunk and self.failure is None:
            self._store(chunk)
            self.chunks += 1
        if self.window is None:
            return chunk
        if not chunk:  # the end of the body: now the client's part
            part, self._part = b"".join(self._part), []
            return part
        start, end = self._position, self._position + len(chunk)
        self._position = end
        low, high = self.window
        self._part.append(chunk[max(low - start, 0) : max(min(high, end) - start, 0)])
        return b""

    def _store(self, chunk: bytes) -> None:
        if self._held is not None:
            self._held.append(chunk)
            self._held_size += len(chunk)
            if self._held_size <= TOKEN_ANSWER_LIMIT:
                return
            chunk, self._held = b"".join(self._held), None  # too long for a token answer
        try:
            self.writer.update(chunk)
        except StoreError as exc:
            self.failure = exc  # update() aborted the writer

    def release(self, content_encoding: str | None) -> str | None:
        """At the end of the body, store what was held: a token answer redacted, anything
        else as it came. The redaction made (``"token"``), or None."""
        held, self._held = self._held, None
        if held is None or self.failure is not None:
            return None
        data = b"".join(held)
        redacted = redacted_token_answer(data, content_encoding)
        stored = data if redacted is None else redacted
        if stored:
            try:
                self.writer.update(stored)
            except StoreError as exc:
                self.failure = exc
                return None
        return None if redacted is None else "token"


class Record:
    """Records into one :class:`RecordBook`. Options (stock mitmproxy only): ``record_lock``,
    ``record_store``, ``record_log`` and ``record_keep``."""

    def __init__(
        self,
        book: RecordBook | None = None,
        *,
        store: Store | None = None,
        rules: KeyRules | None = None,
        origins: OriginPolicy | None = None,
        own_addresses: Collection[IPAddress] = (),
        keep_headers: frozenset[str] = KEPT_HEADERS,
    ) -> None:
        self._embedded = book is not None
        self.book = book
        self.store = store
        self.rules = rules or KeyRules()
        self.origins = origins or OriginPolicy(guard_host=False)
        self.own_addresses = frozenset(own_addresses)
        self.keep_headers = keep_headers
        self.answers: LockAnswers | None = None
        self._pending: set[str] = set()
        """Flows forwarded upstream whose answer is not yet stored (or failed)."""
        self._checked: dict[tuple[str, int], str] = {}
        """Origins the policy allowed, with the address checked: the one connected to."""
        self._dialled: weakref.WeakKeyDictionary[connection.Server, tuple[str, int]] = (
            weakref.WeakKeyDictionary()
        )
        """Server connections being dialled at a checked address: the name and port each was
        asked for, given back once the dial is done (:meth:`server_connected`). Weak: a dial
        cancelled while it waits for mitmproxy's per-address limit gets no hook at all, and
        its entry goes with the connection."""

    # ------------------------------------------------------------------------- stock mitmproxy

    def load(self, loader: addonmanager.Loader) -> None:
        if self._embedded:
            return
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
        """Under stock mitmproxy: open the books from the options, before anything listens."""
        if self._embedded or not updated & {
            "record_lock",
            "record_store",
            "record_log",
            "record_keep",
        }:
            return
        lock = Path(ctx.options.record_lock)
        store = open_store(ctx.options.record_store)
        log = Path(ctx.options.record_log) if ctx.options.record_log else None
        try:
            self.rules = load_config(config_path_for(lock)).rules
            book = RecordBook.open(lock, store, log, keep=bool(ctx.options.record_keep))
        except FetchproxyError as exc:
            raise exceptions.OptionsError(str(exc)) from None
        if self.book is not None:
            self.book.events.close()
        self.book, self.store = book, store

    async def running(self) -> None:
        if self.book is not None and self.book.keep and self.answers is None and self.store:
            self.answers = LockAnswers(VerifiedBlobs(self.store))
            await self.answers.start()

    # -------------------------------------------------------------------------------- requests

    async def request(self, flow: http.HTTPFlow) -> None:
        book = self.book
        if flow.response is not None or book is None:
            return
        try:
            key = flows.request_key(flow, self.rules)
        except ValueError as exc:  # InvalidURLError, InvalidMethodError, HostMismatchError, ...
            reason, status = unkeyable(exc)
            refused = invalid_request(str(exc), reason, status)
            flow.response = flows.response_from(flow, refused.answer, refused.text)
            flow.metadata[_ANSWERED] = True
            book.refused(reason, key=None, error=str(exc))
            return
        if await self._answer_kept(flow, key):
            return
        problem = await self._origin_problem(*origin_of(key.url))
        if problem is not None:
            refused = refusal(key, lock_name=str(book.lock_path), reason=ORIGIN_NOT_ALLOWED)
            flow.response = flows.response_from(flow, refused.answer, refused.text)
            flow.metadata[_ANSWERED] = True
            book.refused(ORIGIN_NOT_ALLOWED, key=key, error=problem)
            logger.warning("record: refused %s %s: %s", key.method, key.url, problem)
            return
        book.reached(shown_origin(key.url))
        headers = flow.request.headers
        if "range" in headers:  # answered from the whole body, as replay answers it
            flow.metadata[_RANGE] = headers["range"]
        for name in STRIPPED_REQUEST_HEADERS:
            headers.pop(name, None)
        headers["accept-encoding"] = UPSTREAM_ACCEPT_ENCODING
        self._pending.add(flow.id)

    async def _origin_problem(self, host: str, port: int) -> str | None:
        """Why record may not reach ``host:port`` (None: it may). The address it checked is
        kept for ``server_connect``, so the connection goes where the check looked; a name
        that does not resolve is left for ``server_connect`` to fail."""
        name = host.strip("[]")
        refused = self.origins.name_problem(host, port)
        if refused is not None:
            return refused  # without a lookup: the build may not have record resolve it
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                name, port, type=socket.SOCK_STREAM
            )
        except OSError:
            return None
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
        problem = self.origins.check(host, port, addresses, self.own_addresses)
        if problem is None and addresses:
            self._checked[(name, port)] = str(addresses[0])
        return problem

    async def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        """Connect where the origin check looked; check what no request hook saw (raw TCP)."""
        server = data.server
        if server.address is None or (
            self.answers is not None and self.answers.is_blob_server(server.address)
        ):
            return
        host, port = str(server.address[0]), int(server.address[1])
        checked = self._checked.get((host, port))
        if checked is None:
            shown = f"[{host}]" if ":" in host else host.lower()
            problem = await self._origin_problem(shown, port)
            checked = self._checked.get((host, port))
            if problem is not None or checked is None:
                why = problem or f"{shown}:{port}: the name does not resolve"
                server.error = f"fetchproxy: {why}"
                if problem is not None:
                    logger.warning("record: refused a connection to %s:%s: %s", host, port, why)
                return
        if server.sni is None and not _is_address(host):
            server.sni = host
        if checked != host:
            self._dialled[server] = server.address
        server.address = (checked, port)

    def server_connected(self, data: server_hooks.ServerConnectionHookData) -> None:
        """The connection is made at the checked address (its ``peername``): its ``address`` is
        the name again, as it is when mitmproxy resolves a name itself.

        mitmproxy gives a request an open server connection only when the connection's address
        is the one the request asked for: the name. Left at the checked address, a connection
        would serve no other request, so a keep-alive client got a new server connection for
        each request, each kept open while its own connection was, and its sixth request waited
        forever: mitmproxy holds at most five connections to one server address for each
        client connection. mitmproxy refuses to change the address of an open connection (an
        addon that did would mean to redirect it); this one is not redirected, only named as
        it was asked for, so the guard is stepped around.
        """
        self._give_back_the_name(data.server)

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        self._give_back_the_name(data.server)

    def _give_back_the_name(self, server: connection.Server) -> None:
        asked = self._dialled.pop(server, None)
        if asked is not None:
            object.__setattr__(server, "address", asked)

    async def _answer_kept(self, flow: http.HTTPFlow, key: RequestKey) -> bool:
        """With --keep: answer from the existing lock when it holds the request."""
        assert self.book is not None
        fetch = self.book.kept_answer(key)
        answers = self.answers
        if (
            fetch is None
            or fetch.redacted is not None  # the client needs a real token: ask the origin
            or answers is None
            or not answers.store.contains(fetch.digest)
        ):
            return False
        try:
            await answers.verified.verify(fetch.digest, fetch.size)
        except StoreError as exc:  # corrupt, or not the size the lock says
            logger.warning("%s; fetching it again", exc)
            return False
        request = flow.request
        answer = answer_for(fetch, method=request.method, range_header=request.headers.get("range"))
        await answers.answer(flow, fetch, answer)
        flow.metadata[_ANSWERED] = True
        self.book.answered_from_lock()
        return True

    # ------------------------------------------------------------------------------- responses

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self.answers is not None and self.answers.responseheaders(flow) is not None:
            return  # a kept answer streamed from the store
        response = flow.response
        assert response is not None
        key = flow.metadata.get(flows.KEY)
        if (
            self.store is None
            or self.book is None
            or flow.metadata.get(_ANSWERED)
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
        original = list(response.headers.items(multi=True))
        flow.metadata[_ORIGINAL] = (response.status_code, original)
        hold = may_be_token_answer(flow.request.method, response.headers.get("content-length"))
        response.headers = http.Headers(
            tuple(
                (name.encode(), value.encode("utf-8", "surrogateescape"))
                for name, value in client_headers(
                    key,
                    status=response.status_code,
                    headers=original,
                    rules=self.rules,
                    keep=self.keep_headers,
                )
            )
        )
        tee = _Tee(writer, _answer_range(flow), hold=hold)
        flow.metadata[_WRITER] = tee
        response.stream = tee

    async def response(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(_ANSWERED):
            return
        try:
            await self._store_response(flow)
        finally:
            self._pending.discard(flow.id)

    async def _store_response(self, flow: http.HTTPFlow) -> None:
        tee = flow.metadata.pop(_WRITER, None)
        response = flow.response
        key = flow.metadata.get(flows.KEY)
        book = self.book
        if book is None:
            return
        if not isinstance(tee, _Tee) or response is None or not isinstance(key, RequestKey):
            if response is not None and key is not None and not flow.metadata.get(_UNSTORED):
                book.passed()
            return
        if tee.chunks == 0 and response.raw_content:
            tee(response.raw_content)  # a body mitmproxy did not stream
        status, headers = flow.metadata.get(_ORIGINAL, (response.status_code, []))
        redacted = tee.release(_header(headers, "content-encoding"))
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
            status=status,
            headers=headers,
            digest=digest,
            size=size,
            rules=self.rules,
            keep=self.keep_headers,
            redacted=redacted,
        )
        book.recorded(fetch)
        dropped = unclean_headers(headers, self.keep_headers)
        if dropped:
            book.headers_dropped(key, dropped)

    def _unstored(self, flow: http.HTTPFlow, key: RequestKey, exc: StoreError) -> None:
        flow.metadata[_UNSTORED] = True
        if self.book is not None:
            self.book.unstored(key, exc)

    def error(self, flow: http.HTTPFlow) -> None:
        self._pending.discard(flow.id)
        tee = flow.metadata.pop(_WRITER, None)
        if isinstance(tee, _Tee):
            tee.writer.abort()
        key = flow.metadata.get(flows.KEY)
        key = key if isinstance(key, RequestKey) else None
        what = f"{key.method} {key.url}" if key is not None else "a request"
        message = self.rules.redact_text(flow.error.msg) if flow.error else "unknown error"
        hint = (
            " — if the origin uses its own CA, pass --upstream-ca PATH"
            if "certificate verify failed" in message.lower()
            else ""
        )
        logger.error("record: %s failed, not recorded: %s%s", what, message, hint)
        if self.book is not None:
            self.book.failed(key, message)

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

    async def done(self) -> None:
        if self.answers is not None:
            await self.answers.close()
            self.answers = None
        if not self._embedded and self.book is not None:
            await self.settle(30.0)
            result = self.book.finish()
            where = "written" if result.written else f"unchanged ({result.reason})"
            logger.info("record: %s: %s", self.book.lock_path, where)


def _answer_range(flow: http.HTTPFlow) -> tuple[int, int] | None:
    """Give the client's ``Range`` the answer replay would give, from the origin's whole 200
    (whose bytes are stored all the same): 206 and the part, or 416; None: the whole body."""
    wanted = flow.metadata.get(_RANGE)
    response = flow.response
    assert response is not None
    length = response.headers.get("content-length", "")
    if (
        wanted is None
        or flow.request.method == "HEAD"
        or response.status_code != 200
        or not length.isdigit()
    ):
        return None
    part = parse_range(wanted, int(length))
    if isinstance(part, Unsatisfiable):
        response.status_code, response.reason = 416, "Range Not Satisfiable"
        # only these, as replay answers a range outside the body
        response.headers = http.Headers(
            content_range=part.content_range().encode(), content_length=b"0"
        )
        return (0, 0)
    if isinstance(part, ByteRange) and part.length <= RANGE_IN_MEMORY:
        response.status_code, response.reason = 206, "Partial Content"
        del response.headers["content-length"]
        response.headers["content-range"] = part.content_range()
        response.headers["content-length"] = str(part.length)
        return (part.start, part.end + 1)
    return None


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    """The first value of header ``name`` (lower case) in ``headers``, any case."""
    return next((value for key, value in headers if key.lower() == name), None)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


addons = [Record()]
"""For ``mitmdump -s addons/record.py``."""
