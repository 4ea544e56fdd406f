"""``fetchproxy serve``: a long-running record or replay proxy, without a sandbox.

Prints ``fetchproxy: listening on http://HOST:PORT`` once it accepts connections, runs until
SIGINT or SIGTERM, then closes its listeners, writes what it must (the lock, when recording) and
prints a summary.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from fetchproxy.files import write_error
from fetchproxy.run.engines import make_run
from fetchproxy.run.outcome import lock_changes, record_summary, replay_summary
from fetchproxy.run.settings import ProxySettings

if TYPE_CHECKING:
    from fetchproxy.addons.record import Record
    from fetchproxy.run.engines import Run


async def _serve(settings: ProxySettings) -> int:
    run = make_run(settings)
    await run.start()
    host, port = run.addresses[0]
    shown = f"[{host}]" if ":" in host else host
    print(f"fetchproxy: listening on http://{shown}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await run.stop()
    return finish(run)


NOT_EXACT = 3
"""The exit status of a replay that refused requests, or (with --exact) left entries unused."""


def finish(run: Run, *, build_status: int = 0) -> int:
    """Write the lock (record) and print the summary; the exit status of a proxy run.

    Record leaves the lock unchanged, and keeps its journal for ``fetchproxy lock recover``,
    when the build failed or was interrupted (``build_status``, negative for a signal) or an
    answer could not be stored (then the status is 1). For replay the status is
    :data:`NOT_EXACT` when ``--exact`` was given and the run refused a request or left lock
    entries unused; otherwise 0 (``record``/``replay -- BUILD`` add their own rule for
    refusals).
    """
    lock = run.settings.lock
    record = run.record
    if record is not None:
        why = _why_the_lock_stays(record, build_status)
        if why is None:
            try:
                record.write_lock()
            except OSError as exc:
                why = str(write_error(lock, exc, "the lock could not be written"))
            else:
                print(record_summary(record, lock=lock), file=sys.stderr)
                if record.previous is not None:
                    changes = lock_changes(record.previous, record.new_lock(), lock=lock)
                    print(changes, file=sys.stderr)
                return 0
        journal = record.abandon()
        print(record_summary(record, lock=lock, written=False), file=sys.stderr)
        print(f"fetchproxy: {why}: {lock} is unchanged", file=sys.stderr)
        if journal is not None:
            onto = " on top of it (--keep)" if record.keep else ""
            print(
                f"fetchproxy: what it recorded is in {journal}: `fetchproxy lock recover "
                f"--lock {lock}` makes that the lock{onto}; delete it to record afresh",
                file=sys.stderr,
            )
        return 1
    book = run.book
    assert book is not None, "a replay run keeps a book"
    print(replay_summary(book, lock=lock), file=sys.stderr)
    if run.settings.exact and (book.stats.refused or book.unused()):
        print(
            f"fetchproxy: --exact: the build did not use exactly {lock} "
            f"({book.stats.refused} refused, {len(book.unused())} unused)",
            file=sys.stderr,
        )
        return NOT_EXACT
    return 0


def _why_the_lock_stays(record: Record, build_status: int) -> str | None:
    """Why this record must not write its lock (None: it may)."""
    if build_status < 0:
        try:
            name = signal.Signals(-build_status).name
        except ValueError:  # a real-time signal has no name
            name = f"signal {-build_status}"
        return f"the build was stopped by {name}"
    if build_status > 0:
        return f"the build failed (exit status {build_status})"
    if record.stats.unstored:
        return f"{record.stats.unstored} answer(s) could not be stored"
    return None


def serve(settings: ProxySettings) -> int:
    """Run the proxy until SIGINT/SIGTERM; the exit status."""
    return asyncio.run(_serve(settings))
