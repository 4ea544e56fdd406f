"""The ``fetchproxy`` command line: parse arguments, call the API, turn errors into exit codes.

Exit status: 0 success; 2 usage errors and bad input (every :class:`FetchproxyError`); for
``record``/``replay`` the build's own status when it failed, else 3 when replay refused anything.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from fetchproxy.cli.lockstore import (
    DEFAULT_LOCK_HELP,
    add_command,
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


class _Parser(argparse.ArgumentParser):
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
        print(f"fetchproxy {_version()}")
        parser.exit()


def _version() -> str:
    """The installed distribution's version."""
    from importlib import metadata  # noqa: PLC0415 -- keeps `--help` fast

    try:
        return metadata.version("fetchproxy")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
    if int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"{value!r}: the port must be from 0 to 65535 (0 picks a free one)"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def _upstream_ca(value: str) -> Path:
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


def _add_lock(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lock",
        type=Path,
        default=default_lock(),
        metavar="PATH",
        help=DEFAULT_LOCK_HELP,
    )


_HTTP2_HELP = {
    "record": "speak HTTP/2 with clients and origins that offer it (off by default: slower "
    "for large bodies, see docs/benchmarks.md)",
    "replay": "speak HTTP/2 with clients that offer it: replay then runs on mitmproxy instead "
    "of fetchproxy's own HTTP/1.1 server, which is much faster (docs/benchmarks.md)",
    "serve": "speak HTTP/2 with clients (and, recording, origins) that offer it; off by "
    "default: slower, see docs/benchmarks.md",
}
_KEEP_HELP = (
    "keep the existing lock: answer what it holds from the store, record only the rest, "
    "remove nothing"
)
_UPSTREAM_CA_HELP = (
    "also trust the CA certificates in this PEM file for upstream TLS, e.g. an origin's own CA "
    "(repeatable)"
)
_SERVE_MODE_OPTIONS = (
    ("keep", "--keep", "record"),
    ("upstream_ca", "--upstream-ca", "record"),
    ("exact", "--exact", "replay"),
)
"""``serve``'s options that belong to one mode: (dest, option, mode)."""


def _add_proxy_options(parser: argparse.ArgumentParser, *, mode: str) -> None:
    """The options of ``record``, ``replay`` and ``serve`` (which takes both modes' options,
    each help saying which mode it is for)."""
    _add_lock(parser)
    add_store_option(parser)
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        metavar="PATH",
        help="JSON-lines event log (default: beside the lock)",
    )
    parser.add_argument("--http2", action="store_true", help=_HTTP2_HELP[mode])
    if mode != "replay":
        prefix = "record: " if mode == "serve" else ""
        parser.add_argument("--keep", action="store_true", help=prefix + _KEEP_HELP)
        parser.add_argument(
            "--upstream-ca",
            type=_upstream_ca,
            action="append",
            default=[],
            metavar="PATH",
            help=prefix + _UPSTREAM_CA_HELP,
        )
    if mode != "record":
        parser.add_argument(
            "--exact",
            action="store_true",
            help="fail (exit 3) also when lock entries go unused: the build must use exactly "
            "the lock (for CI)"
            if mode == "replay"
            else "replay: exit 3 at the end if requests were refused or lock entries went unused",
        )


def _serve_mode_problem(args: argparse.Namespace) -> str | None:
    """An option of the other mode given to ``serve``, e.g. ``--keep`` to ``serve replay``."""
    for dest, option, mode in _SERVE_MODE_OPTIONS:
        if getattr(args, dest) and args.mode != mode:
            return f"{option} is for serve {mode}, not serve {args.mode}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fetchproxy",
        description="Hermetic builds at the network boundary: record a build's fetches "
        "into a reviewable lock, replay them byte for byte.",
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for mode, summary in (
        ("record", "run BUILD in the network sandbox; record every fetch into the lock"),
        ("replay", "run BUILD in the network sandbox; serve only what the lock holds"),
    ):
        sub = add_command(commands, mode, summary)
        _add_proxy_options(sub, mode=mode)
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
        sub.add_argument(
            "build",
            nargs=argparse.REMAINDER,
            metavar="-- BUILD...",
            help="the build command and its arguments, after --",
        )

    serve = add_command(
        commands, "serve", "run a record or replay proxy for clients you point at it (no sandbox)"
    )
    serve.check = _serve_mode_problem
    serve.add_argument(
        "mode",
        choices=("record", "replay"),
        help="record: pass requests upstream and record every fetch into the lock; "
        "replay: answer only what the lock holds, from the store, and refuse the rest",
    )
    _add_proxy_options(serve, mode="serve")
    serve.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8080; port 0 picks a free one)",
    )

    demo = add_command(
        commands, "demo", "the whole story on embedded defaults: record, replay, refuse, review"
    )
    demo.add_argument(
        "--dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="work (and keep the results) here, not in a temp dir",
    )

    ca = add_command(
        commands, "ca", "the CA whose certificate clients must trust for HTTPS through the proxy"
    )
    ca_commands = ca.add_subparsers(dest="ca_command", required=True, metavar="COMMAND")
    add_command(ca_commands, "path", "print the path of the CA certificate clients must trust")

    lock = add_command(commands, "lock", "work with lock files")
    lock_commands = lock.add_subparsers(dest="lock_command", required=True, metavar="COMMAND")
    verify = add_command(
        lock_commands, "verify", "check that every entry's body is in the store and intact"
    )
    _add_lock(verify)
    add_store_option(verify)
    fmt = add_command(lock_commands, "fmt", "rewrite a lock in canonical form (e.g. after a merge)")
    _add_lock(fmt)
    recover = add_command(
        lock_commands, "recover", "write the lock from the journal of an interrupted record"
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
    from fetchproxy.cli import commands  # noqa: PLC0415 -- keeps `--help` fast
    from fetchproxy.cli import lockstore as cli_lock_store  # noqa: PLC0415

    if args.command in ("record", "replay"):
        return commands.run(args)
    if args.command == "serve":
        return commands.serve(args)
    if args.command == "store":
        return cli_lock_store.run_store(args)
    if args.command == "demo":
        from fetchproxy.demo.story import run_demo  # noqa: PLC0415

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
