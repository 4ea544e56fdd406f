"""``fetchproxy demo``: the whole story on embedded defaults, with no network needed."""

from __future__ import annotations

import argparse
from pathlib import Path

from fetchproxy.cli.options import Parser


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="work (and keep the results) here, not in a temp dir",
    )


def run(args: argparse.Namespace) -> int:
    from fetchproxy.demo.story import run_demo  # noqa: PLC0415

    return run_demo(args.dir)
