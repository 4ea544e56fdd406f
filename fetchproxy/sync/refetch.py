"""``fetchproxy store fetch``: the local store filled from the origins, checked against the lock.

The way Nix fixed-output derivations work: the lock says what each body must hash to, so
anyone may fetch it again from where it came from, and only bytes that match go into the store.

**Plan** (:func:`plan_refetch`, pure). One job per blob the store lacks: the empty blob needs no
fetch at all (HEAD, 204 and empty answers); otherwise the lock's ``GET`` entries without a
request body that name it, first to last (the next is tried when one fails). A blob no such
entry names cannot be fetched again: a request with a body (git's negotiation ``POST``), or a
method other than GET — each is listed with what to do instead. An origin the policy does not
allow (``--allow-origin``, ``[record] allow``, as ``serve record`` applies them) is not asked.

**Fetch** (:func:`refetch`). Each GET goes to the origin the entry names, with the key's
``Accept`` and ``Git-Protocol``, ``Accept-Encoding: identity`` (as record asks), and nothing
else of a build's: no cookie, no credential — the lock holds none, so a URL that needed one
fails here and says so. The answer must have the lock's status, and its body streams into the
store's writer (hashed as it arrives; cut off one byte past the lock's size), which publishes it
only if it hashes to the lock's digest. Anything else is **CONTENT DRIFT**: reported with what
came instead, never published. Jobs run in parallel (bounded), with progress.

Two kinds of entry are fetched the way a registry with token auth needs:

- An entry locked ``redacted = "token"`` (a token answer, :mod:`fetchproxy.record.tokens`) is
  compared as record stored it: the origin's answer — a fresh token every time — goes through
  record's own redaction (:func:`~fetchproxy.record.tokens.redacted_token_answer`), and those
  bytes must hash to the lock's digest. An answer that carries no token is CONTENT DRIFT, said
  as such. The token itself is never written.
- An answer ``401`` with a ``WWW-Authenticate: Bearer`` challenge, where the lock says another
  status, is answered as the client did: an anonymous token from the challenge's realm (only an
  https origin the lock names, :mod:`fetchproxy.sync.bearer`), and the GET sent once more with
  it. An entry locked as that ``401`` (a registry's ``GET /v2/``) is fetched and compared as it
  is, without a token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fetchproxy.digest import EMPTY, Digest
from fetchproxy.keys.request import ANY_ACCEPT, RequestKey
from fetchproxy.keys.url import origin_of
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.record.origins import OriginPolicy
from fetchproxy.record.rules import UPSTREAM_ACCEPT_ENCODING
from fetchproxy.record.tokens import TOKEN_ANSWER_LIMIT, redacted_token_answer
from fetchproxy.store import BlobWriter, CorruptBlobError, Store, StoreError
from fetchproxy.store.transfer import Meter, ProgressCallback, run_transfers
from fetchproxy.sync.bearer import BearerTokens, TokenError
from fetchproxy.sync.challenge import ChallengeError, bearer_challenge
from fetchproxy.sync.upstream import OriginAnswer, OriginClient, OriginUnreachableError
from fetchproxy.text import human_bytes

CHUNK = 1 << 20
_AUTH_STATUSES = frozenset({401, 403, 407})


@dataclass(frozen=True, kw_only=True)
class Unfetchable:
    """A blob no entry can fetch again: the entries that name it, why, and what to do."""

    digest: Digest
    entries: tuple[Fetch, ...]
    why: str
    instead: str


@dataclass(frozen=True, kw_only=True)
class Job:
    """One blob to fetch: the entries to try, in order."""

    digest: Digest
    size: int
    entries: tuple[Fetch, ...]


@dataclass(frozen=True, kw_only=True)
class RefetchPlan:
    jobs: tuple[Job, ...]
    present: int
    """Blobs the store holds already."""
    empty: bool
    """The empty blob is needed and missing: it is written, not fetched."""
    unfetchable: tuple[Unfetchable, ...]
    token_origins: frozenset[tuple[str, int]] = frozenset()
    """The https origins (host, port) of the lock's entries the policy allows: where a Bearer
    challenge's realm may be (:mod:`fetchproxy.sync.bearer`)."""


def plan_refetch(lock: Lock, *, has: Callable[[Digest], bool], policy: OriginPolicy) -> RefetchPlan:
    """What ``store fetch`` does with ``lock`` (see the module docstring); ``has`` says which
    blobs the store holds already."""
    by_digest: dict[Digest, list[Fetch]] = {}
    for fetch in lock.fetches:
        by_digest.setdefault(fetch.digest, []).append(fetch)
    jobs: list[Job] = []
    unfetchable: list[Unfetchable] = []
    present = 0
    empty = False
    for digest, entries in by_digest.items():
        if has(digest):
            present += 1
            continue
        if digest == EMPTY:
            empty = True
            continue
        gets = [f for f in entries if f.key.method == "GET" and f.key.body_digest is None]
        allowed = [f for f in gets if _allowed(policy, f.key) is None]
        if allowed:
            jobs.append(Job(digest=digest, size=entries[0].size, entries=tuple(allowed)))
        elif gets:
            unfetchable.append(
                Unfetchable(
                    digest=digest,
                    entries=tuple(gets),
                    why=_allowed(policy, gets[0].key) or "not allowed",
                    instead="allow the origin (--allow-origin, [record] allow), or pull the "
                    "blob from a remote store (`fetchproxy store pull`)",
                )
            )
        else:
            unfetchable.append(_cannot(digest, tuple(entries)))
    jobs.sort(key=lambda job: (-job.size, job.digest))  # large first: no long tail alone
    https = {f.key for f in lock.fetches if f.key.url.startswith("https://")}
    return RefetchPlan(
        jobs=tuple(jobs),
        present=present,
        empty=empty,
        unfetchable=tuple(unfetchable),
        token_origins=frozenset(
            origin_of(key.url) for key in https if _allowed(policy, key) is None
        ),
    )


def _allowed(policy: OriginPolicy, key: RequestKey) -> str | None:
    host, port = origin_of(key.url)
    return policy.check(host, port, (), ())


def _cannot(digest: Digest, entries: tuple[Fetch, ...]) -> Unfetchable:
    key = entries[0].key
    if key.body_digest is not None:
        git = key.url.endswith(("/git-upload-pack", "/git-receive-pack"))
        why = (
            "a request with a body (git's negotiation: its answer depends on what the client "
            "asked for)"
            if git
            else "a request with a body (fetching it again would mean sending that body, "
            "which the lock does not keep)"
        )
    else:
        why = f"a {key.method} request (only GET is fetched again: it changes nothing)"
    return Unfetchable(
        digest=digest,
        entries=entries,
        why=why,
        instead="pull its blob from a remote store (`fetchproxy store pull`), copy the store "
        "it was recorded into, or record again",
    )


# ------------------------------------------------------------------------------------- fetch


class RefetchError(StoreError):
    """One blob could not be fetched again; ``drift``: the origin answered something else."""

    def __init__(self, message: str, *, drift: bool, entry: Fetch) -> None:
        super().__init__(message)
        self.drift = drift
        self.entry = entry


@dataclass(frozen=True, kw_only=True)
class Fetched:
    """What one job did: the entry that gave the bytes, and the ones that failed first."""

    entry: Fetch
    tried: tuple[RefetchError, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RefetchReport:
    fetched: tuple[tuple[Digest, Fetched], ...]
    failed: tuple[tuple[Job, tuple[RefetchError, ...]], ...]
    bytes: int
    """The bytes of the blobs fetched and published."""
    seconds: float
    wrote_empty: bool
    plan: RefetchPlan
    origins: frozenset[str] = field(default_factory=frozenset)

    @property
    def drifted(self) -> list[RefetchError]:
        """Every CONTENT DRIFT met, also on entries whose blob another entry then gave."""
        found = [e for _, f in self.fetched for e in f.tried if e.drift]
        return found + [e for _, errors in self.failed for e in errors if e.drift]

    @property
    def complete(self) -> bool:
        """Whether the store now holds every blob of the lock and nothing drifted."""
        return not (self.failed or self.plan.unfetchable or self.drifted)


class _JobFailedError(StoreError):
    def __init__(self, errors: tuple[RefetchError, ...]) -> None:
        super().__init__(str(errors[-1]))
        self.errors = errors


def refetch(
    plan: RefetchPlan,
    store: Store,
    client: OriginClient,
    *,
    concurrency: int = 8,
    on_progress: ProgressCallback | None = None,
    user_agent: str = "fetchproxy",
) -> RefetchReport:
    """Carry out ``plan`` into ``store`` (see the module docstring)."""
    if plan.empty:
        store.put(b"")
    origin = _Origin(
        client, BearerTokens(client, plan.token_origins, user_agent=user_agent), user_agent
    )

    def work(job: Job, meter: Meter) -> Fetched:
        errors: list[RefetchError] = []
        for entry in job.entries:
            try:
                _fetch_one(entry, store, origin, meter)
            except RefetchError as exc:
                errors.append(exc)
                continue
            return Fetched(entry=entry, tried=tuple(errors))
        raise _JobFailedError(tuple(errors))

    outcome = run_transfers(
        plan.jobs,
        work,
        total=len(plan.jobs),
        concurrency=concurrency,
        stops_all=lambda _error: False,  # each origin answers for itself
        bytes_total=sum(job.size for job in plan.jobs),
        on_progress=on_progress,
    )
    failed = []
    for job, error in outcome.failed:
        if not isinstance(error, _JobFailedError):
            raise error  # the store failed (a full disk): not the origin's doing
        failed.append((job, error.errors))
    return RefetchReport(
        fetched=tuple((job.digest, done) for job, done in outcome.done),
        failed=tuple(failed),
        bytes=sum(job.size for job, _ in outcome.done),
        seconds=outcome.seconds,
        wrote_empty=plan.empty,
        plan=plan,
        origins=frozenset(done.entry.key.host for _, done in outcome.done),
    )


def request_headers(key: RequestKey, user_agent: str) -> dict[str, str]:
    """What ``store fetch`` sends: the key's selecting headers, identity encoding, its name."""
    headers = {"accept-encoding": UPSTREAM_ACCEPT_ENCODING, "user-agent": user_agent}
    if key.accept is not None and key.accept != ANY_ACCEPT:  # "*": Accept selects nothing here
        headers["accept"] = key.accept
    if key.git_protocol is not None:
        headers["git-protocol"] = key.git_protocol
    return headers


@dataclass(frozen=True, slots=True)
class _Origin:
    """How a job reaches origins: the client, the run's tokens, the name it gives."""

    client: OriginClient
    tokens: BearerTokens
    user_agent: str


def _fetch_one(entry: Fetch, store: Store, origin: _Origin, meter: Meter) -> None:
    key = entry.key
    where = f"{key.method} {key.url}"
    headers = request_headers(key, origin.user_agent)
    answer = _get(origin.client, key.url, headers, where, entry)
    challenged = False
    if answer.status == 401 and entry.status != 401:
        authorization = _answer_challenge(answer, entry, where, origin.tokens)
        if authorization is not None:
            headers["authorization"] = authorization
            answer = _get(origin.client, key.url, headers, where, entry)
            challenged = True
    reuse = False
    try:
        if answer.status != entry.status:
            raise _status_error(where, entry, answer.status, challenged=challenged)
        if entry.redacted is not None:
            reuse = _put_token_answer(entry, answer, store, meter, where)
            return
        with store.writer() as writer:
            for chunk in answer.chunks(CHUNK):
                writer.update(chunk)
                meter.add(len(chunk))
                if writer.size > entry.size:
                    raise RefetchError(
                        f"{where}: CONTENT DRIFT: the origin sent more than the lock's "
                        f"{entry.size} bytes; not put in the store",
                        drift=True,
                        entry=entry,
                    )
            reuse = True
            _commit(writer, entry, where, "the origin sent other bytes")
    except OriginUnreachableError as exc:
        raise RefetchError(f"{where}: {exc}", drift=False, entry=entry) from None
    finally:
        answer.close(reuse=reuse)


def _get(
    client: OriginClient, url: str, headers: dict[str, str], where: str, entry: Fetch
) -> OriginAnswer:
    try:
        return client.get(url, headers)
    except OriginUnreachableError as exc:
        raise RefetchError(f"{where}: {exc}", drift=False, entry=entry) from None


def _answer_challenge(
    answer: OriginAnswer, entry: Fetch, where: str, tokens: BearerTokens
) -> str | None:
    """The ``Authorization`` to send again with, for a 401's Bearer challenge (``answer`` is
    then done with); None when the 401 has none (it is reported as it is)."""
    try:
        challenge = bearer_challenge(answer.headers.get("www-authenticate", ""))
    except ChallengeError as exc:
        answer.close(reuse=False)
        raise _unanswered(where, entry, str(exc)) from None
    if challenge is None:
        return None
    answer.discard()
    if not entry.key.url.startswith("https://"):
        raise _unanswered(where, entry, "over plain http, where no token is sent")
    try:
        return tokens.authorization(challenge)
    except (ChallengeError, TokenError) as exc:
        raise RefetchError(f"{where}: {exc}; {_INSTEAD}", drift=False, entry=entry) from None


def _unanswered(where: str, entry: Fetch, why: str) -> RefetchError:
    return RefetchError(
        f"{where}: the origin refused (HTTP 401) with a Bearer challenge store fetch does not "
        f"answer: {why}; {_INSTEAD}",
        drift=False,
        entry=entry,
    )


_INSTEAD = "pull the blobs from a remote store (`fetchproxy store pull`), or record again"


def _put_token_answer(
    entry: Fetch, answer: OriginAnswer, store: Store, meter: Meter, where: str
) -> bool:
    """Store the origin's token answer as record stored it (redacted), if that is the lock's
    blob; whether the body was read whole. The answer as sent is never written."""
    body = answer.read(TOKEN_ANSWER_LIMIT)
    stored = (
        None
        if body is None
        else redacted_token_answer(body, answer.headers.get("content-encoding"))
    )
    if stored is None:
        what = (
            f"more than the {human_bytes(TOKEN_ANSWER_LIMIT)} a token answer may be"
            if body is None
            else f"{len(body)} bytes that are not a JSON object with a token, access_token, "
            "refresh_token or id_token"
        )
        raise RefetchError(
            f'{where}: CONTENT DRIFT: the lock holds a token answer (redacted = "token"), but '
            f"the origin sent {what}; nothing was put in the store",
            drift=True,
            entry=entry,
        )
    with store.writer() as writer:
        writer.update(stored)
        meter.add(len(stored))
        _commit(writer, entry, where, "the origin's token answer, redacted, is other bytes")
    return True


def _commit(writer: BlobWriter, entry: Fetch, where: str, what: str) -> None:
    try:
        writer.commit(entry.digest)
    except CorruptBlobError as exc:
        raise RefetchError(
            f"{where}: CONTENT DRIFT: {what} ({writer.size} bytes, {exc.actual}) than the "
            f"lock's {entry.digest} ({entry.size} bytes); not put in the store",
            drift=True,
            entry=entry,
        ) from None


def _status_error(where: str, entry: Fetch, status: int, *, challenged: bool) -> RefetchError:
    if status >= 500:
        return RefetchError(
            f"{where}: the origin failed (HTTP {status}); try again later",
            drift=False,
            entry=entry,
        )
    if status in _AUTH_STATUSES and entry.status not in _AUTH_STATUSES:
        if challenged:
            return RefetchError(
                f"{where}: the origin refused (HTTP {status}) even with an anonymous token: "
                f"the repository needs credentials, which store fetch never sends; {_INSTEAD}",
                drift=False,
                entry=entry,
            )
        return RefetchError(
            f"{where}: the origin refused (HTTP {status}): it may want a credential, which "
            "a lock never keeps — pull the blob from a remote store, or record again",
            drift=False,
            entry=entry,
        )
    return RefetchError(
        f"{where}: CONTENT DRIFT: the origin answered HTTP {status} where the lock says "
        f"{entry.status}; nothing was put in the store",
        drift=True,
        entry=entry,
    )


# ------------------------------------------------------------------------------------- text


def render_refetch(report: RefetchReport, *, lock: str) -> str:
    """What ``fetchproxy store fetch`` prints: one line per problem, then a summary."""
    lines = [f"fetchproxy store fetch: {lock}"]
    lines += [str(error) for error in report.drifted]
    lines += [
        str(errors[-1])
        for _, errors in report.failed
        if not errors[-1].drift  # drift was said above
    ]
    for item in report.plan.unfetchable:
        shown = _entries(item.entries)
        lines.append(f"cannot fetch again: {shown}: {item.why}; instead, {item.instead}")
    summary = (
        f"summary: fetched {len(report.fetched)} of {len(report.plan.jobs)} blobs "
        f"({human_bytes(report.bytes)}) in {report.seconds:.1f} s"
    )
    extras = [f"{report.plan.present} in the store already"]
    if report.wrote_empty:
        extras.append("the empty blob written")
    if report.drifted:
        extras.append(f"{len(report.drifted)} CONTENT DRIFT (not put in the store)")
    failed = sum(1 for _, errors in report.failed if not errors[-1].drift)
    if failed:
        extras.append(f"{failed} could not be fetched")
    if report.plan.unfetchable:
        extras.append(f"{len(report.plan.unfetchable)} cannot be fetched again")
    return "\n".join([*lines, f"{summary}; {', '.join(extras)}"]) + "\n"


def _entries(entries: Sequence[Fetch]) -> str:
    first = entries[0].key
    more = f" (and {len(entries) - 1} more)" if len(entries) > 1 else ""
    return f"{first.method} {first.url}{more}"


def fetched_digests(report: RefetchReport) -> list[Digest]:
    """The blobs this fetch put in the store."""
    return [digest for digest, _ in report.fetched] + ([EMPTY] if report.wrote_empty else [])
