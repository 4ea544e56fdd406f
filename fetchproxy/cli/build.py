"""``fetchproxy record -- BUILD`` and ``fetchproxy replay -- BUILD``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fetchproxy.cli.options import (
    Parser,
    UsageError,
    add_lock,
    add_log,
    add_remote,
    add_store,
    chosen_remote,
    upstream_ca,
)

HTTP2_HELP = {
    "record": "speak HTTP/2 with clients and origins that offer it (off by default: slower "
    "for large bodies, see docs/benchmarks.md)",
    "replay": "speak HTTP/2 with clients that offer it: replay then runs on mitmproxy instead "
    "of fetchproxy's own HTTP/1.1 server, which is much faster (docs/benchmarks.md)",
    "serve": "speak HTTP/2 with clients (and, recording, origins) that offer it; off by "
    "default: slower, see docs/benchmarks.md",
}
KEEP_HELP = (
    "keep the existing lock: answer what it holds from the store, record only the rest, "
    "remove nothing"
)
UPSTREAM_CA_HELP = (
    "also trust the CA certificates in this PEM file for upstream TLS, e.g. an origin's own CA "
    "(repeatable)"
)
ALLOW_HELP = (
    "reach only origins this pattern matches: host, host:port or *.domain[:port] (repeatable; "
    "adds to fetchproxy.toml's [record] allow). A pattern naming a loopback or other "
    "host-local address exactly is what lets a sandboxed build's record reach it"
)
EXACT_HELP = (
    "fail (exit 3) also when lock entries go unused: the build must use exactly the lock (for CI)"
)


def origin_pattern(value: str) -> str:
    """``--allow-origin PATTERN``: a pattern :class:`OriginPattern` takes."""
    from fetchproxy.keys.patterns import OriginPattern, OriginPatternError  # noqa: PLC0415

    try:
        OriginPattern.parse(value)
    except OriginPatternError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_proxy_options(parser: argparse.ArgumentParser, *, mode: str) -> None:
    """The options of ``record``, ``replay`` and ``serve`` (which takes both modes' options,
    each help saying which mode it is for)."""
    add_lock(parser)
    add_store(parser)
    add_remote(parser)
    add_log(parser)
    parser.add_argument("--http2", action="store_true", help=HTTP2_HELP[mode])
    if mode != "replay":
        prefix = "record: " if mode == "serve" else ""
        parser.add_argument("--keep", action="store_true", help=prefix + KEEP_HELP)
        parser.add_argument(
            "--allow-origin",
            type=origin_pattern,
            action="append",
            default=[],
            metavar="PATTERN",
            help=prefix + ALLOW_HELP,
        )
        parser.add_argument(
            "--upstream-ca",
            type=upstream_ca,
            action="append",
            default=[],
            metavar="PATH",
            help=prefix + UPSTREAM_CA_HELP,
        )
    if mode != "record":
        parser.add_argument(
            "--exact",
            action="store_true",
            help=EXACT_HELP
            if mode == "replay"
            else "replay: exit 3 at the end if requests were refused or lock entries went unused",
        )


ATTEST_HELP = (
    "when the build succeeds, write the in-toto statement of what replay served to PATH "
    "(docs/provenance.md)"
)
ATTEST_KEY_HELP = (
    "sign the statement as a DSSE envelope with this Ed25519 or ECDSA P-256 private key (PEM); "
    "an encrypted key's passphrase is read from $FETCHPROXY_ATTEST_PASSPHRASE"
)


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    add_proxy_options(parser, mode=words[0])
    if words[0] == "replay":
        parser.add_argument("--attest", type=Path, metavar="PATH", help=ATTEST_HELP)
        parser.add_argument("--attest-key", type=Path, metavar="PATH", help=ATTEST_KEY_HELP)
        parser.check = _attest_needs_a_path
    isolation = parser.add_mutually_exclusive_group()
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
    parser.add_argument(
        "--intercept",
        choices=("proxy", "transparent"),  # fetchproxy.sandbox.root.INTERCEPT_CHOICES
        default="proxy",
        help="which of the build's connections go through fetchproxy: proxy (those of clients "
        "that honour the proxy variables; the default), or transparent (every TCP connection "
        "and DNS lookup, for tools that ignore the proxy variables; the root sandbox only; "
        "docs/sandbox.md)",
    )
    parser.add_argument(
        "--writable",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="let the build write PATH and keep what it writes there (repeatable; adds to "
        "fetchproxy.toml's [sandbox] writable); everything else it writes outside its "
        "working directory is thrown away with the run",
    )
    parser.add_argument(
        "--fresh-home",
        action="store_true",
        help="give the build an empty $HOME and XDG directories, so no warm tool cache answers "
        "what a fresh CI machine would fetch (for a complete record)",
    )
    parser.add_argument(
        "build",
        nargs=argparse.REMAINDER,
        metavar="-- BUILD...",
        help="the build command and its arguments, after --",
    )


def _attest_needs_a_path(args: argparse.Namespace) -> str | None:
    if args.attest_key is not None and args.attest is None:
        return "--attest-key signs the attestation: give --attest PATH too"
    return None


def run(args: argparse.Namespace) -> int:
    from fetchproxy.lock.config import config_path_for, load_config  # noqa: PLC0415
    from fetchproxy.record.rules import KEPT_HEADERS  # noqa: PLC0415
    from fetchproxy.run.build import RunRequest, run_build  # noqa: PLC0415
    from fetchproxy.store import open_store  # noqa: PLC0415

    mode = args.words[0]
    argv = list(args.build)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError(f"`fetchproxy {mode}` needs a build: fetchproxy {mode} -- BUILD...")
    if args.no_sandbox and args.intercept == "transparent":
        raise UsageError(
            "--intercept transparent takes the sandbox's connections: it needs the root sandbox"
        )
    if args.no_sandbox and (args.writable or args.fresh_home):
        option = "--writable" if args.writable else "--fresh-home"
        raise UsageError(f"{option} shapes the sandbox's file system: it needs the sandbox")
    config = load_config(config_path_for(args.lock))
    attester = None
    if getattr(args, "attest", None) is not None:
        from fetchproxy.run.attest import Attester  # noqa: PLC0415

        attester = Attester.prepare(args.attest, args.attest_key, os.environ)
    request = RunRequest(
        mode=mode,
        argv=argv,
        lock=args.lock,
        store=open_store(args.store),
        log=args.log,
        upstream_ca=tuple(getattr(args, "upstream_ca", ())),
        sandbox="none" if args.no_sandbox else args.sandbox,
        keep=getattr(args, "keep", False),
        exact=getattr(args, "exact", False),
        http2=args.http2,
        rules=config.rules,
        allow=(*config.allow, *getattr(args, "allow_origin", ())),
        writable=(*config.writable, *args.writable),
        fresh_home=args.fresh_home,
        keep_headers=KEPT_HEADERS | frozenset(config.headers),
        attest=attester,
        intercept=args.intercept,
        remote=chosen_remote(args, config),
    )
    return run_build(request)
