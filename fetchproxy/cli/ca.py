"""``fetchproxy ca path``: the CA certificate clients must trust for HTTPS through ``serve``."""

from __future__ import annotations

import argparse

from fetchproxy.cli.options import Parser


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    """``ca path`` takes no arguments."""


def run(args: argparse.Namespace) -> int:
    from fetchproxy.ca import ensure_persistent_ca, persistent_ca_dir  # noqa: PLC0415

    print(ensure_persistent_ca(persistent_ca_dir()))
    return 0
