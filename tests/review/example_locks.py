"""Locks the review tests share with each other and with the worked examples of the docs
(:mod:`tests.provenance.docexamples`): :data:`OLD` and :data:`NEW`, the two sides of a diff in
package words, made of :func:`file` entries; and :func:`merge_sides`, the three sides of a
merge with one conflict, made of :func:`entry` entries, as :func:`conflicted` renders it."""

from __future__ import annotations

import dataclasses

from fetchproxy.digest import digest_bytes
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.review.merge import merge_locks, render_merge
from tests.support.locks import make_fetch

NPM_ACCEPT = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
PYPI = "https://files.pythonhosted.org/packages"


def file(url: str, body: bytes, **fields: object) -> Fetch:
    values: dict[str, object] = {"status": 200, "digest": digest_bytes(body), "size": len(body)}
    values.update(fields)
    return make_fetch(url=url, **values)


PACKUMENT_1 = file("https://registry.npmjs.org/acc-right", b"{v1}", accept=NPM_ACCEPT)
ACC_1 = file("https://registry.npmjs.org/acc-right/-/acc-right-1.0.0.tgz", b"acc 1.0.0")
ACC_2 = file("https://registry.npmjs.org/acc-right/-/acc-right-1.1.0.tgz", b"acc 1.1.0")
IDNA_INDEX = file("https://pypi.org/simple/idna/", b"<a>3.9</a>", content_type="text/html")
IDNA_39 = file(f"{PYPI}/aa/idna-3.9-py3-none-any.whl", b"idna 3.9")
IDNA_310 = file(f"{PYPI}/bb/idna-3.10-py3-none-any.whl", b"idna 3.10")
SIX = file(f"{PYPI}/cc/six-1.16.0-py2.py3-none-any.whl", b"six")
FOO = file(f"{PYPI}/dd/foo-1.0-py3-none-any.whl", b"foo 1.0")
FOO_MIRROR = file("https://mirror.example.net/pypi/foo-1.0-py3-none-any.whl", b"foo 1.0, re-tagged")
BAR = file(f"{PYPI}/ee/bar-2.0-py3-none-any.whl", b"bar 2.0")
BAR_MOVED = file("https://mirror.example.net/pypi/bar-2.0-py3-none-any.whl", b"bar 2.0")
BAR_312 = file(f"{PYPI}/ee/bar-2.0-cp312-cp312-manylinux_2_17_x86_64.whl", b"bar 2.0 cp312")
TOOL = file("https://example.org/tools/install.sh", b"#!/bin/sh\n")

OLD = Lock.from_fetches([PACKUMENT_1, ACC_1, IDNA_INDEX, IDNA_39, FOO, BAR, TOOL])
NEW = Lock.from_fetches(
    [
        dataclasses.replace(PACKUMENT_1, digest=digest_bytes(b"{v1, v2}"), size=8),
        ACC_2,
        dataclasses.replace(IDNA_INDEX, digest=digest_bytes(b"<a>3.10</a>"), size=11),
        IDNA_310,
        SIX,
        FOO_MIRROR,
        BAR_MOVED,
        BAR_312,
        dataclasses.replace(TOOL, content_type="text/x-sh"),
    ]
)


def entry(path: str, body: bytes = b"v1", **fields: object) -> Fetch:
    values: dict[str, object] = {"status": 200, "digest": digest_bytes(body), "size": len(body)}
    values.update(fields)
    return make_fetch(url=f"https://example.org/{path}", **values)


A, B, C, D = entry("a"), entry("b"), entry("c"), entry("d")


B2 = entry("b", b"theirs, too")


def merge_sides() -> tuple[Lock, Lock, Lock]:
    """Base, ours, theirs: a gets two answers; ours removed b, theirs changed it; both kept c;
    ours added d."""
    return (
        Lock.from_fetches([A, B, C]),
        Lock.from_fetches([entry("a", b"ours"), C, D]),
        Lock.from_fetches([entry("a", b"theirs"), B2, C]),
    )


def conflicted() -> str:
    return render_merge(merge_locks(*merge_sides()))
