"""cargo through the real sandbox, against a sparse registry of the test's own.

The registry is what crates.io's sparse index is (RFC 2789): ``config.json`` says where the
``.crate`` files are (``dl``), each crate has one index file at the path cargo derives from its
name, one JSON line per version whose ``cksum`` is the SHA-256 of the ``.crate``, and a
``.crate`` is a gzipped tar of ``NAME-VERSION/``. A project depends on one crate that depends on
another; ``$CARGO_HOME/config.toml`` replaces crates-io with the registry (what a user with a
registry of their own sets; for crates.io itself nothing is set). The build is ``cargo fetch``
with a fresh ``CARGO_HOME``: resolution, the index, the downloads, no compiling.

Two cargos, because their index requests differ: rustup's (1.68 or later; the machine's is 1.95)
asks the index with ``Accept: text/plain``, Debian's 1.65 with ``*/*`` (and needs
``RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_SPARSE_REGISTRY=true``: sparse registries were unstable
before 1.68). Both trust the run through ``CARGO_HTTP_CAINFO``, the only CA variable 1.65 reads.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.support.builds import (
    LOCK,
    assert_replay_served,
    events,
    fetchproxy,
    lock_entries,
    prepare_work,
)
from tests.support.real_origins import HTTPSOrigin, static_site
from tests.support.tools import missing_tool

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

CARGO_HOME = "cargo-home"
DEBIAN_CARGO = Path("/usr/bin/cargo")


@dataclass(frozen=True)
class Crate:
    name: str
    version: str
    deps: tuple[tuple[str, str], ...] = ()  # (name, version requirement)

    def archive(self) -> bytes:
        """The ``.crate``: a gzipped tar of ``NAME-VERSION/`` with the same bytes every run."""
        deps = "".join(f'{name} = "{req}"\n' for name, req in self.deps)
        manifest = (
            f'[package]\nname = "{self.name}"\nversion = "{self.version}"\nedition = "2021"\n'
            f"\n[dependencies]\n{deps}"
        )
        files = {"Cargo.toml": manifest, "src/lib.rs": "pub fn hello() {}\n"}
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for path, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(f"{self.name}-{self.version}/{path}")
                info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
                tar.addfile(info, io.BytesIO(data))
        return gzip.compress(raw.getvalue(), mtime=0)

    def index_line(self) -> bytes:
        deps: list[dict[str, object]] = [
            {
                "name": name,
                "req": req,
                "features": [],
                "optional": False,
                "default_features": True,
                "target": None,
                "kind": "normal",
            }
            for name, req in self.deps
        ]
        entry = {
            "name": self.name,
            "vers": self.version,
            "deps": deps,
            "cksum": hashlib.sha256(self.archive()).hexdigest(),
            "features": {},
            "yanked": False,
        }
        return json.dumps(entry).encode() + b"\n"


CRATES = (Crate("fphello", "1.0.0", deps=(("fpw", "0.2"),)), Crate("fpw", "0.2.0"))
"""Two crates, at two kinds of index path: ``fp/he/fphello`` (four letters or more) and
``3/f/fpw`` (three)."""


def index_path(name: str) -> str:
    if len(name) <= 2:
        return f"{len(name)}/{name}"
    if len(name) == 3:
        return f"3/{name[0]}/{name}"
    return f"{name[:2]}/{name[2:4]}/{name}"


def sparse_registry(url: str) -> dict[str, tuple[str, bytes]]:
    """The registry's files, served at ``url`` (``/index/`` and ``/crates/``)."""
    config = json.dumps({"dl": f"{url}/crates"}).encode()  # cargo appends /NAME/VERSION/download
    files = {"/index/config.json": ("application/json", config)}
    for crate in CRATES:
        files[f"/index/{index_path(crate.name)}"] = ("text/plain", crate.index_line())
        path = f"/crates/{crate.name}/{crate.version}/download"
        files[path] = ("application/x-tar", crate.archive())
    return files


@dataclass(frozen=True)
class Cargo:
    """One cargo and the environment it needs beyond what fetchproxy sets."""

    path: Path
    env: Mapping[str, str]


def rustup_cargo() -> Cargo:
    """rustup's cargo, run through rustup's proxy binary with the machine's toolchains (the
    build's ``HOME`` is its own, so rustup is told where they are) and no auto-install: the
    proxy must find the toolchain installed, and reach no network."""
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    rustup_home = Path(os.environ.get("RUSTUP_HOME", Path.home() / ".rustup"))
    cargo, rustc = home / "bin" / "cargo", home / "bin" / "rustc"
    if not (cargo.exists() and rustc.exists() and rustup_home.is_dir()):
        missing_tool(f"rustup's cargo not found at {cargo}: install rustup's stable toolchain")
    env = {"RUSTUP_HOME": str(rustup_home), "RUSTUP_AUTO_INSTALL": "0", "RUSTC": str(rustc)}
    return Cargo(cargo, env)


def debian_cargo() -> Cargo:
    """Debian 12's cargo 1.65, with its own rustc; sparse registries are unstable before 1.68."""
    if not DEBIAN_CARGO.exists():
        missing_tool(f"{DEBIAN_CARGO} not found: apt-get install cargo")
    env = {
        "RUSTC": str(DEBIAN_CARGO.parent / "rustc"),
        "RUSTC_BOOTSTRAP": "1",
        "CARGO_UNSTABLE_SPARSE_REGISTRY": "true",
    }
    return Cargo(DEBIAN_CARGO, env)


def cargo_work(tmp_path: Path, origin_url: str) -> Path:
    """A project depending on ``fphello``, and a fresh ``CARGO_HOME`` whose config.toml
    replaces crates-io with the registry."""
    work = prepare_work(tmp_path)
    (work / "app" / "src").mkdir(parents=True)
    (work / "app" / "Cargo.toml").write_text(
        '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n'
        '[dependencies]\nfphello = "1.0"\n'
    )
    (work / "app" / "src" / "main.rs").write_text("fn main() {\n    fphello::hello();\n}\n")
    (work / CARGO_HOME).mkdir()
    (work / CARGO_HOME / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "test-registry"\n\n'
        f'[source.test-registry]\nregistry = "sparse+{origin_url}/index/"\n'
    )
    return work


def cargo_fetch(
    cargo: Cargo, work: Path, store: Path, *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """``fetchproxy ARGS -- cargo fetch`` in ``work``'s project."""
    return fetchproxy(
        work, store, *args, "--", "sh", "-c", 'cd app && "$0" fetch', cargo.path,
        env={
            **cargo.env,
            "CARGO_HOME": str(work / CARGO_HOME),
            "CARGO_TERM_COLOR": "never",
        },
    )  # fmt: skip


def downloaded(work: Path) -> dict[str, str]:
    """The ``.crate`` files in ``CARGO_HOME``'s cache (its directory is named by a hash that
    differs between cargo versions), by name: their SHA-256."""
    cache = work / CARGO_HOME / "registry" / "cache"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in cache.rglob("*.crate")}


EXPECTED = {f"{c.name}-{c.version}.crate": hashlib.sha256(c.archive()).hexdigest() for c in CRATES}


def accepts(lock: str) -> list[str]:
    return re.findall(r'^accept = "([^"]*)"$', lock, re.MULTILINE)


@pytest.fixture
def cargos() -> tuple[Cargo, Cargo]:
    return rustup_cargo(), debian_cargo()


def test_cargo_records_and_replays_and_an_older_cargo_is_told_why_it_is_refused(
    tmp_path: Path, cargos: tuple[Cargo, Cargo]
) -> None:
    """rustup's cargo records and replays ``--exact``; Debian's 1.65 asks the index with another
    ``Accept``, and the refusal says that this is the only difference and what to do."""
    new, old = cargos
    store = tmp_path / "store"
    files: dict[str, tuple[str, bytes]] = {}
    with HTTPSOrigin(tmp_path / "origin", static_site(files)) as origin:
        files.update(sparse_registry(origin.url))
        work = cargo_work(tmp_path / "record", origin.url)
        recorded = cargo_fetch(new, work, store, "record", "--upstream-ca", origin.ca_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert sorted(r.target for r in origin.requests) == sorted(files)
    assert downloaded(work) == EXPECTED
    lock = (work / LOCK).read_text()
    assert lock_entries(work) == len(files)
    assert accepts(lock) == ["text/plain"] * 3  # config.json and the two index files
    assert set(re.findall(r'^url = "(https://[^/"]+)/', lock, re.MULTILINE)) == {origin.url}
    resolved = (work / "app" / "Cargo.lock").read_text()

    again = cargo_work(tmp_path / "replay", origin.url)
    shutil.copy(work / LOCK, again / LOCK)
    replayed = cargo_fetch(new, again, store, "replay", "--exact")
    assert_replay_served(replayed, again, requests=len(files))
    assert downloaded(again) == EXPECTED
    assert (again / "app" / "Cargo.lock").read_text() == resolved

    older = cargo_work(tmp_path / "older", origin.url)
    shutil.copy(work / LOCK, older / LOCK)
    refused = cargo_fetch(old, older, store, "replay")
    assert refused.returncode != 0
    assert "403" in refused.stderr  # cargo's own words: the status it got
    url = f"{origin.url}/index/config.json"
    assert (
        f'fetchproxy:     the lock holds GET {url} with accept = "text/plain", and this request '
        "has no Accept (or */*): the only difference is the Accept header"
    ) in refused.stderr
    host = origin.url.removeprefix("https://")
    hint = f"`fetchproxy config add fetchproxy.accept-selects-nothing {host}` and record again"
    assert re.sub(r"\s+", " ", hint) in re.sub(r"\s+", " ", refused.stderr)
    refusals = [e for e in events(older) if e["event"] == "refused"]
    assert [(e["key"], e["nearest"]) for e in refusals] == [
        ({"method": "GET", "url": url}, {"method": "GET", "url": url, "accept": "text/plain"})
    ]  # cargo stops at the first refusal
    assert hint in str(refusals[0]["hint"])
    assert downloaded(older) == {}


def test_one_lock_serves_both_cargos_where_accept_selects_nothing(
    tmp_path: Path, cargos: tuple[Cargo, Cargo]
) -> None:
    """With the registry's host in ``[fetchproxy] accept-selects-nothing`` (the command the
    refusal names, run before recording), a lock recorded by rustup's cargo replays ``--exact``
    with it and with Debian's 1.65."""
    new, old = cargos
    store = tmp_path / "store"
    files: dict[str, tuple[str, bytes]] = {}
    with HTTPSOrigin(tmp_path / "origin", static_site(files)) as origin:
        files.update(sparse_registry(origin.url))
        work = cargo_work(tmp_path / "record", origin.url)
        host = origin.url.removeprefix("https://")
        added = fetchproxy(work, store, "config", "add", "fetchproxy.accept-selects-nothing", host)
        assert added.returncode == 0, added.stdout + added.stderr
        recorded = cargo_fetch(new, work, store, "record", "--upstream-ca", origin.ca_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert downloaded(work) == EXPECTED
    assert accepts((work / LOCK).read_text()) == ["*"] * len(files)  # the whole host

    for name, cargo in (("new", new), ("old", old)):
        again = cargo_work(tmp_path / name, origin.url)
        shutil.copy(work / LOCK, again / LOCK)
        shutil.copy(work / "fetchproxy.toml", again / "fetchproxy.toml")
        replayed = cargo_fetch(cargo, again, store, "replay", "--exact")
        assert_replay_served(replayed, again, requests=len(files))
        assert downloaded(again) == EXPECTED, name
