"""The ``fetchproxy`` command line: a thin skin over the API, one command table.

:data:`COMMANDS` lists every command with its one-line summary and the module that parses and
runs it. A command's module is imported only when that command runs (``fetchproxy --help``
imports none of them), so the CLI starts in milliseconds and the slow parts (mitmproxy) load
only for the commands that need them. Each command module has ``add_arguments(parser, words)``
and ``run(args) -> int``; options shared by several commands are defined once in
:mod:`fetchproxy.cli.options`. Exit statuses: :class:`fetchproxy.run.outcome.ExitStatus`; every
:class:`~fetchproxy.errors.FetchproxyError` escaping a command is its message and status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from fetchproxy.cli.options import Parser
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.url import redact_text
from fetchproxy.text import printable


@dataclass(frozen=True, slots=True)
class Command:
    words: tuple[str, ...]
    summary: str
    module: str
    """The module (under fetchproxy.cli) that parses and runs it."""


COMMANDS: tuple[Command, ...] = (
    Command(
        ("record",), "run BUILD in the network sandbox; record every fetch into the lock", "build"
    ),
    Command(
        ("replay",), "run BUILD in the network sandbox; serve only what the lock holds", "build"
    ),
    Command(
        ("serve",), "run a record or replay proxy for clients you point at it (no sandbox)", "serve"
    ),
    Command(
        ("lock", "diff"),
        "what changed between two locks: added, removed, content drift, new hosts",
        "lock",
    ),
    Command(
        ("lock", "show"), "list a lock one entry per line (for review and git's textconv)", "lock"
    ),
    Command(("lock", "verify"), "check that every entry's body is in the store and intact", "lock"),
    Command(("lock", "fmt"), "rewrite a lock in canonical form (e.g. after a merge)", "lock"),
    Command(
        ("lock", "merge"),
        "merge two locks entry by entry (git's merge driver: BASE OURS THEIRS)",
        "merge",
    ),
    Command(
        ("lock", "recover"), "write the lock from the journal of an interrupted record", "lock"
    ),
    Command(
        ("lock", "digest"),
        "print a lock's fetch-set digest (what an exact replay of it prints)",
        "provenance",
    ),
    Command(
        ("lock", "sbom"),
        "a CycloneDX or SPDX SBOM of what a lock fetches, or of what a replay served",
        "provenance",
    ),
    Command(
        ("attest", "verify"),
        "check an attestation's signature, and that its statement matches the lock",
        "attest",
    ),
    Command(
        ("attest", "sign"),
        "sign a statement `replay --attest` wrote, in a step the build cannot see",
        "attest",
    ),
    Command(
        ("store", "push"),
        "upload the blobs the locks name to the remote store (create-only)",
        "remote",
    ),
    Command(
        ("store", "pull"),
        "download the blobs the locks name that the store lacks, verified, from the remote",
        "remote",
    ),
    Command(
        ("store", "fetch"),
        "fetch the lock's blobs again from their origins; publish only what matches the lock",
        "fetch",
    ),
    Command(
        ("store", "gc"),
        "remove the blobs no given lock uses (from the store, or with --remote the remote's)",
        "store",
    ),
    Command(
        ("store", "verify"),
        "rehash every blob in the store; report (and --repair) corrupt ones",
        "store",
    ),
    Command(
        ("config", "add"),
        "add values to a setting of the project's fetchproxy.toml, keeping its comments",
        "config",
    ),
    Command(("ca", "path"), "print the path of the CA certificate clients must trust", "ca"),
    Command(
        ("demo",), "the whole story on embedded defaults: record, replay, refuse, review", "demo"
    ),
)
"""Every command, in the order ``--help`` lists them."""

GROUPS: dict[str, str] = {
    "lock": "work with lock files",
    "store": "work with the content-addressed store",
    "config": "the project's settings (fetchproxy.toml beside the lock)",
    "ca": "the CA whose certificate clients must trust for HTTPS through the proxy",
    "attest": "attestations of what a replay served (in-toto statements, DSSE envelopes)",
}
"""Commands that only hold subcommands, and their summaries."""


def _module(command: Command) -> ModuleType:
    return importlib.import_module(f"fetchproxy.cli.{command.module}")


def build_parser(only: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with ``only``, the arguments of that command alone (the
    others are listed by name and summary, and their modules are not imported)."""
    parser = Parser(
        prog="fetchproxy",
        description="Hermetic builds at the network boundary: record a build's fetches "
        "into a reviewable lock, replay them byte for byte.",
    )
    parser.add_argument("--version", action=_VersionAction)
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction[Parser]] = {}
    for command in COMMANDS:
        subparsers = top
        if len(command.words) == 2:
            group = command.words[0]
            if group not in groups:
                holder = _add(top, group, GROUPS[group])
                groups[group] = holder.add_subparsers(
                    dest=f"{group}_command", required=True, metavar="COMMAND"
                )
            subparsers = groups[group]
        sub = _add(subparsers, command.words[-1], command.summary)
        sub.set_defaults(words=command.words)
        if only is None or only == command.words:
            _module(command).add_arguments(sub, command.words)
    return parser


def _add(subparsers: argparse._SubParsersAction[Parser], name: str, summary: str) -> Parser:
    """A subcommand whose summary is both its entry in the parent's list and its description."""
    return subparsers.add_parser(name, help=summary, description=summary)


def chosen(argv: Sequence[str]) -> Command | None:
    """The command ``argv`` starts with (None: none, or only a group's name)."""
    for command in COMMANDS:
        if tuple(argv[: len(command.words)]) == command.words:
            return command
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fetchproxy`` command; returns the exit status."""
    _setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = chosen(argv)
    args = build_parser(only=None if command is None else command.words).parse_args(argv)
    command = chosen(list(args.words))
    assert command is not None
    try:
        status: int = _module(command).run(args)
    except FetchproxyError as exc:
        print(f"fetchproxy: error: {printable(str(exc))}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    return status


# ---------------------------------------------------------------------------------- plumbing


class _VersionAction(argparse.Action):
    """``--version``: print ``fetchproxy X.Y.Z`` and exit 0 (looked up only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        print(f"fetchproxy {version()}")
        parser.exit()


def version() -> str:
    """The installed distribution's version."""
    from importlib import metadata  # noqa: PLC0415 -- keeps `--help` fast

    try:
        return metadata.version("fetchproxy")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"fetchproxy: {level}{printable(record.getMessage())}"


def _third_party_redacted(record: logging.LogRecord) -> bool:
    """mitmproxy's messages quote request lines and header values: cut them out."""
    if not record.name.startswith("fetchproxy"):
        record.msg, record.args = redact_text(record.getMessage()), ()
    return True


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time, not the one it was made with."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def _setup_logging() -> None:
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    handler.addFilter(_third_party_redacted)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("fetchproxy").setLevel(logging.INFO)
