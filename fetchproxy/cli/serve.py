"""``fetchproxy serve {record|replay}``: a proxy for clients you point at it, without a sandbox."""

from __future__ import annotations

import argparse

from fetchproxy.cli.build import add_proxy_options
from fetchproxy.cli.options import Parser, chosen_remote, listen_address

_MODE_OPTIONS = (
    ("keep", "--keep", "record"),
    ("allow_origin", "--allow-origin", "record"),
    ("upstream_ca", "--upstream-ca", "record"),
    ("exact", "--exact", "replay"),
)
"""``serve``'s options that belong to one mode: (dest, option, mode)."""


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    parser.check = _mode_problem
    parser.add_argument(
        "mode",
        choices=("record", "replay"),
        help="record: pass requests upstream and record every fetch into the lock; "
        "replay: answer only what the lock holds, from the store, and refuse the rest",
    )
    add_proxy_options(parser, mode="serve")
    parser.add_argument(
        "--listen",
        type=listen_address,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8080; port 0 picks a free one)",
    )


def _mode_problem(args: argparse.Namespace) -> str | None:
    """An option of the other mode given to ``serve``, e.g. ``--keep`` to ``serve replay``."""
    for dest, option, mode in _MODE_OPTIONS:
        if getattr(args, dest) and args.mode != mode:
            return f"{option} is for serve {mode}, not serve {args.mode}"
    return None


def run(args: argparse.Namespace) -> int:
    from fetchproxy.ca import ensure_persistent_ca, persistent_ca_dir  # noqa: PLC0415
    from fetchproxy.lock.config import config_path_for, load_config  # noqa: PLC0415
    from fetchproxy.record.origins import OriginPolicy  # noqa: PLC0415
    from fetchproxy.record.rules import KEPT_HEADERS  # noqa: PLC0415
    from fetchproxy.run.serve import serve  # noqa: PLC0415
    from fetchproxy.run.settings import ProxySettings  # noqa: PLC0415
    from fetchproxy.store import open_store  # noqa: PLC0415

    config = load_config(config_path_for(args.lock))
    confdir = persistent_ca_dir()
    ensure_persistent_ca(confdir)
    host, port = args.listen
    settings = ProxySettings(
        mode=args.mode,
        lock=args.lock,
        store=open_store(args.store),
        confdir=confdir,
        listen_host=host,
        listen_port=port,
        log=args.log,
        upstream_ca=tuple(args.upstream_ca),
        keep=args.keep,
        exact=args.exact,
        http2=args.http2,
        rules=config.rules,
        origins=OriginPolicy.of((*config.allow, *args.allow_origin), guard_host=False),
        keep_headers=KEPT_HEADERS | frozenset(config.headers),
        remote=chosen_remote(args, config),
    )
    return serve(settings)
