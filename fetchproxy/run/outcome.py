"""How a run ends: its exit status (:class:`ExitStatus`) and the lines it prints on stderr.

Every command's exit status comes from here. ``record``/``replay -- BUILD``: the build's own
status when it failed (``128 + N`` when signal N stopped it; 127 when the build command cannot
be found, 126 when it cannot be run), else :attr:`ExitStatus.NOT_HERMETIC` when replay refused
a request (or, with ``--exact``, left an entry unused), else :attr:`ExitStatus.INCOMPLETE` when
record could not keep an answer or write the lock, else 0. Bad input of any command is
:attr:`ExitStatus.USAGE`. The README's list is checked against this enum by a test.
"""

from __future__ import annotations

import enum
import shlex
import sys
from pathlib import Path

from fetchproxy.lock.model import Lock
from fetchproxy.record.book import RecordBook, RecordResult
from fetchproxy.replay.book import ReplayBook
from fetchproxy.review.diff import diff_locks, render_text
from fetchproxy.run.engines import ProxyRun
from fetchproxy.text import counted, human_bytes, printable


class ExitStatus(enum.IntEnum):
    """The exit statuses fetchproxy itself chooses (a failed build's own status passes through)."""

    OK = 0
    INCOMPLETE = 1
    """Something the command checks was not whole: record could not store an answer or write
    the lock (the lock stays as it was); ``lock verify``/``store verify`` found a problem;
    ``lock diff``: the locks differ."""
    USAGE = 2
    """A usage error or bad input: a malformed lock, an unknown version, missing blobs, a file
    that cannot be written; nothing was changed."""
    NOT_HERMETIC = 3
    """Replay refused at least one request (with ``--exact``: or left a lock entry unused)."""
    CANNOT_EXECUTE = 126
    """The build command exists but cannot be run."""
    NOT_FOUND = 127
    """The build command cannot be found."""


SIGNALLED = 128
"""A build stopped by signal N exits ``128 + N``, as a shell reports it."""


def build_status_code(build_status: int) -> int:
    """A build's wait status (its code, or minus the signal) as an exit status."""
    return SIGNALLED - build_status if build_status < 0 else build_status


# ------------------------------------------------------------------------------------ finishing


def finish(run: ProxyRun, *, build_status: int = 0) -> int:
    """Write the lock (record) and print the summary; the proxy's part of the exit status.

    Record leaves the lock unchanged, and keeps its journal for ``fetchproxy lock recover``,
    when the build failed or was stopped (``build_status``: negative for a signal) or an answer
    could not be stored (then :attr:`ExitStatus.INCOMPLETE`). Replay: ``NOT_HERMETIC`` when
    ``--exact`` was given and the run refused a request or left entries unused.
    """
    lock = run.settings.lock
    if run.record is not None:
        result = run.record.finish(build_status)
        _say(record_text(run.record, result, lock=lock))
        policy = run.settings.origins
        if policy.guard_host and not policy.patterns and run.record.origins:
            _say(reached_text(run.record.origins, lock=lock))
        return ExitStatus.OK if result.written else ExitStatus.INCOMPLETE
    book = run.book
    assert book is not None, "a replay run keeps a book"
    _say(replay_summary(book, lock=lock))
    book.close()
    if run.settings.attest is not None:
        run.settings.attest.finish(book, build_status=build_status)
    if run.settings.exact and (book.stats.refused or book.unused()):
        print(
            f"fetchproxy: --exact: the build did not use exactly {lock} "
            f"({book.stats.refused} refused, {len(book.unused())} unused)",
            file=sys.stderr,
        )
        return ExitStatus.NOT_HERMETIC
    return ExitStatus.OK


def build_outcome(run: ProxyRun, build_status: int) -> int:
    """The exit status of ``record``/``replay -- BUILD`` once the build ended and the proxy
    stopped: the build's own when it failed, else replay's refusals, else the proxy's."""
    proxy_status = finish(run, build_status=build_status)
    if build_status != 0:
        return build_status_code(build_status)
    refused = 0 if run.book is None else run.book.stats.refused
    if refused:
        print(
            f"fetchproxy: the build succeeded, but replay refused {refused} "
            f"request(s): it is not hermetic (exit status {ExitStatus.NOT_HERMETIC})",
            file=sys.stderr,
        )
        return ExitStatus.NOT_HERMETIC
    return proxy_status


# ----------------------------------------------------------------------------------------- text


def _say(text: str) -> None:
    """Print ``text`` on stderr, a line at a time, nothing in it a terminal acts on."""
    print("\n".join(printable(line, lines=False) for line in text.split("\n")), file=sys.stderr)


def record_text(book: RecordBook, result: RecordResult, *, lock: Path) -> str:
    """What a record run says at the end: the summary, then the lock's changes or why it stays."""
    lines = [record_summary(book, lock=lock, written=result.written)]
    if result.written:
        if result.uploaded is not None:
            lines.append(result.uploaded)
        if result.previous is not None:
            lines.append(lock_changes(result.previous, result.new, lock=lock))
        return "\n".join(lines)
    if result.changed_meanwhile:
        lines.append(
            f"fetchproxy: {result.reason}: fetchproxy left {lock} as it was, but it changed "
            "during the run (not by fetchproxy): check it before you commit it"
        )
    else:
        lines.append(f"fetchproxy: {result.reason}: {lock} is unchanged")
    if result.detail is not None:
        lines.extend(f"fetchproxy: {line}" for line in result.detail.splitlines())
    if result.journal is not None:
        onto = " on top of it (--keep)" if book.keep else ""
        lines.append(
            f"fetchproxy: what it recorded is in {result.journal}: `fetchproxy lock recover "
            f"--lock {lock}` makes that the lock{onto}; delete it to record afresh"
        )
    return "\n".join(lines)


def reached_text(origins: set[str], *, lock: Path) -> str:
    """The origins a record reached, and the command that allows just them from now on."""
    command = ["fetchproxy", "config", "add", "record.allow", *sorted(origins)]
    if lock.resolve() != (Path.cwd() / "fetchproxy.lock.toml").resolve():
        command[3:3] = ["--lock", str(lock)]
    return (
        f"fetchproxy: reached {counted(len(origins), 'origin', 'origins')}; to reach only "
        f"these from now on (or use --allow-origin):\n  {printable(shlex.join(command))}"
    )


def record_summary(book: RecordBook, *, lock: Path, written: bool = True) -> str:
    """What a record run did; ``written``: whether its lock was written (else left unchanged)."""
    stats = book.stats
    line = (
        f"fetchproxy: recorded {counted(stats.recorded, 'fetch', 'fetches')} "
        f"({human_bytes(stats.bytes)}) {'into' if written else 'for'} {lock}"
    )
    extras = []
    if stats.kept:
        kept = counted(stats.kept, "fetch", "fetches")
        extras.append(f"{kept} answered from the existing lock (--keep)")
    if stats.passed:
        extras.append(f"{stats.passed} passed through unlocked (5xx or websocket)")
    if stats.refused:
        extras.append(f"{stats.refused} refused by fetchproxy (see the event log)")
    if stats.failed:
        extras.append(f"{stats.failed} failed")
    if stats.redacted:
        answers = counted(stats.redacted, "token answer", "token answers")
        extras.append(f'{answers} locked with the tokens replaced (redacted = "token")')
    if stats.headers_not_kept:
        extras.append(f"{stats.headers_not_kept} locked without a header that was not clean text")
    if stats.unstored:
        extras.append(f"{stats.unstored} not stored (the errors above say why)")
    return line + (f"; {', '.join(extras)}" if extras else "")


def replay_summary(replay: ReplayBook, *, lock: Path) -> str:
    stats = replay.stats
    lines = [
        f"fetchproxy: served {counted(stats.served, 'fetch', 'fetches')} "
        f"({human_bytes(stats.bytes)}) "
        f"from {lock}; refused {stats.refused}"
    ]
    for key in replay.refused:
        lines.append(f"fetchproxy:   refused {key.method} {key.url}")
        if key in replay.hints:
            lines.append(f"fetchproxy:     {replay.hints[key]}")
    hidden = stats.refused - replay.refused_unkeyed - len(replay.refused)
    if hidden > 0:
        lines.append(f"fetchproxy:   ... and {hidden} more (see the event log)")
    if replay.refused_unkeyed:
        lines.append(
            f"fetchproxy:   and {replay.refused_unkeyed} that were not HTTP requests a lock "
            "could hold (invalid, or not HTTP; see the event log)"
        )
    unused = replay.unused()
    if unused:
        lines.append(f"fetchproxy: {len(unused)} of {len(replay.lock)} lock entries went unused")
    lines.append(fetch_set_line(replay))
    return "\n".join(lines)


def fetch_set_line(replay: ReplayBook) -> str:
    """``fetchproxy: fetch-set digest blake3:… (N entries: the whole lock)``: the digest of what
    was served, which is ``fetchproxy lock digest``'s when the run was exact."""
    served = replay.served_set()
    if len(served.fetches) == len(replay.lock):
        count = f"{counted(len(served.fetches), 'entry', 'entries')}: the whole lock"
    else:
        count = f"{len(served.fetches)} of {len(replay.lock)} lock entries"
    return f"fetchproxy: fetch-set digest {served.digest} ({count})"


def lock_changes(old: Lock, new: Lock, *, lock: Path) -> str:
    """What a record changed in the lock, in the words of ``fetchproxy lock diff``."""
    diff = diff_locks(old, new)
    if diff.identical:
        return f"fetchproxy: {lock} is unchanged"
    return render_text(diff, old_label=f"{lock} (before)", new_label=f"{lock} (now)").rstrip("\n")
