"""A bare git repository served over smart HTTP by an HTTPS origin (:func:`git_origin`): branches
enough that a clone's request body exceeds 1 KiB and git gzips it, and a server that asks
clients for a session id."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.real_origins import HTTPSOrigin, fast_import_branches, git_env, git_http_backend

BRANCHES = 40  # a clone then wants 40 refs: its request body exceeds 1 KiB and git gzips it


@pytest.fixture
def git_origin(tmp_path: Path) -> Iterator[HTTPSOrigin]:
    root = tmp_path / "git-origin"
    fast_import_branches(root / "repo.git", BRANCHES)
    subprocess.run(  # the server asks clients for a session id, which differs on every run
        ["git", "-C", str(root / "repo.git"), "config", "transfer.advertiseSID", "true"],
        env=git_env(root),
        check=True,
    )
    with HTTPSOrigin(tmp_path / "git-origin-tls", git_http_backend(root)) as origin:
        yield origin
