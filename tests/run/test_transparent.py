"""``fetchproxy record/replay --intercept transparent``: tools that ignore the proxy variables.

Real clients in the root sandbox with every proxy variable removed: Node's ``fetch`` and
``https.get``, ``curl --noproxy '*'``, Python's urllib with no proxy handler, ``dig`` asking
8.8.8.8 itself. The origins listen on 127.0.0.30 under names (``files.example.test``) that only
the launcher can resolve: fetchproxy runs in a mount namespace of the test's own whose
/etc/hosts maps them (the build's /etc/hosts has only localhost, so every name goes to the
DNS stub). Recorded, then replayed by both engines with the origins stopped, byte for byte.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fetchproxy.lock.file import load_lock
from tests.sandbox.conftest import needs_root
from tests.support.origin import SMALL, Origin, make_pki, standard_site

ADDRESS = "127.0.0.30"
NAME = "files.example.test"
HOSTS = f"127.0.0.1 localhost\n{ADDRESS} {NAME} api.example.test\n"
PLAIN_PORT = 8080
PLAIN = b"plain over http\n"
NO_PROXY_VARIABLES = (
    "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY "
    "npm_config_proxy npm_config_https_proxy no_proxy NO_PROXY NODE_USE_ENV_PROXY\n"
)
NODE_FETCH = (
    f'fetch("https://{NAME}/small.txt").then(r => r.text())'
    ".then(t => process.stdout.write(t)).catch(e => { console.error(e); process.exit(1) })"
)
NODE_GET = (
    f'require("https").get("https://{NAME}/small.txt", r => r.pipe(process.stdout))'
    '.on("error", e => { console.error(e); process.exit(1) })'
)
PYTHON = (
    "import sys, urllib.request as u; "
    "o = u.build_opener(u.ProxyHandler({})); "
    f'sys.stdout.buffer.write(o.open("https://{NAME}/small.txt").read())'
)
BUILD = NO_PROXY_VARIABLES + "\n".join(
    [
        "set -e",
        "mkdir -p out",
        f"node -e '{NODE_FETCH}' > out/node-fetch.txt",
        f"node -e '{NODE_GET}' > out/node-get.txt",
        f"curl -sSf --noproxy '*' https://{NAME}/small.txt -o out/curl.txt",
        f"curl -sSf --noproxy '*' http://{NAME}:{PLAIN_PORT}/plain.txt -o out/plain.txt",
        f"python3 -I -c '{PYTHON}' > out/python.txt",
        "dig +short +time=2 +tries=1 @8.8.8.8 pypi.org > out/dig.txt",
        "dig +short +tcp +time=2 +tries=1 @8.8.8.8 AAAA pypi.org > out/dig-aaaa.txt",
        "env | grep -i _proxy= > out/proxy-variables.txt || true",
    ]
)


class _Plain(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.send_header("content-length", str(len(PLAIN)))
        self.end_headers()
        self.wfile.write(PLAIN)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib name
        pass


class Origins:
    """HTTPS on 127.0.0.30:443 (named files.example.test) and plain HTTP on :8080."""

    def __init__(self, directory: Path) -> None:
        self.pki = make_pki(directory, [NAME, "api.example.test"])
        self.https = Origin(standard_site(), self.pki, address=(ADDRESS, 443), name=NAME)
        _Plain.hits = 0
        self.plain = http.server.ThreadingHTTPServer((ADDRESS, PLAIN_PORT), _Plain)
        self._thread = threading.Thread(target=self.plain.serve_forever, daemon=True)

    def __enter__(self) -> Origins:
        self.https.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.plain.shutdown()
        self.plain.server_close()
        self._thread.join()
        self.https.close()

    @property
    def hits(self) -> int:
        return len(self.https.requests) + _Plain.hits


def fetchproxy_named(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m fetchproxy ARGS`` in a mount namespace whose /etc/hosts names the origins
    (private to that process: the host's own /etc/hosts is not touched)."""
    hosts = work / "launcher-hosts"
    hosts.write_text(HOSTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FETCHPROXY_")}
    env["FETCHPROXY_STORE"] = str(work / "store")
    env["HOME"] = str(work / "home")
    mount = 'mount --bind "$0" /etc/hosts && exec "$@"'
    launcher = ["unshare", "-m", "sh", "-c", mount, str(hosts)]
    return subprocess.run(
        [*launcher, sys.executable, "-m", "fetchproxy", *args],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def record_args(origins: Origins) -> tuple[str, ...]:
    return (
        "record",
        "--intercept",
        "transparent",
        "--allow-origin",
        ADDRESS,
        "--allow-origin",
        NAME,
        "--upstream-ca",
        str(origins.pki.ca_cert),
    )


def outputs(work: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((work / "out").iterdir())}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    needs_root()
    (tmp_path / "home").mkdir()
    (tmp_path / "build.sh").write_text(BUILD)
    return tmp_path


def test_clients_that_ignore_the_proxy_record_and_replay_with_the_origins_stopped(
    work: Path,
) -> None:
    with Origins(work / "pki") as origins:
        recorded = fetchproxy_named(work, *record_args(origins), "--", "sh", "build.sh")
        assert recorded.returncode == 0, recorded.stderr
        assert "refused to load" not in recorded.stderr
        assert origins.hits == 5  # node twice, curl twice, python: each reached the origin
    got = outputs(work)
    for client in ("node-fetch.txt", "node-get.txt", "curl.txt", "python.txt"):
        assert got[client] == SMALL, client
    assert got["plain.txt"] == PLAIN
    assert got["dig.txt"].decode().split() == ["198.18.0.2"]  # the stub, not 8.8.8.8
    assert got["dig-aaaa.txt"] == b""  # no AAAA: clients use IPv4 at once
    assert got["proxy-variables.txt"] == b""
    lock = load_lock(work / "fetchproxy.lock.toml")
    assert sorted(f.key.url for f in lock.fetches) == [
        f"http://{NAME}:{PLAIN_PORT}/plain.txt",
        f"https://{NAME}/small.txt",
    ]  # keyed by name, never by a synthetic address
    assert "198.1" not in (work / "fetchproxy.lock.toml").read_text()
    for engine, flags in (("direct", ()), ("mitmproxy", ("--http2",))):
        for path in (work / "out").iterdir():
            path.unlink()
        replayed = fetchproxy_named(
            work, "replay", "--intercept", "transparent", "--exact", *flags, "--", "sh", "build.sh"
        )
        assert replayed.returncode == 0, f"{engine}: {replayed.stderr}"
        assert "refused to load" not in replayed.stderr, engine
        assert "served 5 fetches" in replayed.stderr, engine
        assert "refused 0" in replayed.stderr, engine
        assert outputs(work) == got, engine


UNNAMED = "\n".join(
    [
        "import json, socket",
        "def ask(address, port, request):",
        "    s = socket.create_connection((address, port), timeout=5)",
        "    s.sendall(request)",
        "    data = b''",
        "    while chunk := s.recv(65536):",
        "        data += chunk",
        "    return data.split(b' ', 2)[1].decode() if data else 'closed'",
        f"named = socket.gethostbyname('{NAME}')",
        "print(json.dumps([",
        "    ask(named, 80, b'GET /x HTTP/1.1\\r\\nConnection: close\\r\\n\\r\\n'),",
        "    ask('198.19.255.254', 80, b'GET /x HTTP/1.1\\r\\nHost: a.test\\r\\n"
        "Connection: close\\r\\n\\r\\n'),",
        "    ask(named, 80, b'GET /x HTTP/1.1\\r\\nHost: api.example.test\\r\\n"
        "Connection: close\\r\\n\\r\\n'),",
        "]))",
    ]
)


@pytest.mark.parametrize("mode", ["record", "replay", "replay-mitmproxy"])
def test_a_connection_that_names_no_server_is_refused_and_logged(work: Path, mode: str) -> None:
    """No Host to a name the build resolved, a synthetic address the stub never handed out,
    a Host naming another server than the one resolved: refused, and nothing is dialled."""
    (work / "unnamed.py").write_text(UNNAMED)
    with Origins(work / "pki") as origins:
        if mode == "record":
            args: tuple[str, ...] = record_args(origins)
        else:
            (work / "fetchproxy.lock.toml").write_text("version = 1\n")
            flags = ("--http2",) if mode == "replay-mitmproxy" else ()
            args = ("replay", "--intercept", "transparent", *flags)
        done = fetchproxy_named(work, *args, "--", "python3", "-I", "unnamed.py")
        assert origins.hits == 0
    assert json.loads(done.stdout) == ["421", "421", "400"], done.stderr
    log = (work / "fetchproxy.lock.log.jsonl").read_text().splitlines()
    events = [e for e in map(json.loads, log) if e["event"] == "refused"]
    reasons = [e["reason"] for e in events]
    assert reasons == ["no-server-name", "no-server-name", "host-mismatch"], events
    errors = " ".join(str(e.get("error")) for e in events)
    assert f"intercepted on its way to {NAME}:80, and names no server" in errors
    assert "198.19.255.254:80, an address the sandbox's DNS stub did not hand out" in errors


def test_transparent_needs_the_root_sandbox(work: Path) -> None:
    done = fetchproxy_named(
        work, "record", "--intercept", "transparent", "--no-sandbox", "--", "true"
    )
    assert done.returncode == 2, done.stderr
    assert "needs the root sandbox" in done.stderr
    user = fetchproxy_named(
        work, "record", "--intercept", "transparent", "--sandbox", "user", "--", "true"
    )
    assert user.returncode != 0
    assert "--intercept transparent needs the root sandbox" in user.stderr
