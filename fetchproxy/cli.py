"""The ``fetchproxy`` command line: parse arguments, call the API, turn errors into exit codes.

Exit status: 0 success; 2 usage errors and bad input (every :class:`FetchproxyError`); for
``record``/``replay`` the build's own status when it failed, else 3 when replay refused anything.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from fetchproxy.cli_lock_store import (
    DEFAULT_LOCK_HELP,
    add_lock_diff_parser,
    add_store_option,
    add_store_parser,
    default_lock,
)
from fetchproxy.errors import FetchproxyError


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"fetchproxy: {level}{record.getMessage()}"


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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("fetchproxy").setLevel(logging.INFO)


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
    return host.strip("[]") or "127.0.0.1", int(port)


def _add_lock(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lock",
        type=Path,
        default=default_lock(),
        help=DEFAULT_LOCK_HELP,
    )


def _add_proxy_options(parser: argparse.ArgumentParser, *, record: bool) -> None:
    _add_lock(parser)
    add_store_option(parser)
    parser.add_argument(
        "--log", type=Path, default=None, help="JSON-lines event log (default: beside the lock)"
    )
    parser.add_argument(
        "--http2",
        action="store_true",
        help="speak HTTP/2 with clients and origins that offer it (off by default: slower "
        "for large bodies, see docs/benchmarks.md)"
        if record
        else "speak HTTP/2 with clients that offer it: replay then runs on mitmproxy instead "
        "of fetchproxy's own HTTP/1.1 server, which is much faster (docs/benchmarks.md)",
    )
    if record:
        parser.add_argument(
            "--keep",
            action="store_true",
            help="keep the existing lock: answer what it holds from the store, record only "
            "the rest, remove nothing",
        )
    else:
        parser.add_argument(
            "--exact",
            action="store_true",
            help="fail (exit 3) also when lock entries go unused: the build must use exactly "
            "the lock (for CI)",
        )
    if record:
        parser.add_argument(
            "--upstream-ca",
            type=Path,
            action="append",
            default=[],
            metavar="PATH",
            help="also trust this CA bundle for upstream TLS (repeatable)",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fetchproxy",
        description="Hermetic builds at the network boundary: record a build's fetches "
        "into a reviewable lock, replay them byte for byte.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for mode, help_text in (
        ("record", "run BUILD in the network sandbox; record every fetch into the lock"),
        ("replay", "run BUILD in the network sandbox; serve only what the lock holds"),
    ):
        sub = commands.add_parser(mode, help=help_text)
        _add_proxy_options(sub, record=mode == "record")
        isolation = sub.add_mutually_exclusive_group()
        isolation.add_argument(
            "--sandbox",
            choices=("auto", "root", "user"),  # fetchproxy.sandbox.SANDBOX_CHOICES
            default="auto",
            help="which network sandbox: root (network namespaces and a veth pair; needs root), "
            "user (an unprivileged user and network namespace with only loopback), or auto "
            "(root when possible, else user; the default)",
        )
        isolation.add_argument(
            "--no-sandbox",
            action="store_true",
            help="run BUILD with the host's network (only clients honouring proxy variables "
            "are covered)",
        )
        sub.add_argument("build", nargs=argparse.REMAINDER, metavar="-- BUILD...")

    serve = commands.add_parser(
        "serve", help="run a record or replay proxy for clients you point at it (no sandbox)"
    )
    serve.add_argument("mode", choices=("record", "replay"))
    _add_proxy_options(serve, record=True)
    serve.add_argument(
        "--exact",
        action="store_true",
        help="replay: exit 3 at the end if requests were refused or lock entries went unused",
    )
    serve.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8080; port 0 picks a free one)",
    )

    demo = commands.add_parser(
        "demo", help="the whole story on embedded defaults: record, replay, refuse, review"
    )
    demo.add_argument(
        "--dir", type=Path, default=None, help="work (and keep the results) here, not in a temp dir"
    )

    ca = commands.add_parser("ca", help="fetchproxy's certificate authority")
    ca_commands = ca.add_subparsers(dest="ca_command", required=True, metavar="COMMAND")
    ca_commands.add_parser("path", help="print the path of the CA certificate clients must trust")

    lock = commands.add_parser("lock", help="work with lock files")
    lock_commands = lock.add_subparsers(dest="lock_command", required=True, metavar="COMMAND")
    verify = lock_commands.add_parser(
        "verify", help="check that every entry's body is in the store and intact"
    )
    _add_lock(verify)
    add_store_option(verify)
    fmt = lock_commands.add_parser(
        "fmt", help="rewrite a lock in canonical form (e.g. after a merge)"
    )
    _add_lock(fmt)
    recover = lock_commands.add_parser(
        "recover", help="write the lock from the journal of an interrupted record"
    )
    _add_lock(recover)
    add_lock_diff_parser(lock_commands)
    add_store_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fetchproxy`` command; returns the exit status."""
    _setup_logging()
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except FetchproxyError as exc:
        print(f"fetchproxy: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    from fetchproxy import cli_lock_store, commands  # noqa: PLC0415 -- keeps `--help` fast

    if args.command in ("record", "replay"):
        return commands.run(args)
    if args.command == "serve":
        return commands.serve(args)
    if args.command == "store":
        return cli_lock_store.run_store(args)
    if args.command == "demo":
        from fetchproxy.demo import run_demo  # noqa: PLC0415

        return run_demo(args.dir)
    if args.command == "ca":
        return commands.ca_path()
    if args.command == "lock":
        handler = {
            "verify": commands.lock_verify,
            "fmt": commands.lock_fmt,
            "recover": commands.lock_recover,
            "diff": cli_lock_store.run_lock_diff,
            "show": cli_lock_store.run_lock_show,
        }[args.lock_command]
        return handler(args)
    raise AssertionError(f"unhandled command {args.command}")
