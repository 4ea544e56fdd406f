"""The lock model: which fetches a build may make and what each one answered.

Pure values, no I/O. A :class:`Lock` is a sorted tuple of :class:`Fetch` entries, one per
:class:`~fetchproxy.keys.request.RequestKey`; its text form lives in :mod:`fetchproxy.lock.file`.
The field list below *is* the format: the order of ``FIELDS`` is the order of keys inside each
``[[fetch]]`` table, and ``docs/lock-format.md`` describes each one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from fetchproxy.digest import Digest, parse_digest
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import ANY_ACCEPT, RequestKey, SortKey
from fetchproxy.lock.toml import toml_spelling

VERSION: Final = 1
"""The lock format version this fetchproxy reads and writes."""
REVISION: Final = 3
"""The newest revision of version 1 this fetchproxy reads: revisions add optional fields, and a
lock names the lowest one that holds what it uses (docs/lock-format.md, "Changes")."""
HEADERS_REVISION: Final = 2
"""The revision that brought ``[fetch.headers]``."""
ANY_ACCEPT_REVISION: Final = 3
"""The revision that brought ``accept = "*"`` (keyed where Accept selects nothing) and the
``redacted`` field (a token answer stored with its credentials replaced)."""
REDACTIONS: Final = ("token",)
"""What a ``redacted`` field may say was replaced in the stored body (fetchproxy.record.tokens)."""
MIN_STATUS: Final = 200
MAX_STATUS: Final = 499
"""The statuses record locks: final answers below 500 (fetchproxy.record.rules.is_recordable)."""
MAX_SIZE: Final = (1 << 63) - 1
"""The largest size a lock can hold: TOML integers are 64-bit."""

LockValue = str | int | dict[str, str]


class LockFieldError(FetchproxyError, ValueError):
    """One field of one entry is wrong; :mod:`fetchproxy.lockfile` adds the file and line."""

    def __init__(self, index: int | None, field_name: str | None, message: str) -> None:
        self.index = index
        self.field_name = field_name
        self.message = message
        super().__init__(f"{self.where}: {message}" if self.where else message)

    @property
    def where(self) -> str:
        """``fetch[N].FIELD``, ``fetch[N]`` or the empty string."""
        if self.index is None:
            return self.field_name or ""
        suffix = f".{self.field_name}" if self.field_name else ""
        return f"fetch[{self.index}]{suffix}"


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a ``[[fetch]]`` table: its name in the lock, where its value lives in the model
    (an attribute of the entry's :class:`RequestKey`, or of the :class:`Fetch` itself), its type."""

    name: str
    attr: str
    kind: type  # str or int
    required: bool
    in_key: bool

    def value(self, entry: Fetch) -> LockValue | None:
        """This field's value in ``entry`` (None when absent)."""
        if self.kind is dict:
            return dict(entry.headers) or None
        value: LockValue | None = getattr(entry.key if self.in_key else entry, self.attr)
        return value


def _key(name: str, *, required: bool = False) -> Field:
    return Field(name, name.replace("-", "_"), str, required, in_key=True)


def _answer(name: str, kind: type = str, *, required: bool = False) -> Field:
    return Field(name, name.replace("-", "_"), kind, required, in_key=False)


FIELDS: Final = (
    _key("method", required=True),
    _key("url", required=True),
    _key("accept"),
    _key("git-protocol"),
    _key("body-digest"),
    _answer("status", int, required=True),
    _answer("location"),
    _answer("digest", required=True),
    _answer("size", int, required=True),
    _answer("redacted"),
    _answer("content-type"),
    _answer("content-encoding"),
    _answer("content-disposition"),
    _answer("content-length", int),
    _answer("headers", dict),
)
"""Every field of a ``[[fetch]]`` table, in the order they are written: the one table the
lock's writer, its readers, the journal, the event log and the diff all go by."""

KEY_FIELDS: Final = tuple(f for f in FIELDS if f.in_key)
"""The fields that make up an entry's key, in order."""
FIELD_NAMES: Final = frozenset(f.name for f in FIELDS)

_METHOD_RE = re.compile(r"[A-Z][A-Z0-9!#$%&'*+.^_`|~-]*")
_URL_UNSAFE_RE = re.compile(r"[\x00-\x20\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LINE_BREAK_RE = re.compile(r"[\r\n\x00]")
_AUTHORITY_RE = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:)?//([^/?#]*)")
RESPONSE_HEADERS: Final = ("content-type", "content-encoding", "content-disposition", "location")
"""The response headers a lock keeps and replay sends back, in that order (the rest are volatile
or derived)."""
_HEADER_FIELDS: Final = tuple((name, name.replace("-", "_")) for name in RESPONSE_HEADERS)
"""``(field name, Fetch attribute)`` of each of :data:`RESPONSE_HEADERS`."""


def key_table(key: RequestKey) -> dict[str, str]:
    """A key as lock fields (``method``, ``url``, …), leaving out what it does not have: how
    the journal, the event log and JSON output spell a key."""
    table: dict[str, str] = {}
    for f in KEY_FIELDS:
        value = getattr(key, f.attr)
        if value is not None:
            table[f.name] = value
    return table


@dataclass(frozen=True, kw_only=True, slots=True)
class Fetch:
    """One recorded fetch: the request's key, and the answer replay gives back."""

    key: RequestKey
    status: int
    location: str | None = None
    digest: Digest
    size: int
    redacted: str | None = None
    """``token``: the body is the origin's token answer with its credentials replaced
    (:mod:`fetchproxy.record.tokens`); the digest is of the bytes stored, not of those sent."""
    content_type: str | None = None
    content_encoding: str | None = None
    content_disposition: str | None = None
    content_length: int | None = None
    """The recorded ``content-length`` of a bodiless answer (HEAD); ``size`` is the blob's."""
    headers: tuple[tuple[str, str], ...] = ()
    """The other response headers kept (``[fetch.headers]``): lowercase names, sorted."""

    def response_headers(self) -> list[tuple[str, str]]:
        """The recorded headers replay sends back: :data:`RESPONSE_HEADERS`, then the rest."""
        first = [
            (name, value)
            for name, attr in _HEADER_FIELDS
            if (value := getattr(self, attr)) is not None
        ]
        return first + list(self.headers)

    def sort_key(self) -> SortKey:
        """The lock's total order (that of :class:`RequestKey`)."""
        return self.key.sort_key()

    def to_dict(self) -> dict[str, LockValue]:
        """The TOML table, keys in format order, absent optional fields left out."""
        table: dict[str, LockValue] = {}
        for f in FIELDS:
            value = f.value(self)
            if value is not None:
                table[f.name] = value
        return table

    @classmethod
    def from_dict(cls, table: Mapping[str, object], *, index: int | None = None) -> Fetch:
        """Validate one ``[[fetch]]`` table; raise :class:`LockFieldError` naming the field."""
        for name in table:
            if name not in FIELD_NAMES:
                raise LockFieldError(
                    index,
                    name,
                    "unknown field — the fields of a fetch are "
                    f"{', '.join(f.name for f in FIELDS)}",
                )
        values: dict[str, object] = {}
        for f in FIELDS:
            value = table.get(f.name)
            if value is None:
                if f.required:
                    raise LockFieldError(index, f.name, "missing — every fetch needs this field")
                continue
            # bool is an int subclass; TOML true/false is never a valid value here
            if type(value) is not f.kind:
                kind = {str: "a string", int: "an integer", dict: "a table"}[f.kind]
                raise LockFieldError(index, f.name, f"{toml_spelling(value)} is not {kind}")
            values[f.name] = value
        try:
            return _checked(values)
        except _BadValueError as bad:
            raise LockFieldError(index, bad.field_name, bad.message) from None


class _BadValueError(Exception):
    def __init__(self, field_name: str, message: str) -> None:
        self.field_name = field_name
        self.message = message


def _check_numbers(values: dict[str, object]) -> None:
    status = values["status"]
    assert isinstance(status, int)
    if not MIN_STATUS <= status <= MAX_STATUS:
        hint = (
            " (5xx answers are passed to the client but never locked)"
            if status >= 500
            else " (1xx answers are not final: none is ever locked)"
            if 100 <= status < 200
            else ""
        )
        raise _BadValueError(
            "status", f"{status} is not a recordable HTTP status ({MIN_STATUS}-{MAX_STATUS}){hint}"
        )
    for name in ("size", "content-length"):
        number = values.get(name)
        if isinstance(number, int) and not 0 <= number <= MAX_SIZE:
            what = "negative" if number < 0 else f"over {MAX_SIZE} (no file is that large)"
            raise _BadValueError(name, f"{number} is {what}")


def _checked(values: dict[str, object]) -> Fetch:
    """Build a Fetch from type-checked values (by field name), checking what types cannot say."""
    method = values["method"]
    assert isinstance(method, str)
    if not _METHOD_RE.fullmatch(method):
        raise _BadValueError("method", f"{toml_spelling(method)} is not an uppercase HTTP method")
    url = values["url"]
    assert isinstance(url, str)
    if not url.startswith(("http://", "https://")):
        raise _BadValueError("url", f"{toml_spelling(url)} is not an http:// or https:// URL")
    if _URL_UNSAFE_RE.search(url):
        raise _BadValueError(
            "url",
            f"{toml_spelling(url)} has a space or control character, which no recorded URL "
            "holds (recording percent-encodes them)",
        )
    for name in ("digest", "body-digest"):
        raw = values.get(name)
        if raw is not None:
            assert isinstance(raw, str)
            try:
                values[name] = parse_digest(raw)
            except ValueError as exc:
                raise _BadValueError(name, str(exc)) from None
    _check_numbers(values)
    for name in RESPONSE_HEADERS:
        text = values.get(name)
        if isinstance(text, str) and _LINE_BREAK_RE.search(text):
            # replayed as a header: a line break would add headers of its own
            raise _BadValueError(
                name,
                f"{toml_spelling(text)} has a line break or NUL in it, which no header value "
                "can hold",
            )
    redacted = values.get("redacted")
    if redacted is not None and redacted not in REDACTIONS:
        raise _BadValueError(
            "redacted",
            f"{toml_spelling(redacted)} is not a redaction fetchproxy makes "
            f"({', '.join(REDACTIONS)})",
        )
    location = values.get("location")
    if isinstance(location, str) and (secret := location_secret(location)) is not None:
        # not the value: what is wrong with it may be a credential
        raise _BadValueError(
            "location",
            f"has {secret}, which no lock holds — recording removes it, normalized or not; "
            "re-record this fetch",
        )
    headers = values.get("headers")
    if headers is not None:
        assert isinstance(headers, dict)
        values["headers"] = _checked_headers(headers)
    try:
        key = RequestKey(**{f.attr: values.get(f.name) for f in KEY_FIELDS})  # type: ignore[arg-type]
    except ValueError:  # an empty accept, git-protocol or body-digest
        empty = next(f.name for f in KEY_FIELDS if values.get(f.name) == "")
        raise _BadValueError(empty, "is empty — leave the field out instead") from None
    answer = {f.attr: values[f.name] for f in FIELDS if not f.in_key and f.name in values}
    return Fetch(key=key, **answer)  # type: ignore[arg-type]


def location_secret(location: str) -> str | None:
    """The secret part ``location`` has (``"userinfo"``, ``"a fragment"``), or None.

    A redirect's user info (``user:password@``) and its fragment (OAuth's implicit flow puts
    ``#access_token=…`` there) never reach a lock, normalized or not."""
    authority = _AUTHORITY_RE.match(location)
    if authority is not None and "@" in authority[1]:
        return "userinfo"
    if "#" in location:
        return "a fragment"
    return None


NEVER_KEPT: Final = frozenset(
    {
        *("authorization", "cookie", "set-cookie", "proxy-authorization", "proxy-authenticate"),
        *("date", "age", "expires", "via", "server", "connection", "keep-alive"),
        *("transfer-encoding", "content-length", "content-range", "trailer", "upgrade", "te"),
        *("alt-svc", "x-request-id", "x-amz-request-id", "x-amz-id-2", "cf-ray", "x-cache"),
    }
)
"""Response headers no lock holds: secrets, volatile ones (they change on every fetch and would
make every re-record a change), and framing that replay makes itself."""
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
_HEADER_VALUE_UNSAFE_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")
"""What a kept header value cannot hold: controls (but tab), DEL, and raw bytes that are not
UTF-8 (recording does not keep such a value, docs/lock-format.md)."""


def checked_headers(table: Mapping[object, object]) -> tuple[tuple[str, str], ...]:
    """A ``[fetch.headers]`` table, validated: ``LockFieldError`` naming the header."""
    try:
        return _checked_headers(table)
    except _BadValueError as bad:
        raise LockFieldError(None, bad.field_name, bad.message) from None


def _checked_headers(table: Mapping[object, object]) -> tuple[tuple[str, str], ...]:
    checked: list[tuple[str, str]] = []
    for name, value in sorted(table.items(), key=lambda item: str(item[0])):
        shown = f"headers.{name}"
        if not isinstance(name, str) or not _HEADER_NAME_RE.fullmatch(name):
            raise _BadValueError(shown, "is not a lowercase header name")
        if name in RESPONSE_HEADERS:
            raise _BadValueError(shown, f"goes in the fetch's own `{name}` field")
        if name in NEVER_KEPT:
            raise _BadValueError(shown, "is a header no lock holds (a secret, or volatile)")
        if not isinstance(value, str):
            raise _BadValueError(shown, f"{toml_spelling(value)} is not a string")
        if _HEADER_VALUE_UNSAFE_RE.search(value):
            raise _BadValueError(
                shown, f"{toml_spelling(value)} has a control character, which no kept header holds"
            )
        checked.append((name, value))
    return tuple(checked)


class DuplicateFetchError(FetchproxyError, ValueError):
    """Two entries share one key."""

    def __init__(self, first: int, second: int, key: RequestKey) -> None:
        self.first = first
        self.second = second
        self.key = key
        super().__init__(
            f"fetch[{second}]: the same request as fetch[{first}] ({key.method} {key.url}) — "
            "a lock holds one answer per request; keep one of the two, or re-record"
        )


class UnsortedFetchError(FetchproxyError, ValueError):
    """An entry stands before one it must follow."""

    def __init__(self, index: int, previous: Fetch, current: Fetch) -> None:
        self.index = index
        before, after = current.key, previous.key
        super().__init__(
            f"fetch[{index}]: out of order ({before.method} {before.url} must come before "
            f"{after.method} {after.url}) — run `fetchproxy lock fmt` to sort the file"
        )


@dataclass(frozen=True, slots=True)
class Lock:
    """A lock: version 1, one :class:`Fetch` per key, sorted by key.

    Build one with :meth:`from_fetches` (any order, duplicates refused) or :meth:`from_sorted`
    (checks the order, as loading a file does).
    """

    fetches: tuple[Fetch, ...] = ()
    _index: dict[SortKey, Fetch] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_fetches(cls, fetches: Iterable[Fetch]) -> Lock:
        """Sort ``fetches`` into a lock; two entries with one key raise DuplicateFetchError."""
        entries = tuple(fetches)
        index = _index_of(entries)
        return cls(tuple(sorted(entries, key=Fetch.sort_key)), index)

    @classmethod
    def from_sorted(cls, fetches: Iterable[Fetch]) -> Lock:
        """A lock from entries already in order; raise UnsortedFetchError otherwise."""
        entries = tuple(fetches)
        index = _index_of(entries)
        keys = list(index)  # dicts keep insertion order: the entries' keys, in order
        for i in range(1, len(keys)):
            if keys[i] < keys[i - 1]:
                raise UnsortedFetchError(i, entries[i - 1], entries[i])
        return cls(entries, index)

    def __len__(self) -> int:
        return len(self.fetches)

    def updated(self, fetches: Iterable[Fetch]) -> Lock:
        """This lock with ``fetches`` added; one with the key of an entry replaces it."""
        entries = {f.key: f for f in self.fetches}
        entries.update((f.key, f) for f in fetches)
        return Lock.from_fetches(entries.values())

    def lookup(self, key: RequestKey) -> Fetch | None:
        """The entry recorded for exactly ``key``, or None. Never a near match."""
        return self._index.get(key.sort_key())

    def digests(self) -> frozenset[Digest]:
        """Every blob the lock refers to."""
        return frozenset(f.digest for f in self.fetches)

    def total_size(self) -> int:
        """The bytes of every distinct blob the lock refers to."""
        sizes = {f.digest: f.size for f in self.fetches}
        return sum(sizes.values())


def revision_of(lock: Lock) -> int | None:
    """The lowest revision that holds what ``lock`` uses (None: the first, written as none)."""
    revision = None
    for f in lock.fetches:  # one pass: the writer asks this of every lock it renders
        if f.redacted is not None or f.key.accept == ANY_ACCEPT:
            return ANY_ACCEPT_REVISION
        if f.headers:
            revision = HEADERS_REVISION
    return revision


def _index_of(entries: tuple[Fetch, ...]) -> dict[SortKey, Fetch]:
    """Entries by key; DuplicateFetchError names the positions (in ``entries``) of a repeat."""
    index = {entry.key.sort_key(): entry for entry in entries}
    if len(index) == len(entries):  # no repeat: the usual case, in one pass
        return index
    index = {}
    positions: dict[SortKey, int] = {}
    for i, entry in enumerate(entries):
        sort_key = entry.sort_key()
        if sort_key in positions:
            raise DuplicateFetchError(positions[sort_key], i, entry.key)
        index[sort_key] = entry
        positions[sort_key] = i
    return index
