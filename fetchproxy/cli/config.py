"""``fetchproxy config add SETTING VALUE...``: add to the project's ``fetchproxy.toml``."""

from __future__ import annotations

import argparse

from fetchproxy.cli.options import Parser, UsageError, add_lock


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    from fetchproxy.lock.config import SETTINGS  # noqa: PLC0415

    names = ", ".join(f"{s.table}.{s.key}" for s in SETTINGS)
    parser.add_argument("setting", metavar="SETTING", help=f"one of: {names}")
    parser.add_argument("values", nargs="+", metavar="VALUE", help="values to add to its list")
    add_lock(parser)
    parser.epilog = (
        "The file is fetchproxy.toml beside the lock. Its comments and layout are kept; a value "
        "already there is not added twice; the result is checked as every run checks it."
    )


def run(args: argparse.Namespace) -> int:
    from fetchproxy.keys.patterns import OriginPattern, OriginPatternError  # noqa: PLC0415
    from fetchproxy.lock.config import ConfigError, config_path_for  # noqa: PLC0415
    from fetchproxy.lock.configedit import add_values, setting_named  # noqa: PLC0415

    path = config_path_for(args.lock)
    try:
        setting = setting_named(args.setting)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if (setting.table, setting.key) == ("record", "allow"):
        for value in args.values:
            try:
                OriginPattern.parse(value)
            except OriginPatternError as exc:
                raise UsageError(f"record.allow: {exc}") from None
    added = add_values(path, setting, args.values)
    name = f"{setting.table}.{setting.key}"
    if added:
        print(f"{path}: {name} += {', '.join(added)}")
    else:
        print(f"{path}: {name} already has {', '.join(args.values)}")
    return 0
