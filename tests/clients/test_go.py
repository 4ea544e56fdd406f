"""Go through the real sandbox, against a module proxy of the test's own.

The origin speaks the module proxy protocol (``GOPROXY``, as proxy.golang.org does):
``MODULE/@v/VERSION.info``, ``.mod`` and ``.zip`` (``@v/list`` only for a query such as
``@latest``, which this build does not make), the module path case-encoded (``!f`` for ``F``;
Go sends the ``!`` percent-encoded, and the proxy decodes it). A module's zip holds its files
under ``MODULE@VERSION/``, which Go checks. The build is a tiny module requiring one module
that requires another: ``go mod download``, ``go build``, and the
program run, with ``GOPATH``, ``GOMODCACHE`` and ``GOCACHE`` fresh under the working directory.

What the user sets is only ``GOPROXY`` (to a name: Go never uses a proxy for a loopback
address, so the recording proxy resolves the name by :func:`resolving`), and, because these
modules are no checksum database's, ``GONOSUMDB`` for them with ``GOFLAGS=-mod=mod`` so that
``go`` writes the go.sum the project does not have yet. Go trusts the run through
``SSL_CERT_FILE`` and finds the proxy through ``HTTPS_PROXY``, both set by fetchproxy.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import zipfile
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.clients.support.builds import (
    LOCK,
    assert_replay_served,
    fetchproxy,
    lock_entries,
    prepare_work,
    resolving,
)
from tests.support.real_origins import HTTPSOrigin, OriginReply, OriginRequest, Respond
from tests.support.tools import require

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

GOPROXY_HOST = "goproxy.fetchproxy.test"
MODULES = (
    # (module path, version, go.mod's require lines, the package's source)
    ("example.com/FpWord", "v0.2.0", "", 'package fpword\n\nconst Word = "hello, fetched"\n'),
    (
        "example.com/fphello",
        "v1.0.0",
        "\nrequire example.com/FpWord v0.2.0\n",
        'package fphello\n\nimport "example.com/FpWord"\n\n'
        "func Greeting() string { return fpword.Word }\n",
    ),
)
APP_GO_MOD = """module app

go 1.19

require example.com/fphello v1.0.0

require example.com/FpWord v0.2.0 // indirect
"""
APP_MAIN = """package main

import (
\t"fmt"

\t"example.com/fphello"
)

func main() { fmt.Println(fphello.Greeting()) }
"""
GO_BUILD = "cd app && go mod download && go build -o app . && ./app > ../out.txt"


def escaped(path: str) -> str:
    """A module path as the protocol spells it: each upper-case letter as ``!`` and its lower."""
    return "".join(f"!{c.lower()}" if c.isupper() else c for c in path)


def module_zip(module: str, version: str, files: dict[str, str]) -> bytes:
    """A module zip: every file under ``MODULE@VERSION/``, with the same bytes every run."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in sorted(files.items()):
            info = zipfile.ZipInfo(f"{module}@{version}/{name}", date_time=(2023, 11, 14, 0, 0, 0))
            archive.writestr(info, text)
    return buffer.getvalue()


def module_proxy_files() -> dict[str, bytes]:
    """The proxy's files by (decoded) path."""
    files = {}
    for module, version, requires, source in MODULES:
        go_mod = f"module {module}\n\ngo 1.19\n{requires}"
        base = f"/{escaped(module)}/@v"
        info = {"Version": version, "Time": "2023-11-14T22:13:20Z"}  # compact, as Go keeps it
        files[f"{base}/{version}.info"] = json.dumps(info, separators=(",", ":")).encode()
        files[f"{base}/{version}.mod"] = go_mod.encode()
        files[f"{base}/{version}.zip"] = module_zip(
            module, version, {"go.mod": go_mod, "lib.go": source}
        )
    return files


def module_proxy(files: dict[str, bytes]) -> Respond:
    """GET answers from ``files`` by the decoded path, as a module proxy gives them; anything
    else is the 404 a module proxy answers for what it does not have."""

    def respond(request: OriginRequest) -> OriginReply:
        body = files.get(unquote(request.target)) if request.method == "GET" else None
        if body is None:
            return OriginReply(404, (("Content-Type", "text/plain"),), b"not found\n")
        kind = "application/zip" if request.target.endswith(".zip") else "text/plain"
        return OriginReply(200, (("Content-Type", kind),), body)

    return respond


def go_work(tmp_path: Path) -> Path:
    work = prepare_work(tmp_path)
    (work / "app").mkdir()
    (work / "app" / "go.mod").write_text(APP_GO_MOD)
    (work / "app" / "main.go").write_text(APP_MAIN)
    return work


def go_env(work: Path, port: str) -> dict[str, str]:
    return {
        "GOPROXY": f"https://{GOPROXY_HOST}:{port}",
        "GONOSUMDB": "example.com",  # these modules only: others still checked by sum.golang.org
        "GOFLAGS": "-mod=mod",  # go writes the go.sum the project does not have yet
        "GOPATH": str(work / "gopath"),
        "GOMODCACHE": str(work / "gopath" / "pkg" / "mod"),
        "GOCACHE": str(work / "gocache"),
    }


def downloaded(work: Path) -> dict[str, str]:
    """The module cache's downloads (``.info``, ``.mod``, ``.zip``), by path: their SHA-256."""
    cache = work / "gopath" / "pkg" / "mod" / "cache" / "download"
    return {
        str(p.relative_to(cache)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(cache.rglob("*"))
        if p.suffix in (".info", ".mod", ".zip")
    }


def test_go_mod_download_and_build_replay_with_the_origin_stopped(tmp_path: Path) -> None:
    require("go", install="apt-get install golang-go")
    files = module_proxy_files()
    expected = {path.lstrip("/"): hashlib.sha256(body).hexdigest() for path, body in files.items()}
    store = tmp_path / "store"
    with HTTPSOrigin(tmp_path / "origin", module_proxy(files), names=[GOPROXY_HOST]) as origin:
        port = origin.url.rpartition(":")[2]
        work = go_work(tmp_path / "record")
        recorded = fetchproxy(
            work, store, "record", "--upstream-ca", origin.ca_path,
            "--allow-origin", GOPROXY_HOST, "--", "sh", "-c", GO_BUILD,
            env=go_env(work, port), prefix=resolving(tmp_path, GOPROXY_HOST),
        )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert (work / "out.txt").read_text() == "hello, fetched\n"
    fetched = sorted(unquote(r.target) for r in origin.requests)
    assert fetched == sorted(files)
    assert downloaded(work) == expected
    assert lock_entries(work) == len(fetched)
    go_sum = (work / "app" / "go.sum").read_text()
    assert go_sum.count(" h1:") == 4  # each module's zip and go.mod

    again = go_work(tmp_path / "replay")
    shutil.copy(work / LOCK, again / LOCK)
    replayed = fetchproxy(
        again, store, "replay", "--exact", "--", "sh", "-c", GO_BUILD, env=go_env(again, port)
    )
    assert_replay_served(replayed, again, requests=len(fetched))
    assert (again / "out.txt").read_text() == "hello, fetched\n"
    assert downloaded(again) == expected
    assert (again / "app" / "go.sum").read_text() == go_sum
