"""The remote store against a real S3 implementation (Ceph RGW, see conftest.py).

Round trips, create-only writes (the 412 path), two pushers at once, a pull broken by the
network (resumed with a ranged GET) or by the store going away (a clear error, nothing
half-published, the next pull completes), wrong and read-only credentials, objects missing or
replaced with other bytes — and never a secret in an error or a log record.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pytest

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.store import DiskStore
from fetchproxy.store.remote import RemoteTransferError, TransferSettings
from fetchproxy.store.remote_client import ClientSettings
from fetchproxy.store.remote_errors import (
    RemoteAccessError,
    RemoteCorruptError,
    RemoteMissingError,
    RemoteUnavailableError,
)
from fetchproxy.store.remote_url import RemoteURL
from fetchproxy.store.transfer import Progress
from tests.store.relay import Relay
from tests.support.s3 import QUICK, S3Endpoint, make_remote, use_credentials

MiB = 1 << 20


def fill(store: DiskStore, sizes: list[int]) -> list[Digest]:
    return [store.put(os.urandom(size)) for size in sizes]


def every_text(exc: BaseException) -> str:
    """All a user or a log could see of ``exc``: message, repr, traceback with causes."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


def assert_clean(store: DiskStore) -> None:
    """Every blob in ``store`` verifies and no temp file is left behind."""
    for digest in store.digests():
        store.verify(digest)
    assert store.temp_files() == []


@pytest.fixture
def stores(tmp_path: Path) -> tuple[DiskStore, DiskStore]:
    """A store that recorded (here) and a fresh one (another machine)."""
    return DiskStore(tmp_path / "here"), DiskStore(tmp_path / "there")


def test_round_trip(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, there = stores
    digests = fill(here, [0, 1, 16 << 10, 100_000] + [4096] * 20 + [3 * MiB])
    remote = make_remote(remote_url)
    seen: list[Progress] = []
    pushed = remote.push(digests, here, on_progress=seen.append)
    assert sorted(pushed.moved) == sorted(digests)
    assert pushed.present == ()
    assert seen[-1].final
    assert seen[-1].objects_done == seen[-1].objects_total == len(digests)
    assert seen[-1].bytes_done == seen[-1].bytes_total == sum(here.size_of(d) for d in digests)

    listed = {obj.digest: obj for obj in remote.list_objects() if obj.digest is not None}
    assert set(listed) == set(digests)
    for digest, obj in listed.items():
        assert obj.key == remote_url.key_of(digest) == f"{remote_url.prefix}/blake3/{digest[7:]}"
        assert obj.size == here.size_of(digest)

    sizes = {digest: here.size_of(digest) for digest in digests}
    pulled = remote.pull(digests, there, sizes=sizes)
    assert sorted(pulled.moved) == sorted(digests)
    assert pulled.bytes_moved == sum(sizes.values())
    assert sorted(there.digests()) == sorted(digests)
    for digest in digests:
        assert there.open(digest).read_all() == here.open(digest).read_all()
    assert_clean(there)

    again = remote.pull(digests, there)
    assert again.moved == ()
    assert sorted(again.present) == sorted(digests)


def test_a_pull_with_nothing_missing_makes_no_client(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, _ = stores
    digests = fill(here, [10, 20])
    remote = make_remote(remote_url)
    report = remote.pull(digests, here)
    assert report.present == tuple(digests)
    assert remote._client is None


def test_replay_start_up_does_not_import_botocore(tmp_path: Path) -> None:
    program = (
        "import sys\n"
        "from fetchproxy.store import DiskStore\n"
        "from fetchproxy.store.remote import RemoteStore\n"
        "from fetchproxy.store.remote_url import parse_remote_url\n"
        f"store = DiskStore({str(tmp_path)!r}); digest = store.put(b'blob')\n"
        "RemoteStore(parse_remote_url('s3://some-bucket/p')).pull([digest], store)\n"
        "assert 'botocore' not in sys.modules, 'botocore was imported'\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True)


def test_create_only_a_second_push_is_the_412_path(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, _ = stores
    digests = fill(here, [1000, 2000, 2 * MiB])
    # No lookups first: every upload is a conditional PUT, so "already there" is the 412.
    remote = make_remote(remote_url, TransferSettings(head_first_from=1 << 40, client=QUICK.client))
    assert len(remote.push(digests, here).moved) == 3
    again = remote.push(digests, here)
    assert again.moved == ()
    assert sorted(again.present) == sorted(digests)
    # The PUT itself: the store answers 412 and keeps the first bytes.
    key = remote_url.key_of(digests[0])
    created = remote.client.put_new(key, io.BytesIO(b"other"), size=5, md5=_md5(b"other"))
    assert created is False
    assert b"".join(remote.client.get(key).chunks(MiB, where=key, endpoint="")) == (
        here.open(digests[0]).read_all()
    )


def _md5(data: bytes) -> bytes:
    import hashlib

    return hashlib.md5(data, usedforsecurity=False).digest()


def test_content_md5_refuses_bytes_changed_on_the_way(
    aws_env: S3Endpoint, remote_url: RemoteURL
) -> None:
    remote = make_remote(remote_url)
    key = remote_url.key_of(digest_bytes(b"sent"))
    with pytest.raises(Exception, match=r"BadDigest") as caught:
        remote.client.put_new(key, io.BytesIO(b"sent"), size=4, md5=_md5(b"hashed"))
    assert "HTTP 400" in str(caught.value)
    assert remote.client.head(key) is None


def test_two_pushers_of_the_same_blobs_at_once(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, there = stores
    digests = fill(here, [8192] * 40 + [2 * MiB] * 2)
    reports = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def push() -> None:
        try:
            remote = make_remote(remote_url)
            remote.client  # noqa: B018 -- made before the barrier, so both start together
            start.wait()
            reports.append(remote.push(digests, here))
        except BaseException as exc:  # noqa: BLE001 -- handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=push) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for report in reports:
        assert sorted(report.moved + report.present) == sorted(digests)
    assert {d for r in reports for d in r.moved} == set(digests)
    make_remote(remote_url).pull(digests, there)
    assert sorted(there.digests()) == sorted(digests)


def test_a_broken_stream_goes_on_with_a_ranged_get(
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    stores: tuple[DiskStore, DiskStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here, there = stores
    [digest] = fill(here, [6 * MiB])
    make_remote(remote_url).push([digest], here)
    with Relay(aws_env.port, cut_once_after=2 * MiB) as relay:
        use_credentials(
            monkeypatch, aws_env, key=aws_env.writer_key, secret=aws_env.writer_secret,
            endpoint=relay.endpoint,
        )  # fmt: skip
        report = make_remote(remote_url).pull([digest], there)
    assert report.moved == (digest,)
    assert relay.cuts == 1
    ranges = [line for sent in relay.requests for line in bytes(sent).split(b"\r\n")
              if line.lower().startswith(b"range: bytes=")]  # fmt: skip
    assert len(ranges) == 1, ranges
    offset = int(ranges[0].split(b"=")[1].rstrip(b"-"))
    assert MiB < offset < 6 * MiB  # it went on from the bytes it had, not from zero
    assert report.bytes_moved == 6 * MiB
    there.verify(digest)
    assert_clean(there)


def test_the_store_stopping_mid_pull(
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    stores: tuple[DiskStore, DiskStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here, there = stores
    digests = fill(here, [3 * MiB] * 6 + [4096] * 10)
    make_remote(remote_url).push(digests, here)
    settings = TransferSettings(
        concurrency=2,
        resume_attempts=1,
        client=ClientSettings(connect_timeout=1, read_timeout=5, max_attempts=1),
    )
    with Relay(aws_env.port, stop_after=5 * MiB) as relay:
        use_credentials(
            monkeypatch, aws_env, key=aws_env.writer_key, secret=aws_env.writer_secret,
            endpoint=relay.endpoint,
        )  # fmt: skip
        with pytest.raises(RemoteTransferError) as caught:
            make_remote(remote_url, settings).pull(digests, there)
    error = caught.value
    assert all(isinstance(e, RemoteUnavailableError) for _, e in error.failures)
    text = str(error)
    assert f"blobs from {remote_url}" in text
    assert relay.endpoint in text
    first, _ = error.failures[0]
    assert first in text
    assert remote_url.location(remote_url.key_of(first)) in text
    assert "Run the pull again once the store is reachable" in text
    # Nothing half-published: what is there verifies, no temp file is left, the rest is absent.
    pulled = set(there.digests())
    assert pulled < set(digests)
    assert set(error.digests) == set(digests) - pulled
    assert_clean(there)

    use_credentials(monkeypatch, aws_env, key=aws_env.writer_key, secret=aws_env.writer_secret)
    report = make_remote(remote_url).pull(digests, there)
    assert set(report.moved) == set(digests) - pulled
    assert sorted(there.digests()) == sorted(digests)
    assert_clean(there)


def test_a_wrong_secret_is_one_clear_error_that_never_shows_it(
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    stores: tuple[DiskStore, DiskStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here, there = stores
    digests = fill(here, [100] * 30)
    make_remote(remote_url).push(digests, here)
    wrong = "WRONG" + aws_env.writer_secret[5:]
    use_credentials(monkeypatch, aws_env, key=aws_env.writer_key, secret=wrong)
    for action in (make_remote(remote_url).pull, make_remote(remote_url).push):
        with pytest.raises(RemoteTransferError) as caught:
            action(digests, there if action.__name__ == "pull" else here)
        error = caught.value
        assert isinstance(error.failures[0][1], RemoteAccessError)
        text = str(error)
        assert "SignatureDoesNotMatch" in text
        assert "the secret key does not belong to the access key" in text
        assert error.failures[0][0] in text
        # Stopped at once: the same answer would come for every other blob.
        assert len(error.failures) <= QUICK.concurrency
        assert len(error.digests) == len(digests)
        for secret in (wrong, aws_env.writer_secret, aws_env.reader_secret):
            assert secret not in every_text(error)
    assert list(there.digests()) == []


def test_read_only_credentials_pull_but_cannot_push(
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    stores: tuple[DiskStore, DiskStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here, there = stores
    digests = fill(here, [5000] * 3)
    make_remote(remote_url).push(digests[:2], here)
    use_credentials(monkeypatch, aws_env, key=aws_env.reader_key, secret=aws_env.reader_secret)
    make_remote(remote_url).pull(digests[:2], there)
    assert sorted(there.digests()) == sorted(digests[:2])
    with pytest.raises(RemoteTransferError) as caught:
        make_remote(remote_url).push(digests[2:], here)
    [(digest, error)] = caught.value.failures
    assert digest == digests[2]
    assert isinstance(error, RemoteAccessError)
    assert "AccessDenied" in str(error)
    assert "read-only credentials cannot push or delete" in str(error)
    # Even for objects that are there the store says no, not 412: no write right, no write.
    with pytest.raises(RemoteTransferError) as again:
        make_remote(remote_url).push(digests[:2], here)
    assert all(isinstance(e, RemoteAccessError) for _, e in again.value.failures)
    with pytest.raises(RemoteAccessError):
        make_remote(remote_url).delete([remote_url.key_of(digests[0])])
    assert aws_env.reader_secret not in every_text(caught.value)


def test_an_object_replaced_with_other_bytes_is_refused(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, there = stores
    good, other = fill(here, [50_000, 10])
    remote = make_remote(remote_url)
    remote.push([good, other], here)
    key = remote_url.key_of(good)
    forged = os.urandom(50_000)  # same size: only the bytes give it away
    remote.client._client.put_object(Bucket=remote_url.bucket, Key=key, Body=forged)

    with pytest.raises(RemoteTransferError) as caught:
        remote.pull([good, other], there, sizes={good: 50_000, other: 10})
    [(digest, error)] = caught.value.failures
    assert digest == good
    assert isinstance(error, RemoteCorruptError)
    text = str(caught.value)
    assert good in text
    assert remote_url.location(key) in text
    assert f"its bytes hash to {digest_bytes(forged)}" in text
    assert "was refused and not put in the local store" in text
    assert not there.contains(good)
    assert there.contains(other)  # the others still came
    assert_clean(there)

    # An object of the wrong size is refused before its bytes are read.
    remote.client._client.put_object(Bucket=remote_url.bucket, Key=key, Body=b"short")
    with pytest.raises(RemoteTransferError, match="holds 5 bytes but the lock says"):
        remote.pull([good], there, sizes={good: 50_000})
    assert not there.contains(good)
    assert_clean(there)


def test_a_missing_object_is_named(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, there = stores
    present, absent = fill(here, [700, 800])
    remote = make_remote(remote_url)
    remote.push([present], here)
    with pytest.raises(RemoteTransferError) as caught:
        remote.pull([absent, present], there)
    [(digest, error)] = caught.value.failures
    assert digest == absent
    assert isinstance(error, RemoteMissingError)
    text = str(caught.value)
    assert absent in text
    assert remote_url.location(remote_url.key_of(absent)) in text
    assert "no such object (HTTP 404 NoSuchKey)" in text
    assert "fetchproxy store push" in text
    assert there.contains(present)
    assert caught.value.report.moved == (present,)


def test_list_and_delete(
    aws_env: S3Endpoint, remote_url: RemoteURL, stores: tuple[DiskStore, DiskStore]
) -> None:
    here, _ = stores
    digests = fill(here, [10, 20, 30])
    remote = make_remote(remote_url)
    remote.push(digests, here)
    foreign = f"{remote_url.prefix}/blake3/not-a-digest"
    remote.client._client.put_object(Bucket=remote_url.bucket, Key=foreign, Body=b"x")
    objects = list(remote.list_objects())
    assert {obj.digest for obj in objects} == {*digests, None}
    assert all(obj.last_modified_epoch > 0 for obj in objects)
    with pytest.raises(ValueError, match="not a blob of"):
        remote.delete([foreign])
    assert remote.delete([remote_url.key_of(digests[0])]) == 1
    assert {obj.digest for obj in remote.list_objects()} == {*digests[1:], None}
