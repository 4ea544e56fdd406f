"""Record's origin check, before any connection: a name no allowed origin matches is refused
without being looked up, so a build cannot have record resolve names (a DNS query is a message
out of the sandbox) it may not reach."""

from __future__ import annotations

import asyncio
import gc
import socket
from typing import Any

from mitmproxy import connection
from mitmproxy.proxy.server_hooks import ServerConnectionHookData

from fetchproxy.addons.record import Record
from fetchproxy.record.origins import OriginPolicy


def lookups_made(record: Record, host: str, port: int) -> tuple[str | None, list[str]]:
    """What record says of ``host:port``, and the names it looked up to say it."""
    names: list[str] = []

    async def check() -> str | None:
        loop = asyncio.get_running_loop()
        real = loop.getaddrinfo

        async def spy(name: Any, *args: Any, **kwargs: Any) -> Any:
            names.append(str(name))
            if name != "localhost":  # never a query leaving the machine, even when it fails
                raise socket.gaierror(socket.EAI_NONAME, "not looked up by this test")
            return await real(name, *args, **kwargs)

        loop.getaddrinfo = spy  # type: ignore[method-assign,assignment]
        return await record._origin_problem(host, port)

    return asyncio.run(check()), names


def test_a_name_no_allowed_origin_matches_is_refused_without_a_lookup() -> None:
    record = Record(origins=OriginPolicy.of(["localhost:8443"], guard_host=True))
    problem, names = lookups_made(record, "elsewhere.example", 443)
    assert problem is not None
    assert "elsewhere.example:443 is not among the allowed origins" in problem
    assert names == []
    problem, names = lookups_made(record, "localhost", 8443)  # named exactly: allowed
    assert (problem, names) == (None, ["localhost"])
    assert record._checked[("localhost", 8443)] in {"127.0.0.1", "::1"}


def test_without_allowed_origins_a_name_is_looked_up_to_check_its_addresses() -> None:
    record = Record(origins=OriginPolicy(guard_host=True))
    problem, names = lookups_made(record, "localhost", 8443)
    assert names == ["localhost"]
    assert problem is not None
    assert "is the host's own address" in problem


def test_a_dial_that_ends_without_a_hook_leaves_nothing_behind() -> None:
    """A dial cancelled while it waits for mitmproxy's limit of connections to one address
    gets neither ``server_connected`` nor ``server_connect_error``: what record kept to give
    the connection its name back goes with the connection, not with the run."""
    record = Record(origins=OriginPolicy.of(["localhost:8443"], guard_host=False))
    client = connection.Client(
        peername=("127.0.0.1", 5000), sockname=("127.0.0.1", 8080), timestamp_start=0
    )
    for _ in range(20):
        server = connection.Server(address=("localhost", 8443))
        asyncio.run(record.server_connect(ServerConnectionHookData(client=client, server=server)))
        assert server.address in {("127.0.0.1", 8443), ("::1", 8443)}  # dialled as checked
        assert len(record._dialled) == 1  # the name, to give back once it is connected
        del server  # cancelled: no hook follows
    gc.collect()
    assert len(record._dialled) == 0


def test_a_dial_made_gets_its_name_back() -> None:
    """mitmproxy reuses a server connection only for requests to the address it has: once
    connected at the checked address, it is named again as it was asked for."""
    record = Record(origins=OriginPolicy.of(["localhost:8443"], guard_host=False))
    client = connection.Client(
        peername=("127.0.0.1", 5000), sockname=("127.0.0.1", 8080), timestamp_start=0
    )
    server = connection.Server(address=("localhost", 8443))
    hook = ServerConnectionHookData(client=client, server=server)
    asyncio.run(record.server_connect(hook))
    assert server.address != ("localhost", 8443)
    server.state = connection.ConnectionState.OPEN  # as mitmproxy has it when connected
    record.server_connected(hook)
    assert server.address == ("localhost", 8443)
    assert len(record._dialled) == 0
