"""Adding values to a project's ``fetchproxy.toml`` without disturbing what people wrote in it.

``fetchproxy.toml`` is written by people: its comments, order and spacing are theirs. This is
the one place fetchproxy changes it (``fetchproxy config add``), through tomlkit, which keeps
every comment and every byte it was not asked to change. The result is checked with the same
loader every run uses (:func:`fetchproxy.lock.config.parse_config`) before it replaces the file
atomically, so an edit can never leave a file that record or replay would refuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import tomlkit
import tomlkit.exceptions
from tomlkit.items import Array, Table

from fetchproxy.files import write_atomic, write_error
from fetchproxy.lock.config import SETTINGS, ConfigError, Setting, parse_config


def setting_named(name: str) -> Setting:
    """The setting ``TABLE.KEY`` (``record.allow``); ``ConfigError`` listing them otherwise."""
    for setting in SETTINGS:
        if f"{setting.table}.{setting.key}" == name:
            return setting
    known = ", ".join(f"{s.table}.{s.key}" for s in SETTINGS)
    raise ConfigError(f"{name!r} is not a setting of fetchproxy.toml — the settings are {known}")


def add_values(path: Path, setting: Setting, values: Sequence[str]) -> list[str]:
    """Add ``values`` to the list ``setting`` in ``path`` (made if absent); the ones that were
    not there already, in the order given. Nothing is written when all were there."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the project config: {exc}") from None
    parse_config(text, path=path)  # refuse to edit a file every run would refuse
    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:  # pragma: no cover - parse_config refused it
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    table = document.get(setting.table)
    if table is None:
        table = tomlkit.table()
        document.append(setting.table, table)
    if not isinstance(table, Table):  # pragma: no cover - parse_config refused it too
        raise ConfigError(f"{path}: `{setting.table}` must be a table ([{setting.table}])")
    if not setting.many:
        return _set_one(path, document, table, setting, values)
    array = table.get(setting.key)
    if array is None:
        array = tomlkit.array()
        table.append(setting.key, array)
    assert isinstance(array, Array), "parse_config allows only lists of strings"
    present = {str(v) for v in array}
    added = [v for v in dict.fromkeys(values) if v not in present]
    if not added:
        return []
    for value in added:
        array.append(value)
    if len(array) > 1 and "\n" not in array.as_string():
        array.multiline(len(array) > 3)
    _write(path, document)
    return added


def _set_one(
    path: Path,
    document: tomlkit.TOMLDocument,
    table: Table,
    setting: Setting,
    values: Sequence[str],
) -> list[str]:
    """A setting of one value (``store.remote``): set when absent; never replaced silently."""
    name = f"{setting.table}.{setting.key}"
    if len(set(values)) != 1:
        raise ConfigError(f"{name} holds one value, not a list: give one")
    (value,) = set(values)
    current = table.get(setting.key)
    if current is not None:
        if str(current) == value:
            return []
        raise ConfigError(
            f"{path}: {name} is already {str(current)!r}; change it there by hand to replace it"
        )
    table.append(setting.key, value)
    _write(path, document)
    return [value]


def _write(path: Path, document: tomlkit.TOMLDocument) -> None:
    new_text = tomlkit.dumps(document)
    if not new_text.endswith("\n"):
        new_text += "\n"
    parse_config(new_text, path=path)  # a value the loader refuses is never written
    try:
        write_atomic(path, new_text.encode("utf-8"))
    except OSError as exc:
        raise write_error(path, exc, "check the directory's permissions") from None
