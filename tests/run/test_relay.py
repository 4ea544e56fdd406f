"""The relay: bytes unchanged both ways, half-closes passed on, bounded buffers, clean stops.

Every test runs twice: with this Python's asyncio, and with the asyncio of Python 3.11.0 to
3.11.3 (Debian 12's python3 is 3.11.2), where a transport paused in ``connection_made`` reads
anyway (CPython gh-103607): the relay must not lose what a client sends before the target is
connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from fetchproxy.run.relay import WRITE_LIMIT, Relay


def _add_reader_ignoring_a_pause(
    self: asyncio.selector_events._SelectorTransport,  # type: ignore[name-defined]
    fd: int,
    callback: Callable[..., object],
    *args: object,
) -> None:
    """``_SelectorTransport._add_reader`` as in Python 3.11.0 to 3.11.3: it registers the
    reader even when the transport was paused before, as in ``connection_made``."""
    if self._closing:
        return
    self._loop._add_reader(fd, callback, *args)


@pytest.fixture(autouse=True, params=["this-asyncio", "asyncio-of-python-3.11.2"])
def asyncio_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param != "this-asyncio":
        transport = asyncio.selector_events._SelectorTransport  # type: ignore[attr-defined]
        monkeypatch.setattr(transport, "_add_reader", _add_reader_ignoring_a_pause)
    return str(request.param)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
READ_SIZE = 256 * 1024  # the most asyncio's socket transports read at once


@contextlib.asynccontextmanager
async def target(handler: Handler) -> AsyncIterator[tuple[str, int]]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()


@contextlib.asynccontextmanager
async def relay_to(address: tuple[str, int]) -> AsyncIterator[tuple[Relay, int]]:
    listener = socket.create_server(("127.0.0.1", 0))
    relay = Relay(listener, address)
    await relay.start()
    try:
        yield relay, listener.getsockname()[1]
    finally:
        await relay.stop()


async def settle(relay: Relay) -> None:
    """Let the relay's callbacks run until it holds no connection (fails after ~2 s)."""
    for _ in range(200):
        if not relay.pairs:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(relay.pairs)} connection(s) still open in the relay")


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def hash_then_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read until EOF, then answer with the digest and length of what came, then 3 MB."""
    digest, size = hashlib.sha256(), 0
    while chunk := await reader.read(65536):
        digest.update(chunk)
        size += len(chunk)
    writer.write(digest.digest() + struct.pack("!Q", size) + bytes(range(256)) * 12288)
    await writer.drain()
    await close(writer)


def test_bytes_cross_unchanged_both_ways_and_a_half_close_is_passed_on() -> None:
    async def main() -> None:
        async with target(hash_then_answer) as address, relay_to(address) as (relay, port):
            payload = os.urandom(8 * 1024 * 1024)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(payload)  # at once: the relay holds it until the target is connected
            await writer.drain()
            writer.write_eof()  # the target sees EOF, and still answers through the relay
            answer = await asyncio.wait_for(reader.read(), 30)
            await close(writer)
            assert answer[:32] == hashlib.sha256(payload).digest()
            assert struct.unpack("!Q", answer[32:40]) == (len(payload),)
            assert answer[40:] == bytes(range(256)) * 12288
            await settle(relay)
            assert (relay.accepted, relay.failed) == (1, 0)

    asyncio.run(main())


def test_a_half_close_before_the_target_is_connected_reaches_it() -> None:
    async def answer_the_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"got %d bytes, then EOF" % len(await reader.read()))
        await close(writer)

    async def main() -> None:
        async with target(answer_the_eof) as address, relay_to(address) as (relay, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write_eof()  # at once, nothing sent
            assert await asyncio.wait_for(reader.read(), 5) == b"got 0 bytes, then EOF"
            await close(writer)
            await settle(relay)

    asyncio.run(main())


def test_the_target_closing_first_closes_the_client() -> None:
    async def say_bye(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"bye")
        await close(writer)

    async def main() -> None:
        async with target(say_bye) as address, relay_to(address) as (relay, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await asyncio.wait_for(reader.read(), 5) == b"bye"
            await close(writer)
            await settle(relay)

    asyncio.run(main())


def test_a_slow_reader_pauses_the_sender_and_bounds_the_buffers() -> None:
    release = asyncio.Event()
    received = []

    async def read_later(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        size = 0
        while chunk := await reader.read(65536):
            size += len(chunk)
        received.append(size)
        await close(writer)

    async def main() -> None:
        async with target(read_later) as address, relay_to(address) as (relay, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            chunk, sent, most_buffered = b"x" * 65536, 0, 0
            while sent < 256 * 1024 * 1024:
                writer.write(chunk)
                sent += len(chunk)
                try:
                    await asyncio.wait_for(writer.drain(), 0.5)
                except TimeoutError:
                    break  # stalled: every buffer on the way is full
                most_buffered = max(most_buffered, relay.buffered())
            most_buffered = max(most_buffered, relay.buffered())
            assert sent < 256 * 1024 * 1024  # the sender was stopped ...
            assert 0 < most_buffered <= WRITE_LIMIT + READ_SIZE  # ... and the relay held little
            release.set()
            await asyncio.wait_for(writer.drain(), 30)
            writer.write_eof()
            await asyncio.wait_for(reader.read(), 30)
            await close(writer)
            assert received == [sent]

    asyncio.run(main())


def test_an_unreachable_target_closes_the_client_and_is_counted() -> None:
    async def main() -> None:
        closed_port = socket.create_server(("127.0.0.1", 0))
        address = closed_port.getsockname()
        closed_port.close()
        async with relay_to(address) as (relay, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            with pytest.raises(ConnectionResetError):  # a reset: the failure shows as one
                await asyncio.wait_for(reader.read(), 5)
            await close(writer)
            await settle(relay)
            assert (relay.accepted, relay.failed) == (1, 1)

    asyncio.run(main())


def test_a_reset_by_the_client_aborts_the_targets_side() -> None:
    async def main() -> None:
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def wait_for_the_end(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                data = await reader.read()
                done.set_result(f"eof after {data!r}")
            except ConnectionResetError:
                done.set_result("reset")
            await close(w)

        async with target(wait_for_the_end) as address, relay_to(address) as (relay, port):
            client = socket.create_connection(("127.0.0.1", port))
            client.sendall(b"hello")
            await asyncio.sleep(0.1)  # connected through to the target
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST
            assert await asyncio.wait_for(done, 5) == "reset"
            await settle(relay)

    asyncio.run(main())


def test_stop_closes_the_listener_and_every_open_connection() -> None:
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        await close(writer)

    async def main() -> None:
        async with target(hold) as address:
            listener = socket.create_server(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            relay = Relay(listener, address)
            await relay.start()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping")
            await asyncio.sleep(0.1)
            assert len(relay.pairs) == 1
            await relay.stop()
            assert relay.pairs == set()
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(), 5)
            await close(writer)
            assert listener.fileno() == -1
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection("127.0.0.1", port)
            await relay.stop()  # idempotent

    asyncio.run(main())


def test_many_connections_at_once() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read())
        await writer.drain()
        await close(writer)

    async def one(port: int, number: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"connection %d " % number * 1000)
        writer.write_eof()
        data = await reader.read()
        await close(writer)
        return data

    async def main() -> None:
        async with target(echo) as address, relay_to(address) as (relay, port):
            answers = await asyncio.wait_for(asyncio.gather(*(one(port, n) for n in range(64))), 30)
            assert answers == [b"connection %d " % n * 1000 for n in range(64)]
            await settle(relay)
            assert relay.accepted == 64

    asyncio.run(main())
