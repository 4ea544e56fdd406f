"""``fetchproxy lock verify``: every body a lock names is in the store, intact, of its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.store import DiskStore
from tests.support.badblobs import KINDS, SUBPROCESS_DEADLINE, make_not_regular
from tests.support.cli import run_command, run_fetchproxy

BODY = b"a recorded body\n"
OTHER = b"another recorded body\n"


def entry(path: str, body: bytes, *, size: int | None = None) -> Fetch:
    return Fetch(
        key=RequestKey(method="GET", url=f"https://example.org/{path}"),
        status=200,
        digest=digest_bytes(body),
        size=len(body) if size is None else size,
    )


def verify(lock: Path, store: DiskStore) -> int:
    return run_command("lock", "verify", "--lock", str(lock), "--store", str(store.root))


@pytest.fixture
def store(tmp_path: Path) -> DiskStore:
    store = DiskStore(tmp_path / "store")
    store.put(BODY)
    store.put(OTHER)
    return store


def test_a_lock_whose_bodies_are_all_there_is_intact(
    tmp_path: Path, store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([entry("a", BODY), entry("b", OTHER), entry("c", BODY)]))
    assert verify(lock, store) == 0
    assert capsys.readouterr().out == f"fetchproxy: {lock}: 3 fetches, 2 bodies, all intact\n"


def test_a_missing_body_and_a_size_the_blob_does_not_have_are_named(
    tmp_path: Path, store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    fetches = [entry("a", BODY, size=len(BODY) + 1), entry("b", OTHER), entry("gone", b"gone")]
    write_lock(lock, Lock.from_fetches(fetches))
    assert verify(lock, store) == 1
    err = capsys.readouterr().err
    gone = digest_bytes(b"gone")
    assert f"fetchproxy: missing: {gone} (no file {store.blob_path(gone)})\n" in err
    assert (
        f"fetchproxy: {lock}: GET https://example.org/a has size = {len(BODY) + 1}, but its "
        f"blob {digest_bytes(BODY)} is {len(BODY)} bytes: replay answers it 502 store-error — "
        "record it again rather than edit the lock\n"
    ) in err
    assert err.endswith(
        f"fetchproxy: {lock}: 1 of 3 bodies missing or corrupt; 1 entry with the wrong size\n"
        "fetchproxy: record again to fetch missing bodies; `fetchproxy store verify --repair` "
        "first moves corrupt ones aside\n"
    )


def test_a_url_replay_could_never_match_is_named_without_its_secret(
    tmp_path: Path, store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    edited = entry("a?token=s3cret-value", BODY)
    write_lock(lock, Lock.from_fetches([edited, entry("b", OTHER)]))
    assert verify(lock, store) == 1
    err = capsys.readouterr().err
    assert f"fetchproxy: {lock}: fetch[0] url has a secret query parameter (token)" in err
    assert "s3cret-value" not in err
    assert err.endswith(f"fetchproxy: {lock}: 1 url not in normal form\n")


def test_a_corrupt_body_is_named_and_a_store_that_is_not_there_is_said_so(
    tmp_path: Path, store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([entry("a", BODY), entry("b", OTHER)]))
    path = store.blob_path(digest_bytes(BODY))
    path.chmod(0o644)
    damaged = b"A recorded body\n"
    path.write_bytes(damaged)
    assert verify(lock, store) == 1
    err = capsys.readouterr().err
    assert f"fetchproxy: corrupt: {path}: hashes to {digest_bytes(damaged)}\n" in err
    with pytest.raises(FetchproxyError, match=r"/elsewhere: no store here — point --store"):
        verify(lock, DiskStore(tmp_path / "elsewhere"))


def test_a_secret_parameter_of_the_project_config_is_named_too(
    tmp_path: Path, store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    edited = entry("a?session=s3cret-value", BODY)
    write_lock(lock, Lock.from_fetches([edited]))
    assert verify(lock, store) == 0  # not a secret by default
    capsys.readouterr()
    (tmp_path / "fetchproxy.toml").write_text('[fetchproxy]\nsecret-params = ["session"]\n')
    assert verify(lock, store) == 1
    err = capsys.readouterr().err
    assert "fetch[0] url has a secret query parameter (session)" in err
    assert "s3cret-value" not in err


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_body_that_is_not_a_regular_file_is_corrupt_and_checked_at_once(
    tmp_path: Path, store: DiskStore, kind: str
) -> None:
    """A FIFO or a link to /dev/zero under a blob's name made ``lock verify`` hang."""
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([entry("a", BODY), entry("b", OTHER)]))
    path = store.blob_path(digest_bytes(BODY))
    path.chmod(0o644)
    path.unlink()
    make_not_regular(path, kind, body=BODY, elsewhere=tmp_path / "elsewhere")
    checked = run_fetchproxy(
        "lock",
        "verify",
        "--lock",
        str(lock),
        "--store",
        str(store.root),
        timeout=SUBPROCESS_DEADLINE,
    )
    assert checked.returncode == 1
    assert checked.stderr == (
        f"fetchproxy: corrupt: {path}: not a regular file ({KINDS[kind]})\n"
        f"fetchproxy: {lock}: 1 of 2 bodies missing or corrupt\n"
        "fetchproxy: record again to fetch missing bodies; `fetchproxy store verify --repair` "
        "first moves corrupt ones aside\n"
    )
