"""The project's ``fetchproxy.toml``: settings that must be the same wherever a lock is used.

Record and replay of one lock must key requests alike, reach the same origins and give the
build the same sandbox, so those settings live in a file committed beside the lock, not in
command-line flags that one CI job could forget::

    [fetchproxy]
    # query parameters removed from every key, in addition to the built-in list
    secret-params = ["session", "X-Signed"]
    # where Accept selects nothing, so it is not part of the key (host[:port][/path])
    accept-selects-nothing = ["index.crates.io", "*.example.net/simple/"]

    [record]
    # the origins record may reach (host or host:port, "*." for subdomains); none: any origin
    # except the host's own and link-local addresses
    allow = ["files.example.org", "*.pythonhosted.org", "127.0.0.2:18443"]

    [sandbox]
    # paths the build may write that outlive the run (relative to this file, or ~/...)
    writable = ["~/.cache/pip"]

    [store]
    # the remote store the lock's blobs travel through (docs/remote-store.md); credentials
    # come from the AWS configuration, never from here
    remote = "s3://my-bucket/fetchproxy"

The file is looked up beside the lock. Unknown tables and keys are refused with the file and
line, so a typo cannot silently leave a secret in a lock or an origin open. Every table, key
and type is in :data:`SETTINGS`, the one list the loader and the docs go by.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.patterns import OriginPattern, OriginPatternError, URLPattern, URLPatternError
from fetchproxy.keys.rules import KeyRules
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS
from fetchproxy.lock.model import NEVER_KEPT
from fetchproxy.store.remote_url import RemoteURL, RemoteURLError, parse_remote_url

_HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")

CONFIG_NAME = "fetchproxy.toml"


class ConfigError(FetchproxyError, ValueError):
    """A ``fetchproxy.toml`` that cannot be used."""


@dataclass(frozen=True, slots=True)
class Setting:
    table: str
    key: str
    example: str
    """What a good value looks like, for the message when one is not."""
    many: bool = True
    """A list of non-empty strings (else one non-empty string)."""


SETTINGS = (
    Setting("fetchproxy", "secret-params", '["session", "X-Signed"]'),
    Setting("fetchproxy", "accept-selects-nothing", '["index.crates.io", "*.example.net/simple/"]'),
    Setting("record", "allow", '["files.example.org", "*.example.net:8443"]'),
    Setting("record", "headers", '["etag", "last-modified"]'),
    Setting("sandbox", "writable", '["~/.cache/pip", "build-cache"]'),
    Setting("store", "remote", '"s3://my-bucket/fetchproxy"', many=False),
)
"""Every setting, in table ``table``: a list of non-empty strings, or one (``many=False``)."""
_TABLES = tuple(dict.fromkeys(s.table for s in SETTINGS))


@dataclass(frozen=True, slots=True)
class Config:
    secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS
    """The built-in secret parameters plus the project's."""
    accept_selects_nothing: tuple[URLPattern, ...] = ()
    """``[fetchproxy] accept-selects-nothing``: where ``Accept`` is not part of the key."""
    allow: tuple[str, ...] = ()
    """``[record] allow``: the origin patterns record may reach (each checked when read)."""
    headers: tuple[str, ...] = ()
    """``[record] headers``: response headers to keep beyond the built-in ones (lowercase)."""
    writable: tuple[Path, ...] = ()
    """``[sandbox] writable``: absolute paths the build may write that outlive the run."""
    remote: RemoteURL | None = None
    """``[store] remote``: the remote store the lock's blobs travel through."""
    path: Path | None = None

    @property
    def rules(self) -> KeyRules:
        """How this project's requests become keys."""
        return KeyRules(
            secret_params=self.secret_params, accept_selects_nothing=self.accept_selects_nothing
        )


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
    line_of = _lines(text)
    for name in data:
        if name not in _TABLES:
            raise ConfigError(
                f"{path}:{line_of(None, name)}: unknown table or key {name!r} — settings go in "
                f"the tables {', '.join(f'[{t}]' for t in _TABLES)}"
            )
    values: dict[str, tuple[str, ...]] = {}
    for table_name, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"{path}:{line_of(None, table_name)}: `{table_name}` must be a table "
                f"([{table_name}])"
            )
        known = [s for s in SETTINGS if s.table == table_name]
        for key, value in table.items():
            setting = next((s for s in known if s.key == key), None)
            if setting is None:
                raise ConfigError(
                    f"{path}:{line_of(table_name, key)}: {table_name}.{key}: unknown setting — "
                    f"the settings of [{table_name}] are {', '.join(s.key for s in known)}"
                )
            if setting.many:
                good = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
                strings = value
            else:
                good = isinstance(value, str) and bool(value)
                strings = [value]
            if not good:
                kind = "a list of non-empty strings" if setting.many else "a non-empty string"
                raise ConfigError(
                    f"{path}:{line_of(table_name, key)}: {table_name}.{key}: must be {kind}, "
                    f"e.g. {setting.example}"
                )
            values[f"{table_name}.{key}"] = tuple(strings)
    base = path.parent
    remote = None
    if "store.remote" in values:
        where = f"{path}:{line_of('store', 'remote')}: store.remote"
        try:
            remote = parse_remote_url(values["store.remote"][0], source=where)
        except RemoteURLError as exc:
            raise ConfigError(str(exc)) from None
    return Config(
        secret_params=DEFAULT_SECRET_PARAMS | frozenset(values.get("fetchproxy.secret-params", ())),
        accept_selects_nothing=_patterns(
            values.get("fetchproxy.accept-selects-nothing", ()), path, line_of
        ),
        allow=_origins(values.get("record.allow", ()), path, line_of),
        headers=_headers(values.get("record.headers", ()), path, line_of),
        writable=tuple(_path(base, p) for p in values.get("sandbox.writable", ())),
        remote=remote,
        path=path,
    )


def _headers(
    names: tuple[str, ...], path: Path, line_of: Callable[[str | None, str], int]
) -> tuple[str, ...]:
    """``[record] headers``: header names, none a secret or volatile one."""
    lowered = tuple(name.lower() for name in names)
    for name in lowered:
        if not _HEADER_NAME_RE.fullmatch(name) or name in NEVER_KEPT:
            why = (
                "is not a header name"
                if name not in NEVER_KEPT
                else ("is never kept: a secret, volatile, or made by replay itself")
            )
            raise ConfigError(
                f"{path}:{line_of('record', 'headers')}: record.headers: {name!r} {why}"
            )
    return lowered


def _origins(
    texts: tuple[str, ...], path: Path, line_of: Callable[[str | None, str], int]
) -> tuple[str, ...]:
    """``[record] allow``: origin patterns, each checked (kept as written: record parses them
    with the ``--allow-origin`` ones)."""
    for text in texts:
        try:
            OriginPattern.parse(text)
        except OriginPatternError as exc:
            raise ConfigError(f"{path}:{line_of('record', 'allow')}: record.allow: {exc}") from None
    return texts


def _patterns(
    texts: tuple[str, ...], path: Path, line_of: Callable[[str | None, str], int]
) -> tuple[URLPattern, ...]:
    """``[fetchproxy] accept-selects-nothing``: URL patterns, each checked."""
    patterns = []
    for text in texts:
        try:
            patterns.append(URLPattern.parse(text))
        except URLPatternError as exc:
            raise ConfigError(
                f"{path}:{line_of('fetchproxy', 'accept-selects-nothing')}: "
                f"fetchproxy.accept-selects-nothing: {exc}"
            ) from None
    return tuple(patterns)


def _path(base: Path, value: str) -> Path:
    """A path setting: ``~/…`` in the user's home, relative ones beside the config file."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _lines(text: str) -> Callable[[str | None, str], int]:
    """``line_of(table, key)``: the line of ``key`` (in ``[table]``, or at the top level)."""
    lines = text.splitlines()

    def line_of(table: str | None, key: str) -> int:
        current: str | None = None
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if stripped.startswith("["):
                current = stripped.strip("[]").strip().strip('"')
                if table is None and current == key:
                    return number
                continue
            name = stripped.partition("=")[0].strip().strip('"')
            if name == key and current == table:
                return number
        return 1

    return line_of
