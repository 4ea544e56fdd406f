"""A hostile build changes nothing outside its run, through ``fetchproxy record/replay -- BUILD``.

The sandbox's own tests (tests/sandbox/) pin each mechanism; these run the product as users do
and try what a hostile build would: load code into the launcher through a request, write the
host's files, the lock and its companions, and reach a host-local service through the record
proxy. Every test runs as root (CI is root) in the root sandbox, some in the user sandbox too.
"""

from __future__ import annotations

import gzip
import http.server
import importlib
import json
import os
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import fetchproxy
from fetchproxy.lock.file import load_lock
from tests.sandbox.conftest import needs_root
from tests.support.cli import run_fetchproxy
from tests.support.origin import Origin, OriginPKI

CURL = 'curl -sS --noproxy "" --proxy "$https_proxy" -o /dev/null -w "%{http_code}\\n"'


def fetchproxy_in(work: Path, *args: str, home: Path | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FETCHPROXY_")}
    env["FETCHPROXY_STORE"] = str(work / "store")
    env["HOME"] = str(home or work / "home")
    done = run_fetchproxy(*args, cwd=work, env=env, test_origins=False, timeout=240)
    return done.returncode, done.stdout, done.stderr


def every_path_build(origin: Origin, *, http2: bool) -> str:
    """A build that makes the engine take every path it has: small, large, redirected and
    content-encoded answers, request bodies in every coding, a git negotiation body, an IDNA
    host, a URL no lock holds, and HTTP/2 when the engine speaks it."""
    url = origin.url
    posts = "\n".join(
        f'{CURL} -H "Content-Encoding: {coding}" --data-binary @body.{coding} {url("/api/echo")}'
        for coding in ("gzip", "deflate", "br", "zstd")
    )
    return "\n".join(
        [
            f"{CURL} {url('/small.txt')}",
            f"{CURL} {url('/large.bin')}",
            f"{CURL} -L {url('/redirect/start')}",
            f"{CURL} {url('/gzip.txt')}",
            f"{CURL} -r 10-19 {url('/small.txt')}",
            posts,
            f'{CURL} -H "Content-Type: application/x-git-upload-pack-request" '
            f"--data-binary @upload-pack.body {url('/repo.git/git-upload-pack')}",
            f"{CURL} https://bücher.example/ || true",
            f"{CURL} {url('/not-in-the-lock')} || true",
            *([f"{CURL} --http2 {url('/small.txt')}"] if http2 else []),
        ]
    )


def write_bodies(work: Path) -> None:
    brotli = importlib.import_module("brotli")
    zstandard = importlib.import_module("zstandard")
    body = b"a request body the key is made of\n" * 40
    (work / "body.gzip").write_bytes(gzip.compress(body))
    (work / "body.deflate").write_bytes(zlib.compress(body))
    (work / "body.br").write_bytes(brotli.compress(body))
    (work / "body.zstd").write_bytes(zstandard.ZstdCompressor().compress(body))
    (work / "upload-pack.body").write_bytes(b"0032want " + b"a" * 40 + b"\n00000009done\n")


@pytest.mark.parametrize("sandbox", ["root", "user"])
def test_no_code_is_loaded_while_the_build_runs(
    tmp_path: Path, origin: Origin, origin_pki: OriginPKI, sandbox: str
) -> None:
    """Every module either engine needs is loaded before the build starts; a load while it
    runs would be refused and reported (fetchproxy.run.imports). Both engines, both sandboxes."""
    needs_root()
    write_bodies(tmp_path)
    (tmp_path / "build.sh").write_text(every_path_build(origin, http2=True))
    common = ("--sandbox", sandbox)
    record = fetchproxy_in(
        tmp_path,
        "record",
        *common,
        "--http2",
        "--allow-origin",
        "127.0.0.1",
        "--upstream-ca",
        str(origin_pki.ca_cert),
        "--",
        "sh",
        "build.sh",
    )
    runs = {"record": record}
    for engine, flags in (("direct", ()), ("mitmproxy", ("--http2",))):
        runs[f"replay ({engine})"] = fetchproxy_in(
            tmp_path, "replay", *common, *flags, "--", "sh", "build.sh"
        )
    for name, (status, _out, err) in runs.items():
        assert "refused to load" not in err, f"{name}: {err}"
        assert "Traceback" not in err, f"{name}: {err}"
        assert status == (0 if name == "record" else 3), f"{name}: {err}"  # the IDNA host
    urls = [f.key.url for f in load_lock(tmp_path / "fetchproxy.lock.toml").fetches]
    assert urls.count(origin.url("/api/echo")) == 1  # one body, in four codings: one key
    assert len(urls) == 9


# ------------------------------------------------------------------------------ the file system


def test_a_build_changes_no_file_outside_its_run(tmp_path: Path) -> None:
    """The host's files, the home, fetchproxy's installation, the store, the lock, its journal
    and its event log are as they were after a build that tried to change them all; what it
    wrote in its working directory stays."""
    needs_root()
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (home / ".bashrc").write_text("# the user's own\n")
    etc = Path("/etc") / f"fetchproxy-test-{uuid.uuid4()}"
    package = Path(fetchproxy.__file__)
    installed = Path(sysconfig.get_paths()["purelib"]) / f"fetchproxy-test-{uuid.uuid4()}.pth"
    lock = work / "fetchproxy.lock.toml"
    log = work / "fetchproxy.lock.log.jsonl"
    journal = work / "fetchproxy.lock.toml.journal"
    store = work / "store"
    first = fetchproxy_in(work, "record", "--", "true", home=home)
    assert first[0] == 0, first[2]
    watched = [lock, log, package, home / ".bashrc"]
    before = {path: path.read_bytes() for path in watched}
    store_before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    targets = [*watched, etc, installed, journal, store / "blake3" / "planted", home / "new"]
    attack = "\n".join(f"echo pwned >> {path} 2>/dev/null" for path in targets)
    attack += f"\nrm -f {lock} {log} 2>/dev/null; mv {lock} {lock}.old 2>/dev/null\n"
    attack += "echo mine > built.txt\n"
    status, _out, err = fetchproxy_in(work, "record", "--keep", "--", "sh", "-c", attack, home=home)
    assert status == 0, err
    assert {path: path.read_bytes() for path in watched} == before
    for path in (etc, installed, home / "new", Path(f"{lock}.old")):
        assert not path.exists(), path
    assert not journal.exists()  # the record ended: its journal went, no planted one came
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == store_before
    assert (work / "built.txt").read_text() == "mine\n"  # its working directory is its own


# ------------------------------------------------------------------------ what record may reach


class _Service(http.server.BaseHTTPRequestHandler):
    """A service only the host's loopback has: it must never hear from a sandboxed build."""

    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.send_header("content-length", "7")
        self.end_headers()
        self.wfile.write(b"secret\n")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib name
        pass


@pytest.fixture
def host_service() -> Iterator[int]:
    _Service.hits = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_record_reaches_no_host_local_service_unless_allowed(
    tmp_path: Path, host_service: int
) -> None:
    needs_root()
    target = f"http://127.0.0.1:{host_service}/x"
    curl = 'curl -sS --noproxy "" -x "$http_proxy" -o /dev/null -w "%{http_code}\\n"'
    build = f"{curl} {target}; {curl} http://169.254.169.254/latest/meta-data/"
    status, out, err = fetchproxy_in(tmp_path, "record", "--", "sh", "-c", build)
    assert status == 0, err
    assert out.split() == ["403", "403"]
    assert _Service.hits == 0
    log = (tmp_path / "fetchproxy.lock.log.jsonl").read_text()
    events = [json.loads(line) for line in log.splitlines()]
    assert [(e["event"], e["reason"]) for e in events] == [("refused", "origin-not-allowed")] * 2
    assert "2 refused by fetchproxy" in err
    assert len(load_lock(tmp_path / "fetchproxy.lock.toml")) == 0

    allowed = fetchproxy_in(
        tmp_path, "record", "--allow-origin", f"127.0.0.1:{host_service}", "--", "sh", "-c", build
    )
    assert allowed[0] == 0, allowed[2]
    assert allowed[1].split() == ["200", "403"]  # the metadata address stays refused: not named
    assert _Service.hits == 1
    assert [f.key.url for f in load_lock(tmp_path / "fetchproxy.lock.toml").fetches] == [target]


@pytest.fixture
def remote_origin(tmp_path: Path) -> Iterator[str]:
    """An HTTP origin on another host: a network namespace of this test's own behind a veth,
    so its address is not one of the host's (removed with everything in it afterwards)."""
    needs_root()
    name = f"fp-test-{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    site.mkdir()
    (site / "file.txt").write_text("from afar\n")
    ip = ["ip"]
    subprocess.run([*ip, "netns", "add", name], check=True)
    server = None
    try:
        subprocess.run(
            [*ip, "link", "add", f"{name[-8:]}h", "type", "veth", "peer", "name", f"{name[-8:]}o"],
            check=True,
        )
        subprocess.run([*ip, "link", "set", f"{name[-8:]}o", "netns", name], check=True)
        subprocess.run([*ip, "addr", "add", "10.237.0.1/30", "dev", f"{name[-8:]}h"], check=True)
        subprocess.run([*ip, "link", "set", f"{name[-8:]}h", "up"], check=True)
        inside = [*ip, "netns", "exec", name]
        subprocess.run(
            [*inside, *ip, "addr", "add", "10.237.0.2/30", "dev", f"{name[-8:]}o"], check=True
        )
        subprocess.run([*inside, *ip, "link", "set", f"{name[-8:]}o", "up"], check=True)
        subprocess.run([*inside, *ip, "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(
            [*inside, sys.executable, "-m", "http.server", "--bind", "10.237.0.2", "8080"],
            cwd=site,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = "http://10.237.0.2:8080"
        deadline = time.monotonic() + 30
        probe = ["curl", "-sf", "-o", "/dev/null", f"{url}/file.txt"]
        while subprocess.run(probe, check=False).returncode:
            assert time.monotonic() < deadline, "the remote origin did not come up"
            time.sleep(0.05)
        yield url
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        subprocess.run([*ip, "netns", "del", name], check=False)  # takes the veth with it
        subprocess.run([*ip, "link", "del", f"{name[-8:]}h"], check=False, capture_output=True)


def test_a_record_without_patterns_reaches_a_remote_origin_and_lists_it(
    tmp_path: Path, remote_origin: str
) -> None:
    """Observe, then enforce: with no pattern, record reaches any origin that is not the host's
    own, and ends with the lines to paste into fetchproxy.toml to allow just those."""
    build = f'curl -sSf --noproxy "" -x "$http_proxy" -o got.txt {remote_origin}/file.txt'
    status, _out, err = fetchproxy_in(tmp_path, "record", "--", "sh", "-c", build)
    assert status == 0, err
    assert (tmp_path / "got.txt").read_text() == "from afar\n"
    command = "fetchproxy config add record.allow 10.237.0.2:8080"
    assert (
        "fetchproxy: reached 1 origin; to reach only these from now on (or use --allow-origin):"
        f"\n  {command}\n"
    ) in err
    (tmp_path / "fetchproxy.toml").write_text("# the project's settings\n")
    added = subprocess.run(
        [sys.executable, "-m", "fetchproxy", *command.split()[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "record.allow += 10.237.0.2:8080" in added.stdout
    assert (tmp_path / "fetchproxy.toml").read_text() == (
        '# the project\'s settings\n\n[record]\nallow = ["10.237.0.2:8080"]\n'
    )
    status, _out, err = fetchproxy_in(tmp_path, "record", "--", "sh", "-c", build)
    assert status == 0, err
    assert "reached" not in err  # enforced now: nothing left to observe
    (tmp_path / "fetchproxy.toml").write_text('[record]\nallow = ["files.example.org"]\n')
    status, _out, err = fetchproxy_in(tmp_path, "record", "--", "sh", "-c", build)
    assert status == 22, err  # curl -f: the 403 of an origin no pattern allows
    assert (
        "10.237.0.2:8080 is not among the allowed origins"
        in (tmp_path / "fetchproxy.lock.log.jsonl").read_text()
    )
