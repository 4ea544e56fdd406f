"""``RemoteStore``: blobs on S3-compatible object storage, pushed and pulled in parallel.

The remote holds each blob as the immutable object ``PREFIX/blake3/<64 hex>`` (see
``remote_url``); the lock in git is the only index. The local store stays the tier that
serves: ``pull`` brings blobs into it, ``push`` sends blobs from it.

- ``push``: for each blob, the local copy is read through the store's verifying reader while
  its MD5 is computed, then uploaded create-only (``If-None-Match: *``) with that MD5 as
  ``Content-MD5``: the store keeps exactly the bytes verified here, or refuses the upload. A
  412 answer means the object is already there, which is success. Blobs of at least
  ``head_first_from`` bytes are looked up first, so a large blob already there is not sent,
  and stream from their file; smaller ones go as one buffer (at most that size per transfer).
- ``pull``: each missing blob is streamed into a local ``BlobWriter``, which hashes while it
  writes and publishes only if the bytes match the digest (``commit(expected)``): an object
  whose bytes do not match its name is refused and never published. A stream that breaks is
  continued with a ranged GET from the byte reached (``If-Match`` its ETag), up to
  ``resume_attempts`` times, into the same writer — the bytes already hashed need not be read
  again. An interrupted process leaves no partial blob: the next pull starts that object anew.
- Both run ``concurrency`` transfers at once with constant memory per transfer (one chunk),
  report progress through a callback, and end with one ``RemoteTransferError`` naming every
  digest and object that failed, and why.
- ``absent``: which blobs the remote lacks (HEAD, in parallel), for blobs a lock names that
  the local store does not hold and so cannot push.
- ``check_writable``: before a record starts, whether these credentials may upload: a
  create-only PUT of the empty blob, a blob like any other (412 if it is there already).
- ``list_objects``/``delete``: the primitives for garbage collection (policy: ``remote_gc``).

Creating a ``RemoteStore`` costs nothing: the S3 client (and botocore) is made on first use.
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from fetchproxy.digest import EMPTY, Digest, parse_digest
from fetchproxy.store.base import BlobWriter, CorruptBlobError, Store, StoreError
from fetchproxy.store.remote_client import BucketClient, ClientSettings, ObjectInfo, ObjectStream
from fetchproxy.store.remote_errors import (
    RemoteAccessError,
    RemoteConfigError,
    RemoteCorruptError,
    RemoteMissingError,
    RemoteStoreError,
    RemoteUnavailableError,
)
from fetchproxy.store.remote_url import RemoteURL
from fetchproxy.store.transfer import Meter, Outcome, ProgressCallback, run_transfers

_SHOW_AT_MOST = 10


@dataclass(frozen=True, kw_only=True)
class TransferSettings:
    """How many transfers run at once and how they behave."""

    concurrency: int = 32
    chunk_size: int = 1 << 20
    resume_attempts: int = 3
    head_first_from: int = 1 << 20
    progress_interval: float = 0.2
    client: ClientSettings = field(default_factory=ClientSettings)


@dataclass(frozen=True, kw_only=True)
class TransferReport:
    """What a push or pull did: blobs moved, blobs already there, bytes, wall time."""

    moved: tuple[Digest, ...]
    present: tuple[Digest, ...]
    bytes_moved: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class RemoteObject:
    """An object under the remote's prefix; ``digest`` is ``None`` for a key naming no blob."""

    key: str
    digest: Digest | None
    size: int
    last_modified_epoch: float


class RemoteTransferError(RemoteStoreError):
    """Some blobs could not be pushed or pulled; ``failures`` says which and why."""

    def __init__(
        self,
        message: str,
        *,
        failures: tuple[tuple[Digest, StoreError], ...],
        not_attempted: tuple[Digest, ...],
        report: TransferReport,
    ) -> None:
        super().__init__(message)
        self.failures = failures
        self.not_attempted = not_attempted
        self.report = report

    @property
    def digests(self) -> tuple[Digest, ...]:
        """Every blob that was not transferred: failed, then never attempted."""
        return tuple(digest for digest, _ in self.failures) + self.not_attempted


class RemoteStore:
    """One remote (``s3://BUCKET/PREFIX``) and the operations between it and a local store."""

    def __init__(
        self,
        url: RemoteURL,
        *,
        settings: TransferSettings | None = None,
        client: BucketClient | None = None,
    ) -> None:
        self.url = url
        self.settings = settings or TransferSettings()
        self._client = client
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteStore({str(self.url)!r})"

    @property
    def client(self) -> BucketClient:
        """The bucket's client, made (and botocore imported) on first use."""
        with self._client_lock:
            if self._client is None:
                self._client = BucketClient(self.url.bucket, self.settings.client)
            return self._client

    # ------------------------------------------------------------------------------ push

    def push(
        self,
        digests: Iterable[Digest],
        local: Store,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> TransferReport:
        """Upload ``digests`` from ``local``; those already in the remote count as present."""
        wanted = _unique(digests)
        sizes = {digest: local.size_of(digest) for digest in wanted}
        outcome = run_transfers(
            wanted,
            lambda digest, meter: self._push_one(digest, sizes[digest], local, meter),
            total=len(wanted),
            concurrency=self.settings.concurrency,
            stops_all=_stops_all,
            bytes_total=sum(sizes.values()),
            on_progress=on_progress,
            interval=self.settings.progress_interval,
        )
        return self._finish("push", "to", outcome, already=())

    def _push_one(self, digest: Digest, size: int, local: Store, meter: Meter) -> bool:
        key = self.url.key_of(digest)
        client = self.client
        if size >= self.settings.head_first_from:
            try:
                info = client.head(key)
            except RemoteAccessError:
                # S3 answers 403 rather than 404 for a missing object to credentials that may
                # not list the bucket; the conditional PUT below decides either way.
                info = None
            if info is not None:
                self._check_size(digest, key, info, size)
                meter.add(0)
                return False
        # A damaged local blob raises CorruptBlobError here, naming it, before a byte is sent.
        md5 = hashlib.md5(usedforsecurity=False)
        if size < self.settings.head_first_from:
            # Small: one verified read into memory (bounded by head_first_from per transfer),
            # sent as bytes — without the Expect: 100-continue round trip a file body gets.
            with local.open(digest, chunk_size=self.settings.chunk_size) as reader:
                data = reader.read_all()
            md5.update(data)
            created = client.put_new(key, data, size=size, md5=md5.digest())
        else:
            with local.open(digest, chunk_size=self.settings.chunk_size) as reader:
                for chunk in reader:
                    md5.update(chunk)
                    meter.check()
            with _open_body(local, digest) as body:
                created = client.put_new(key, body, size=size, md5=md5.digest())
        meter.add(size if created else 0)
        return created

    def _check_size(self, digest: Digest, key: str, info: ObjectInfo, size: int) -> None:
        if info.size != size:
            raise RemoteCorruptError(
                f"{self.url.location(key)} holds {info.size} bytes but blob {digest} has "
                f"{size}: the object was damaged or replaced (it is never used); delete it "
                "and push again",
                digest=digest,
                key=key,
            )

    # ------------------------------------------------------------------------------ pull

    def pull(
        self,
        digests: Iterable[Digest],
        local: Store,
        *,
        sizes: Mapping[Digest, int] | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> TransferReport:
        """Download the ``digests`` that ``local`` lacks, each verified before it is published.

        ``sizes`` (from the lock) lets an object of the wrong size be refused before its first
        byte, and gives the progress a byte total. With nothing missing, no client is made.
        """
        wanted = _unique(digests)
        already = tuple(digest for digest in wanted if local.contains(digest))
        missing = [digest for digest in wanted if digest not in frozenset(already)]
        known = sizes or {}
        total = sum(known[d] for d in missing) if all(d in known for d in missing) else None
        if not missing:
            return TransferReport(moved=(), present=already, bytes_moved=0, seconds=0.0)
        outcome = run_transfers(
            missing,
            lambda digest, meter: self._pull_one(digest, known.get(digest), local, meter),
            total=len(missing),
            concurrency=self.settings.concurrency,
            stops_all=_stops_all,
            bytes_total=total,
            on_progress=on_progress,
            interval=self.settings.progress_interval,
        )
        return self._finish("pull", "from", outcome, already=already)

    def _pull_one(self, digest: Digest, size: int | None, local: Store, meter: Meter) -> bool:
        key = self.url.key_of(digest)
        with local.writer() as writer:
            self._download(digest, key, size, writer, meter)
            try:
                writer.commit(digest)
            except CorruptBlobError as exc:
                raise RemoteCorruptError(
                    f"{self.url.location(key)} does not hold blob {digest}: its bytes hash to "
                    f"{exc.actual}; it was refused and not put in the local store — the object "
                    "was damaged or replaced: delete it and push the blob again from a verified "
                    "store",
                    digest=digest,
                    key=key,
                ) from exc
        return True

    def _download(
        self, digest: Digest, key: str, size: int | None, writer: BlobWriter, meter: Meter
    ) -> None:
        """Stream ``key`` into ``writer``; a broken stream goes on with a ranged GET."""
        where = self.url.location(key)
        client = self.client
        breaks = 0
        etag: str | None = None
        while True:
            try:
                stream = self._get(digest, key, writer.size, etag)
                if etag is None:
                    etag = stream.etag
                    if size is not None and stream.total != size:
                        stream.close()
                        raise RemoteCorruptError(
                            f"{where} holds {stream.total} bytes but the lock says blob {digest} "
                            f"has {size}: the object is damaged or was replaced; it was not "
                            "used — delete it and push the blob again",
                            digest=digest,
                            key=key,
                        )
                for chunk in stream.chunks(
                    self.settings.chunk_size, where=where, endpoint=client.endpoint
                ):
                    writer.update(chunk)
                    meter.add(len(chunk))
            except RemoteUnavailableError as exc:
                # The client has retried the request itself; a stream that broke after some
                # bytes arrived gets a few more tries from there, a fresh start none.
                breaks += 1
                if writer.size == 0 or breaks > self.settings.resume_attempts:
                    _tag(exc, digest, key)
                    raise
                _pause(breaks)
                continue
            if writer.size >= stream.total:
                return
            breaks += 1  # the body ended early without an error: continue from there
            if breaks > self.settings.resume_attempts:
                raise RemoteUnavailableError(
                    f"cannot download {where}: the store kept ending it early "
                    f"({writer.size} of {stream.total} bytes); retry later",
                    digest=digest,
                    key=key,
                )

    def _get(self, digest: Digest, key: str, offset: int, etag: str | None) -> ObjectStream:
        try:
            return self.client.get(key, offset=offset, etag=etag)
        except RemoteUnavailableError:
            raise
        except RemoteStoreError as exc:
            if exc.http_status == 412:  # replaced between two ranges: not one object
                raise RemoteCorruptError(
                    f"{self.url.location(key)} changed while it was read; it was not used — an "
                    "object named by its digest must never change: check who writes there",
                    digest=digest,
                    key=key,
                ) from exc
            _tag(exc, digest, key)
            raise

    # ------------------------------------------------------------------------------ lookups

    def absent(
        self, digests: Iterable[Digest], *, on_progress: ProgressCallback | None = None
    ) -> tuple[Digest, ...]:
        """The ``digests`` the remote does not hold (one HEAD each, in parallel).

        An error other than "no such object" (refused credentials, an unreachable store) ends
        in one ``RemoteTransferError``, as a push or pull would.
        """
        wanted = _unique(digests)
        outcome = run_transfers(
            wanted,
            self._is_there,
            total=len(wanted),
            concurrency=self.settings.concurrency,
            stops_all=_stops_all,
            on_progress=on_progress,
            interval=self.settings.progress_interval,
        )
        if outcome.failed or outcome.not_attempted:
            self._finish("look up", "in", outcome, already=())
        return tuple(digest for digest, there in outcome.done if not there)

    def _is_there(self, digest: Digest, meter: Meter) -> bool:
        key = self.url.key_of(digest)
        try:
            info = self.client.head(key)
        except RemoteStoreError as exc:
            _tag(exc, digest, key)
            raise
        meter.add(0)
        return info is not None

    def check_writable(self) -> None:
        """``RemoteStoreError`` unless these credentials may upload to this remote.

        A create-only PUT of the empty blob (``PREFIX/blake3/<digest of b"">``): it is a blob
        like any other, so creating it changes nothing a lock could see, and a 412 (it is
        there) is as good an answer as a 200. Read-only credentials get 403.
        """
        key = self.url.key_of(EMPTY)
        md5 = hashlib.md5(b"", usedforsecurity=False).digest()
        try:
            self.client.put_new(key, b"", size=0, md5=md5)
        except RemoteStoreError as exc:
            _tag(exc, EMPTY, key)
            raise

    # ------------------------------------------------------------------------------ gc

    def list_objects(self) -> Iterator[RemoteObject]:
        """Every object under ``PREFIX/blake3/``, with its size and last-modified time."""
        for info in self.client.list(self.url.blob_prefix):
            yield RemoteObject(
                key=info.key,
                digest=self.url.digest_of(info.key),
                size=info.size,
                last_modified_epoch=info.last_modified.timestamp(),
            )

    def delete(self, keys: Sequence[str]) -> int:
        """Delete blob objects by key, 1,000 per request; the number asked to delete.

        Only keys that name a blob under this remote's prefix are accepted (``ValueError``
        otherwise): garbage collection never touches anything else in the bucket.
        """
        for key in keys:
            if self.url.digest_of(key) is None:
                raise ValueError(
                    f"refusing to delete {self.url.location(key)}: it is not a blob of {self.url}"
                )
        for start in range(0, len(keys), 1000):
            self.client.delete(keys[start : start + 1000])
        return len(keys)

    # ------------------------------------------------------------------------------ errors

    def _finish(
        self,
        verb: str,
        preposition: str,
        outcome: Outcome[Digest, bool],
        *,
        already: tuple[Digest, ...],
    ) -> TransferReport:
        moved = tuple(digest for digest, did in outcome.done if did)
        present = already + tuple(digest for digest, did in outcome.done if not did)
        report = TransferReport(
            moved=moved, present=present, bytes_moved=outcome.bytes, seconds=outcome.seconds
        )
        if not outcome.failed and not outcome.not_attempted:
            return report
        raise RemoteTransferError(
            _failure_message(verb, preposition, self.url, outcome, len(moved) + len(present)),
            failures=outcome.failed,
            not_attempted=outcome.not_attempted,
            report=report,
        )


def _pause(attempt: int) -> None:
    """Back off before continuing a broken stream: 0.2 s, 0.4 s, 0.8 s, … at most 2 s."""
    time.sleep(min(2.0, 0.1 * 2**attempt))


def _unique(digests: Iterable[Digest]) -> list[Digest]:
    """The digests, validated, each once, in their first order."""
    return list(dict.fromkeys(parse_digest(digest) for digest in digests))


def _stops_all(error: StoreError) -> bool:
    """Whether ``error`` would fail every other blob too (so none should start)."""
    if isinstance(error, RemoteAccessError | RemoteConfigError | RemoteUnavailableError):
        return True
    if isinstance(error, RemoteStoreError):
        return error.key is None and error.http_status is None
    return not isinstance(error, CorruptBlobError) and getattr(error, "digest", None) is None


def _tag(error: RemoteStoreError, digest: Digest, key: str) -> None:
    """Record in ``error`` which blob and object it is about."""
    error.digest = digest
    error.key = error.key or key


def _open_body(local: Store, digest: Digest) -> IO[bytes]:
    """A blob's bytes as a seekable file for the upload: its file, or a copy in memory."""
    path = local.blob_path(digest)
    if path is None:  # a store without files (MemoryStore) holds its blobs in memory anyway
        with local.open(digest) as reader:
            return io.BytesIO(reader.read_all())
    try:
        return path.open("rb")
    except OSError as exc:
        raise StoreError(f"cannot read blob {digest} at {path}: {exc.strerror or exc}") from exc


def _failure_message(
    verb: str, preposition: str, url: RemoteURL, outcome: Outcome[Digest, bool], succeeded: int
) -> str:
    failed = len(outcome.failed) + len(outcome.not_attempted)
    done = {"push": "pushed or already there", "pull": "pulled or already there"}
    lines = [
        f"cannot {verb} {failed} of {failed + succeeded} blobs {preposition} {url} "
        f"({succeeded} {done.get(verb, 'done')}):"
    ]
    for digest, error in outcome.failed[:_SHOW_AT_MOST]:
        lines.append(f"  {digest}: {error}")
    if len(outcome.failed) > _SHOW_AT_MOST:
        lines.append(f"  … and {len(outcome.failed) - _SHOW_AT_MOST} more like these")
    if outcome.not_attempted:
        shown = ", ".join(outcome.not_attempted[:3])
        more = len(outcome.not_attempted) - 3
        lines.append(
            f"  {len(outcome.not_attempted)} not attempted after that error: {shown}"
            + (f" and {more} more" if more > 0 else "")
        )
    first = outcome.failed[0][1] if outcome.failed else None
    if verb == "pull":
        lines.append("None of these was put in the local store; the blobs pulled are kept.")
    if isinstance(first, RemoteMissingError):
        lines.append(
            "Push them from a machine that has them (`fetchproxy store push`), or record again."
        )
    elif isinstance(first, RemoteUnavailableError):
        lines.append(f"Run the {verb} again once the store is reachable; it goes on from here.")
    return "\n".join(lines)
