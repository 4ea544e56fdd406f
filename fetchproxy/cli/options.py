"""What every command's parser shares: the parser class, the options defined once, their types,
the one usage error, and the one way a command finds the store it was pointed at."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.errors import FetchproxyError
from fetchproxy.store import DiskStore, open_store
from fetchproxy.store.remote_url import RemoteURL, RemoteURLError, parse_remote_url

if TYPE_CHECKING:
    from fetchproxy.lock.config import Config

DEFAULT_LOCK = "fetchproxy.lock.toml"
LOCK_HELP = f"the lock file (default: $FETCHPROXY_LOCK or ./{DEFAULT_LOCK})"
STORE_HELP = (
    "the content-addressed store (default: $FETCHPROXY_STORE, else "
    "$XDG_CACHE_HOME/fetchproxy/store, else ~/.cache/fetchproxy/store)"
)
REMOTE_VAR = "FETCHPROXY_REMOTE"
REMOTE_HELP = (
    "the remote store the lock's blobs travel through, s3://BUCKET/PREFIX (default: "
    f"${REMOTE_VAR}, else fetchproxy.toml's [store] remote); endpoint, region and credentials "
    "come from the AWS configuration (AWS_ENDPOINT_URL, AWS_PROFILE, ...), see "
    "docs/remote-store.md"
)
CONFIGURED = True
"""``store gc --remote`` without a URL (not a string: argparse would parse that as a URL): the
remote the environment or fetchproxy.toml names."""
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(FetchproxyError, ValueError):
    """The command line asks for something that cannot be done (exit status 2)."""


class NoStoreError(UsageError, FileNotFoundError):
    """``--store`` (or the default) names no store, where a command needs one."""


class Parser(argparse.ArgumentParser):
    """An argument parser that refuses what it cannot parse itself, with its own usage.

    argparse hands a subcommand's unknown arguments up to the top-level parser, whose usage
    (``fetchproxy [-h] COMMAND ...``) says nothing about the subcommand; every parser here
    knows all the arguments it takes, so the one that met an unknown argument reports it.
    ``check``, when set, is called with what the parser parsed; a message it returns is a
    usage error too.
    """

    check: Callable[[argparse.Namespace], str | None] | None = None

    # typeshed overloads this on the namespace's type; fetchproxy passes none or a Namespace
    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        problem = None if self.check is None else self.check(parsed)
        if problem is not None:
            self.error(problem)
        return parsed, extras


# ------------------------------------------------------------------------- the shared options


def default_lock() -> Path:
    """``$FETCHPROXY_LOCK``, else ``fetchproxy.lock.toml`` in the current directory."""
    return Path(os.environ.get("FETCHPROXY_LOCK", DEFAULT_LOCK))


def add_lock(parser: argparse.ArgumentParser) -> None:
    """``--lock PATH``."""
    parser.add_argument("--lock", type=Path, default=default_lock(), metavar="PATH", help=LOCK_HELP)


def add_store(parser: argparse.ArgumentParser) -> None:
    """``--store DIR``, for every command that reads or writes the store."""
    parser.add_argument("--store", type=Path, default=None, metavar="DIR", help=STORE_HELP)


def add_log(parser: argparse.ArgumentParser) -> None:
    """``--log PATH``, for every command that writes an event log."""
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        metavar="PATH",
        help="JSON-lines event log (default: beside the lock)",
    )


def add_remote(
    parser: argparse.ArgumentParser, *, bare: str | None = None, negatable: bool = True
) -> None:
    """``--remote s3://BUCKET/PREFIX`` (and ``--no-remote`` when ``negatable``), for every
    command that touches the store. With ``bare`` (its help), ``--remote`` may also stand
    alone, for the configured one."""
    group = parser.add_mutually_exclusive_group() if negatable else parser
    if bare is None:
        group.add_argument(
            "--remote",
            type=remote_url,
            default=None,
            metavar="s3://BUCKET/PREFIX",
            help=REMOTE_HELP,
        )
    else:
        group.add_argument(
            "--remote",
            type=remote_url,
            nargs="?",
            const=CONFIGURED,
            default=None,
            metavar="s3://BUCKET/PREFIX",
            help=bare,
        )
    if negatable:
        group.add_argument(
            "--no-remote",
            action="store_true",
            help=f"use no remote store, even if ${REMOTE_VAR} or fetchproxy.toml names one",
        )


def chosen_remote(args: argparse.Namespace, *configs: Config) -> RemoteURL | None:
    """The remote a command uses: ``--remote``, else ``$FETCHPROXY_REMOTE``, else the
    ``[store] remote`` of ``configs`` (which must agree); ``None`` with ``--no-remote``."""
    if getattr(args, "no_remote", False):
        return None
    given = getattr(args, "remote", None)
    if isinstance(given, RemoteURL):
        return given
    value = os.environ.get(REMOTE_VAR, "")
    if value:
        return parse_remote_url(value, source=f"${REMOTE_VAR}")
    named = {config.remote: config.path for config in configs if config.remote is not None}
    if len(named) > 1:
        shown = "; ".join(f"{path}: {remote}" for remote, path in named.items())
        raise UsageError(
            f"the locks' fetchproxy.toml files name different remote stores ({shown}): give "
            "--remote to choose one"
        )
    return next(iter(named), None)


def existing_store(root: Path | None, *, why: str) -> DiskStore:
    """The store at ``root`` (``--store``, else the default), which must exist: a mistyped path
    is an error, never an empty store. ``why`` ends the message: who needs it and for what."""
    store = open_store(root)
    if not store.root.is_dir():
        raise NoStoreError(
            f"{store.root}: no store here — point --store or FETCHPROXY_STORE at the store "
            f"{why} (a store is created by the first `fetchproxy record`)"
        )
    return store


# -------------------------------------------------------------------------------- value types


def listen_address(value: str) -> tuple[str, int]:
    """``--listen HOST:PORT``."""
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
    if int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"{value!r}: the port must be from 0 to 65535 (0 picks a free one)"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def upstream_ca(value: str) -> Path:
    """``--upstream-ca PATH``: a readable file holding at least one PEM certificate."""
    from cryptography import x509  # noqa: PLC0415 -- keeps `--help` fast

    path = Path(value)
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{value}: cannot read it: {exc.strerror}") from None
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError:
        # OpenSSL's own "TRUSTED CERTIFICATE" blocks (a distribution's trust bundle) are
        # certificates too: mitmproxy and Python's ssl load them, cryptography does not.
        if b"-----BEGIN TRUSTED CERTIFICATE-----" not in pem:
            raise argparse.ArgumentTypeError(
                f"{value}: no PEM certificate in it (give the CA certificate of the origin)"
            ) from None
    return path


def remote_url(value: str) -> RemoteURL:
    """``--remote s3://BUCKET/PREFIX``."""
    try:
        return parse_remote_url(value)
    except RemoteURLError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--remote: ")) from None


def duration(text: str) -> float:
    """``3600``, ``90s``, ``30m``, ``2h``, ``7d`` → seconds."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds (3600) or a number with s, m, h or d (2h)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]
