"""``fetchproxy serve``: a long-running record or replay proxy, without a sandbox.

Prints ``fetchproxy: listening on http://HOST:PORT`` once it accepts connections, runs until
SIGINT or SIGTERM, then closes its listeners, writes what it must (the lock, when recording) and
prints a summary.
"""

from __future__ import annotations

import asyncio
import signal

from fetchproxy.run.engines import open_run
from fetchproxy.run.outcome import finish
from fetchproxy.run.settings import ProxySettings


async def _serve(settings: ProxySettings) -> int:
    run = open_run(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before anyone can know where it listens
        loop.add_signal_handler(sig, stop.set)
    try:
        host, port = (await run.start())[0]
        shown = f"[{host}]" if ":" in host else host
        print(f"fetchproxy: listening on http://{shown}:{port}", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await run.stop()
    return finish(run)


def serve(settings: ProxySettings) -> int:
    """Run the proxy until SIGINT/SIGTERM; the exit status."""
    return asyncio.run(_serve(settings))
