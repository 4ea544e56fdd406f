"""The project's ``fetchproxy.toml``: settings that must be the same wherever a lock is used.

Record and replay of one lock must key requests alike, so settings that change keys live in a
file committed beside the lock, not in command-line flags that one CI job could forget::

    [fetchproxy]
    # query parameters removed from every key, in addition to the built-in list
    secret-params = ["session", "X-Signed"]

The file is looked up beside the lock. Unknown keys are refused with the file and line, so a typo
cannot silently leave a secret in a lock.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.rules import KeyRules
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS

CONFIG_NAME = "fetchproxy.toml"
_KNOWN = ("secret-params",)


class ConfigError(FetchproxyError, ValueError):
    """A ``fetchproxy.toml`` that cannot be used."""


@dataclass(frozen=True, slots=True)
class Config:
    secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS
    """The built-in secret parameters plus the project's."""
    path: Path | None = None

    @property
    def rules(self) -> KeyRules:
        """How this project's requests become keys."""
        return KeyRules(secret_params=self.secret_params)


def config_path_for(lock: Path) -> Path:
    """``fetchproxy.toml`` in the lock's directory."""
    return lock.parent / CONFIG_NAME


def load_config(path: Path) -> Config:
    """The settings in ``path``; the defaults when there is no such file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no such file, or no such directory
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the project config: {exc}") from None
    return parse_config(text, path=path)


def parse_config(text: str, *, path: Path) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown_tables = sorted(set(data) - {"fetchproxy"})
    if unknown_tables:
        raise ConfigError(
            f"{path}:{_line_of(text, unknown_tables[0])}: unknown table or key "
            f"{unknown_tables[0]!r} — settings go in a [fetchproxy] table"
        )
    table = data.get("fetchproxy", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: `fetchproxy` must be a table ([fetchproxy])")
    for key in table:
        if key not in _KNOWN:
            raise ConfigError(
                f"{path}:{_line_of(text, key)}: fetchproxy.{key}: unknown setting — "
                f"the settings are {', '.join(_KNOWN)}"
            )
    extra = table.get("secret-params", [])
    if not isinstance(extra, list) or not all(isinstance(p, str) and p for p in extra):
        raise ConfigError(
            f"{path}:{_line_of(text, 'secret-params')}: fetchproxy.secret-params: must be a "
            'list of parameter names, e.g. ["session", "X-Signed"]'
        )
    return Config(secret_params=DEFAULT_SECRET_PARAMS | frozenset(extra), path=path)


def _line_of(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip().strip("[]").strip()
        if stripped.startswith((key, f'"{key}"')):
            return number
    return 1
