"""``fetchproxy lock verify``: is every body the lock names in the store, intact, of its size,
and is every URL one replay can match?

:func:`verify_lock` checks and returns a report (nothing is changed); :func:`render_report` is
what the command prints. URLs are checked with the project's :class:`KeyRules`: an entry whose
url recording would not write (a hand edit, a secret parameter, a fragment) can never match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fetchproxy.digest import Digest
from fetchproxy.keys.rules import KeyRules
from fetchproxy.keys.url import InvalidURLError, normalize_url
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.lock.toml import toml_basic_string
from fetchproxy.store import CorruptBlobError, MissingBlobError, Store
from fetchproxy.text import counted


@dataclass(frozen=True, slots=True)
class LockVerifyReport:
    """What :func:`verify_lock` found: one line per problem, in the order met."""

    lock: str
    fetches: int
    bodies: int
    missing_or_corrupt: tuple[str, ...]
    wrong_size: tuple[str, ...]
    not_normal: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not (self.missing_or_corrupt or self.wrong_size or self.not_normal)


def verify_lock(lock: Lock, name: str, store: Store, rules: KeyRules) -> LockVerifyReport:
    """Rehash every body ``lock`` names, compare sizes, and check every url's form."""
    not_normal = normal_form_problems(lock, name, rules)
    bad: list[str] = []
    intact: set[Digest] = set()
    for digest in sorted(lock.digests()):
        try:
            store.verify(digest)
        except MissingBlobError as exc:
            bad.append(f"missing: {digest} (no file {exc.path})")
        except CorruptBlobError as exc:
            bad.append(f"corrupt: {exc.path}: {exc.problem}")
        else:
            intact.add(digest)
    wrong = [
        _wrong_size(name, fetch, actual)
        for fetch in lock.fetches
        if fetch.digest in intact and (actual := store.size_of(fetch.digest)) != fetch.size
    ]
    return LockVerifyReport(
        lock=name,
        fetches=len(lock),
        bodies=len(lock.digests()),
        missing_or_corrupt=tuple(bad),
        wrong_size=tuple(wrong),
        not_normal=tuple(not_normal),
    )


def _wrong_size(name: str, fetch: Fetch, actual: int) -> str:
    key = fetch.key
    return (
        f"{name}: {key.method} {key.url} has size = {fetch.size}, but its blob {fetch.digest} "
        f"is {actual} bytes: replay answers it 502 store-error — record it again rather than "
        "edit the lock"
    )


def render_report(report: LockVerifyReport) -> tuple[str, str]:
    """What the command prints: (stdout, stderr), each ending in a newline or empty."""
    if report.clean:
        return (
            f"fetchproxy: {report.lock}: {report.fetches} fetches, {report.bodies} bodies, "
            "all intact\n",
            "",
        )
    lines = [f"fetchproxy: {line}" for line in report.not_normal]
    lines += [f"fetchproxy: {line}" for line in report.missing_or_corrupt]
    lines += [f"fetchproxy: {line}" for line in report.wrong_size]
    found = []
    if report.missing_or_corrupt:
        found.append(
            f"{len(report.missing_or_corrupt)} of {report.bodies} bodies missing or corrupt"
        )
    if report.wrong_size:
        found.append(f"{counted(len(report.wrong_size), 'entry', 'entries')} with the wrong size")
    if report.not_normal:
        found.append(f"{counted(len(report.not_normal), 'url', 'urls')} not in normal form")
    lines.append(f"fetchproxy: {report.lock}: {'; '.join(found)}")
    if report.missing_or_corrupt:
        lines.append(
            "fetchproxy: record again to fetch missing bodies; "
            "`fetchproxy store verify --repair` first moves corrupt ones aside"
        )
    return "", "\n".join(lines) + "\n"


_FIX_URL = "edit it or record again"


def normal_form_problems(lock: Lock, path: str, rules: KeyRules) -> list[str]:
    """One message, ``PATH: fetch[N] url …``, per entry whose url recording would not write.

    Replay looks a request up by its normalized URL (the project's :class:`KeyRules`), so an
    entry whose url is not in that form can never match: a hand edit, or a lock from a
    fetchproxy that normalized differently. N counts ``lock.fetches``
    (file order, for a lock loaded sorted). A message never shows a secret query parameter's
    value, user info or a fragment. Empty when every url is in normal form.
    """
    problems = []
    for index, entry in enumerate(lock.fetches):
        problem = _url_problem(entry.key.url, rules)
        if problem is not None:
            problems.append(f"{path}: fetch[{index}] url {problem}")
    return problems


def _url_problem(url: str, rules: KeyRules) -> str | None:
    """What is wrong with lock url ``url``, or None when it is in normal form."""
    try:
        normal = rules.url(url)
    except InvalidURLError as exc:
        # exc.url is redacted (no user info, fragment or secret parameter); the reason names
        # only the scheme, host or port, or a character's code point
        return f"{exc.url} is not valid: {exc.reason} — {_FIX_URL}"
    if normal == url:
        return None
    recorded = f"fetchproxy records it as {normal}"  # normal form holds no secret
    secrets = _secret_param_names(url, normal)
    if secrets:
        what = "a secret query parameter" if len(secrets) == 1 else "secret query parameters"
        it = "it" if len(secrets) == 1 else "they"
        return (
            f"has {what} ({', '.join(secrets)}): {it} must not be in a lock — {recorded}; "
            f"{_FIX_URL}"
        )
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    if "@" in authority:
        return (
            f"has a user name or password before its host: it must not be in a lock — "
            f"{recorded}; {_FIX_URL}"
        )
    if "#" in url:
        return (
            f"has a #fragment, which no request carries: replay can never match it — "
            f"{recorded}; {_FIX_URL}"
        )
    shown = toml_basic_string(url)[1:-1]  # as the lock spells it
    return f"{shown} is not in normal form ({recorded}): replay can never match it — {_FIX_URL}"


def _secret_param_names(url: str, normal: str) -> list[str]:
    """The (normalized) names of the secret query parameters normalization removed from ``url``."""
    kept = normalize_url(url, secret_params=())
    if kept == normal:
        return []
    removed = set(_query_names(kept)) - set(_query_names(normal))
    return [name for name in dict.fromkeys(_query_names(kept)) if name in removed]


def _query_names(normal: str) -> list[str]:
    """The parameter names of normalized URL ``normal``, in order (it has no fragment)."""
    query = normal.partition("?")[2]
    return [field.partition("=")[0] for field in query.split("&") if field]
