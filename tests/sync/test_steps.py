"""The remote's steps in a run cost nothing when no blob must move (a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.store import DiskStore


def test_a_replay_with_everything_local_loads_no_remote_client(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    digest = store.put(b"body")
    key = RequestKey(method="GET", url="https://files.example.org/f")
    write_lock(tmp_path / "fetchproxy.lock.toml", Lock.from_fetches(
        [Fetch(key=key, status=200, digest=digest, size=4)]
    ))  # fmt: skip
    program = f"""
import sys
from pathlib import Path
from fetchproxy.ca import generate_ca
from fetchproxy.run.engines import open_run
from fetchproxy.run.settings import ProxySettings
from fetchproxy.store import DiskStore
from fetchproxy.store.remote_url import parse_remote_url

root = Path({str(tmp_path)!r})
generate_ca("test").write(root / "ca")
settings = ProxySettings(
    mode="replay", lock=root / "fetchproxy.lock.toml", store=DiskStore(root / "store"),
    confdir=root / "ca", log=root / "events.jsonl", remote=parse_remote_url("s3://some-bucket/p"),
)
run = open_run(settings)
run.book.close()
heavy = ("botocore", "urllib3", "fetchproxy.store.remote", "fetchproxy.store.remote_client",
         "fetchproxy.store.remote_http", "fetchproxy.store.transfer", "fetchproxy.sync.remote")
loaded = sorted(m for m in sys.modules if m in heavy or m.startswith(("botocore.", "urllib3.")))
assert loaded == [], loaded
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
