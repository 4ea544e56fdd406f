"""The remote gc policy: keep what the locks need, delete the rest only past the grace period."""

from __future__ import annotations

import pytest

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.errors import FetchproxyError
from fetchproxy.store.remote import RemoteObject
from fetchproxy.store.remote_gc import RemoteGcRefused, plan_remote_gc

NOW = 1_800_000_000.0
DAY = 86_400.0


def obj(name: str, *, age: float, size: int = 10) -> RemoteObject:
    digest = digest_bytes(name.encode())
    return RemoteObject(
        key=f"p/blake3/{digest[7:]}", digest=digest, size=size, last_modified_epoch=NOW - age
    )


def test_keeps_what_locks_need_and_deletes_old_strays() -> None:
    needed_old = obj("needed-old", age=400 * DAY)
    needed_new = obj("needed-new", age=10)
    stray_old = obj("stray-old", age=8 * DAY, size=100)
    stray_young = obj("stray-young", age=DAY)
    foreign = RemoteObject(key="p/blake3/README", digest=None, size=5, last_modified_epoch=0.0)
    keep = {d for d in (needed_old.digest, needed_new.digest) if d is not None}
    absent = digest_bytes(b"never pushed")
    plan = plan_remote_gc(
        [needed_old, needed_new, stray_old, stray_young, foreign],
        keep=keep | {absent},
        now=NOW,
        grace=7 * DAY,
    )
    assert plan.delete == (stray_old,)
    assert plan.bytes_freed == 100
    assert plan.needed == 2
    assert plan.young == (stray_young,)
    assert plan.foreign == (foreign,)
    assert plan.absent == (absent,)


def test_the_grace_boundary() -> None:
    at = obj("at", age=7 * DAY)
    past = obj("past", age=7 * DAY + 1)
    plan = plan_remote_gc([at, past], keep={digest_bytes(b"x")}, now=NOW, grace=7 * DAY)
    assert plan.delete == (past,)
    assert plan.young == (at,)


def test_never_by_age_alone() -> None:
    with pytest.raises(RemoteGcRefused, match="refusing to delete by age alone") as caught:
        plan_remote_gc([obj("a", age=1000 * DAY)], keep=set[Digest](), now=NOW, grace=DAY)
    assert isinstance(caught.value, FetchproxyError)
    assert isinstance(caught.value, ValueError)
    assert "--keep-lock" in str(caught.value)


def test_a_negative_grace_is_refused() -> None:
    with pytest.raises(RemoteGcRefused, match="must not be negative"):
        plan_remote_gc([], keep={digest_bytes(b"x")}, now=NOW, grace=-1)


def test_zero_grace_deletes_every_stray_but_nothing_needed() -> None:
    needed = obj("needed", age=0)
    stray = obj("stray", age=0.5)
    assert needed.digest is not None
    plan = plan_remote_gc([needed, stray], keep={needed.digest}, now=NOW, grace=0)
    assert plan.delete == (stray,)
    assert plan.needed == 1
