"""Pins fetchproxy.gitbody: upload-pack bodies key on what selects the response."""

from __future__ import annotations

import gzip
import http.server
import subprocess
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchproxy.keys import gitbody
from fetchproxy.keys.gitbody import canonical_body
from tests.support.real_origins import OriginRequest, git_env, git_http_backend

PROPERTIES = settings(derandomize=True, max_examples=200, deadline=None)
PATH = "/org/repo.git/git-upload-pack"
TYPE = "application/x-git-upload-pack-request"
OID_A = b"886fd7d093e741a79df7454ebfeecd6c8a2d77b4"
OID_B = b"be99d8eeb80a1f2777c86ac473faa1e11fe147c5"
OID_C = b"e493b4ad400b62c63915a5eef406d8fcb6b4e0c1"
FLUSH, DELIM, RESPONSE_END = b"0000", b"0001", b"0002"


def pkt(payload: bytes) -> bytes:
    return b"%04x" % (len(payload) + 4) + payload


def body(*packets: bytes) -> bytes:
    """Packets given as payloads, or as the special packets FLUSH, DELIM, RESPONSE_END."""
    return b"".join(p if p in (FLUSH, DELIM, RESPONSE_END) else pkt(p) for p in packets)


def v0(
    capabilities: bytes, *, wants: tuple[bytes, ...] = (OID_A, OID_B), tail: bytes = b""
) -> bytes:
    first = b"want " + wants[0] + (b" " + capabilities if capabilities else b"") + b"\n"
    rest = [b"want " + oid + b"\n" for oid in wants[1:]]
    return body(first, *rest, FLUSH) + tail


CAPS_239_TERMINAL = (
    b"multi_ack_detailed no-done side-band-64k thin-pack ofs-delta deepen-since deepen-not "
    b"agent=git/2.39.5"
)
CAPS_243_CI = (
    b"multi_ack_detailed no-done side-band-64k thin-pack no-progress ofs-delta deepen-since "
    b"deepen-not agent=git/2.43.0 session-id=20261129T094021.577548Z-H0a7c9cdf-P00001553"
)
DONE = pkt(b"done\n")


def v2_fetch(capabilities: list[bytes], arguments: list[bytes]) -> bytes:
    return body(b"command=fetch", *capabilities, DELIM, *arguments, FLUSH)


def v2_ls_refs(agent: bytes, prefixes: list[bytes]) -> bytes:
    arguments = [
        b"peel\n",
        b"symrefs\n",
        b"unborn\n",
        *(b"ref-prefix " + p + b"\n" for p in prefixes),
    ]
    return body(b"command=ls-refs\n", agent, b"object-format=sha1", DELIM, *arguments, FLUSH)


def key(data: bytes) -> bytes:
    return canonical_body(PATH, TYPE, data)


def test_v0_canonical_form_is_pinned() -> None:
    assert key(v0(CAPS_243_CI, tail=DONE)) == (
        pkt(
            b"want " + OID_A + b" deepen-not deepen-since multi_ack_detailed no-done ofs-delta "
            b"side-band-64k thin-pack\n"
        )
        + pkt(b"want " + OID_B + b"\n")
        + FLUSH
        + DONE
    )


@pytest.mark.parametrize(
    "capabilities",
    [
        CAPS_239_TERMINAL,
        CAPS_243_CI,
        b"side-band-64k no-progress thin-pack ofs-delta no-done multi_ack_detailed deepen-since "
        b"deepen-not agent=JGit/6.0 no-progress",  # any order; repeated capabilities
        b"multi_ack_detailed  no-done side-band-64k thin-pack ofs-delta deepen-since deepen-not",
    ],
)
def test_v0_agent_session_and_progress_do_not_matter(capabilities: bytes) -> None:
    with_haves = body(b"have " + OID_C + b"\n") + DONE
    assert key(v0(capabilities, tail=with_haves)) == key(v0(CAPS_239_TERMINAL, tail=with_haves))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # a different want, have, want order, or have order
        (v0(CAPS_239_TERMINAL, tail=DONE), v0(CAPS_239_TERMINAL, wants=(OID_A, OID_C), tail=DONE)),
        (
            v0(CAPS_239_TERMINAL, tail=body(b"have " + OID_C + b"\n") + DONE),
            v0(CAPS_239_TERMINAL, tail=body(b"have " + OID_B + b"\n") + DONE),
        ),
        (v0(CAPS_239_TERMINAL, tail=DONE), v0(CAPS_239_TERMINAL, wants=(OID_B, OID_A), tail=DONE)),
        (
            v0(CAPS_239_TERMINAL, tail=body(b"have " + OID_B + b"\n", b"have " + OID_C + b"\n")),
            v0(CAPS_239_TERMINAL, tail=body(b"have " + OID_C + b"\n", b"have " + OID_B + b"\n")),
        ),
        # another negotiation round, or its end
        (v0(CAPS_239_TERMINAL, tail=DONE), v0(CAPS_239_TERMINAL)),
        # capabilities that shape the response's bytes: side-band framing, ACK style, deltas
        (v0(b"side-band-64k agent=git/2.39.5"), v0(b"side-band agent=git/2.39.5")),
        (v0(b"side-band-64k"), v0(b"")),
        (v0(b"multi_ack_detailed"), v0(b"multi_ack")),
        (v0(b"thin-pack ofs-delta"), v0(b"ofs-delta")),
        (v0(b"include-tag"), v0(b"")),
        # shallow and partial clones
        (
            body(b"want " + OID_A + b" agent=git/2.39.5\n", b"deepen 1\n", FLUSH, b"done\n"),
            body(b"want " + OID_A + b" agent=git/2.39.5\n", b"deepen 2\n", FLUSH, b"done\n"),
        ),
        (
            body(b"want " + OID_A + b"\n", b"shallow " + OID_B + b"\n", FLUSH, b"done\n"),
            body(b"want " + OID_A + b"\n", FLUSH, b"done\n"),
        ),
        (
            body(b"want " + OID_A + b" filter\n", b"filter blob:none\n", FLUSH, b"done\n"),
            body(b"want " + OID_A + b" filter\n", b"filter tree:0\n", FLUSH, b"done\n"),
        ),
        (
            body(b"want " + OID_A + b"\n", b"deepen-since 1700000000\n", FLUSH, b"done\n"),
            body(b"want " + OID_A + b"\n", b"deepen-not refs/heads/x\n", FLUSH, b"done\n"),
        ),
        # v2: wants, haves, ref prefixes, capabilities that shape the response
        (
            v2_fetch([b"agent=git/2.39.5"], [b"want " + OID_A + b"\n", b"done\n"]),
            v2_fetch([b"agent=git/2.39.5"], [b"want " + OID_B + b"\n", b"done\n"]),
        ),
        (
            v2_fetch([], [b"want " + OID_A + b"\n", b"have " + OID_B + b"\n", b"done\n"]),
            v2_fetch([], [b"want " + OID_A + b"\n", b"have " + OID_C + b"\n", b"done\n"]),
        ),
        (
            v2_fetch([], [b"want " + OID_A + b"\n", b"done\n"]),
            v2_fetch([], [b"want " + OID_A + b"\n"]),
        ),
        (
            v2_fetch([], [b"thin-pack", b"want " + OID_A + b"\n"]),
            v2_fetch([], [b"want " + OID_A + b"\n"]),
        ),
        (
            v2_fetch([], [b"sideband-all", b"want " + OID_A + b"\n"]),
            v2_fetch([], [b"want " + OID_A + b"\n"]),
        ),
        (
            v2_fetch([b"object-format=sha1"], [b"want " + OID_A + b"\n"]),
            v2_fetch([b"object-format=sha256"], [b"want " + OID_A + b"\n"]),
        ),
        (
            v2_fetch([], [b"want " + OID_A + b"\n", b"filter blob:none\n"]),
            v2_fetch([], [b"want " + OID_A + b"\n"]),
        ),
        (
            v2_ls_refs(b"agent=git/2.39.5", [b"HEAD", b"refs/heads/"]),
            v2_ls_refs(b"agent=git/2.39.5", [b"HEAD", b"refs/tags/"]),
        ),
        (v2_fetch([], [b"want " + OID_A + b"\n"]), v0(b"", wants=(OID_A,))),
    ],
)
def test_different_requests_keep_different_keys(first: bytes, second: bytes) -> None:
    assert key(first) != key(second)


def test_v2_canonical_form_is_pinned() -> None:
    request = v2_fetch(
        [b"agent=git/2.43.0", b"session-id=20261129T094021.6-H0a-P0000155d", b"object-format=sha1"],
        [b"thin-pack", b"no-progress", b"ofs-delta", b"want " + OID_A + b"\n", b"done\n"],
    )
    assert key(request) == v2_fetch(
        [b"object-format=sha1"], [b"thin-pack", b"ofs-delta", b"want " + OID_A + b"\n", b"done\n"]
    )


def test_v2_agent_session_and_progress_do_not_matter() -> None:
    arguments = [b"thin-pack", b"ofs-delta", b"want " + OID_A + b"\n", b"have " + OID_B + b"\n"]
    terminal = v2_fetch([b"agent=git/2.39.5", b"object-format=sha1"], arguments)
    ci = v2_fetch(
        [b"agent=git/2.43.0\n", b"session-id=x", b"object-format=sha1"],
        [b"no-progress\n", *arguments],
    )
    assert terminal != ci
    assert key(terminal) == key(ci)
    ls_refs = [b"HEAD", b"refs/heads/", b"refs/tags/"]
    assert key(v2_ls_refs(b"agent=git/2.39.5", ls_refs)) == key(
        v2_ls_refs(b"agent=git/2.43.0", ls_refs)
    )


def test_v2_several_commands() -> None:
    one = v2_fetch([b"agent=a"], [b"want " + OID_A + b"\n"])
    two = v2_ls_refs(b"agent=b", [b"HEAD"])
    assert key(one + two) == key(one) + key(two)


def test_gzip_bodies_key_like_inflated_ones() -> None:
    plain = v0(CAPS_239_TERMINAL, tail=DONE)
    assert key(gzip.compress(plain, compresslevel=9, mtime=0)) == key(plain)
    assert key(gzip.compress(v0(CAPS_243_CI, tail=DONE), compresslevel=1, mtime=1)) == key(plain)


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/org/repo.git/git-receive-pack", TYPE),
        ("/org/repo.git/info/refs", TYPE),
        (PATH, None),
        (PATH, "application/x-git-receive-pack-request"),
        (PATH, "application/octet-stream"),
    ],
)
def test_other_requests_are_unchanged(path: str, content_type: str | None) -> None:
    request = v0(CAPS_243_CI, tail=DONE)
    assert canonical_body(path, content_type, request) == request


def test_content_type_parameters_and_case_and_query() -> None:
    request = v0(CAPS_243_CI, tail=DONE)
    expected = key(request)
    assert canonical_body(PATH + "?x=1", "Application/X-Git-Upload-Pack-Request; x=y", request) == (
        expected
    )
    assert expected != request


@pytest.mark.parametrize(
    "malformed",
    [
        b"",
        b"000",  # truncated length
        b"00zzwant",  # not hex
        b"0003",  # no such packet
        v0(CAPS_243_CI) + b"0003",
        pkt(b"want " + OID_A + b" agent=x\n")[:-3],  # truncated payload
        pkt(b"want " + OID_A + b" agent=x\n") + b"00",  # trailing bytes
        body(b"have " + OID_A + b"\n", b"done\n"),  # no want first
        body(b"want  agent=x\n", FLUSH),  # no object id
        FLUSH + v0(CAPS_243_CI),  # flush first
        body(b"command=fetch", b"agent=x", DELIM, b"want " + OID_A + b"\n"),  # no final flush
        body(b"command=fetch", b"agent=x", DELIM, DELIM, FLUSH),  # two delims
        body(b"command=fetch", b"agent=x", FLUSH, b"want " + OID_A + b"\n", FLUSH),
        body(b"command=fetch", b"agent=x", RESPONSE_END, FLUSH),  # response-end in a request
        b"\x1f\x8b not gzip",
        gzip.compress(v0(CAPS_243_CI), mtime=0)[:-4],  # truncated gzip
        gzip.compress(v0(CAPS_243_CI), mtime=0) + b"junk",
        gzip.compress(b"not pkt-lines agent=x", mtime=0),
        zlib.compress(v0(CAPS_243_CI)),  # zlib, not gzip
    ],
)
def test_malformed_bodies_are_unchanged(malformed: bytes) -> None:
    assert key(malformed) == malformed


def test_oversized_gzip_is_keyed_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    request = gzip.compress(v0(CAPS_243_CI, tail=DONE))
    assert key(request) != request
    monkeypatch.setattr(gitbody, "MAX_INFLATED_SIZE", 100)
    assert key(request) == request


_oids = st.sampled_from([OID_A, OID_B, OID_C])
_capabilities = st.lists(
    st.sampled_from(
        [b"multi_ack_detailed", b"side-band-64k", b"no-progress", b"agent=git/2.4", b"ofs-delta"]
    )
).map(b" ".join)
_v0_bodies = st.builds(
    lambda caps, wants, haves, done: v0(
        caps, wants=tuple(wants), tail=body(*(b"have " + h + b"\n" for h in haves)) + done
    ),
    _capabilities,
    st.lists(_oids, min_size=1, max_size=3),
    st.lists(_oids, max_size=3),
    st.sampled_from([b"", DONE]),
)
_v2_bodies = st.builds(
    v2_fetch,
    st.lists(st.sampled_from([b"agent=git/2.4", b"session-id=1", b"object-format=sha1"])),
    st.lists(st.sampled_from([b"no-progress", b"thin-pack", b"want " + OID_A + b"\n", b"done"])),
)


@PROPERTIES
@given(st.one_of(_v0_bodies, _v2_bodies, _v0_bodies.map(gzip.compress)))
def test_canonical_body_is_idempotent(request: bytes) -> None:
    canonical = key(request)
    assert key(canonical) == canonical
    assert b"agent=" not in canonical
    assert b"no-progress" not in canonical
    assert b"session-id" not in canonical


@PROPERTIES
@given(
    st.one_of(
        st.binary(),
        st.lists(
            st.sampled_from([b"0000", b"0001", b"0002", b"0004", b"0009done\n", b"want "])
        ).map(b"".join),
        st.binary().map(gzip.compress),
        st.binary().map(lambda data: b"\x1f\x8b" + data),
    )
)
def test_canonical_body_never_raises(request: bytes) -> None:
    assert isinstance(key(request), bytes)


# --- real git: bodies that git 2.39 actually sends ------------------------------------------


@dataclass
class GitServer:
    """Smart HTTP over ``git http-backend`` on 127.0.0.1, remembering each upload-pack body."""

    root: Path
    url: str
    bodies: list[bytes] = field(default_factory=list)


def _serve_cgi(handler: http.server.BaseHTTPRequestHandler, root: Path, request: bytes) -> None:
    reply = git_http_backend(root)(
        OriginRequest(
            method=handler.command,
            target=handler.path,
            headers=tuple((k.lower(), v) for k, v in handler.headers.items()),
            body=request,
        )
    )
    handler.send_response(reply.status)
    for name, value in reply.headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(reply.body)))
    handler.end_headers()
    handler.wfile.write(reply.body)


def _fast_import(repository: Path, stream: str) -> None:
    subprocess.run(
        ["git", "-C", str(repository), "fast-import", "--quiet"],
        input=stream.encode(),
        env=git_env(repository),
        check=True,
    )


def _commit(ref: str, content: str, parent: str | None = None) -> str:
    header = f"commit {ref}\ncommitter T <t@example.org> 1700000000 +0000\ndata 2\nc\n"
    if parent:
        header += f"from {parent}\n"
    return f"{header}M 644 inline f\ndata {len(content)}\n{content}\n"


@pytest.fixture(scope="module")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    root = tmp_path_factory.mktemp("git-server")
    repository = root / "repo.git"
    env = git_env(root)
    subprocess.run(["git", "init", "-q", "--bare", str(repository)], env=env, check=True)
    subprocess.run(
        ["git", "-C", str(repository), "config", "transfer.advertiseSID", "true"],
        env=env,
        check=True,
    )
    # 40 branches: the clone's wants exceed 1 KiB, so git gzips the body.
    _fast_import(repository, "".join(_commit(f"refs/heads/b{i:02d}", f"{i}") for i in range(40)))
    subprocess.run(
        ["git", "-C", str(repository), "symbolic-ref", "HEAD", "refs/heads/b00"],
        env=env,
        check=True,
    )
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:
            _serve_cgi(self, root, b"")

        def do_POST(self) -> None:
            request = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.headers["Content-Type"] == TYPE
            gzipped = self.headers.get("Content-Encoding") == "gzip"
            assert gzipped == request.startswith(b"\x1f\x8b")
            bodies.append(request)
            _serve_cgi(self, root, request)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,))
    thread.start()
    try:
        port = server.server_address[1]
        yield GitServer(root, f"http://127.0.0.1:{port}/repo.git", bodies)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _inflate(request: bytes) -> bytes:
    return gzip.decompress(request) if request.startswith(b"\x1f\x8b") else request


_GIT = ["git", "-c", "transfer.advertiseSID=true"]  # clients send session-id= when asked


def _git(server: GitServer, variant: str, protocol: str, cwd: Path, *args: str) -> list[bytes]:
    """Run git as a terminal user with 2.39 (``laptop``) or as CI with 2.43 (``ci``)."""
    extra = {"GIT_USER_AGENT": "git/2.43.0"} if variant == "ci" else {}
    progress = ["--progress"] if variant == "laptop" else []
    before = len(server.bodies)
    subprocess.run(
        [*_GIT, "-c", f"protocol.version={protocol}", args[0], *progress, *args[1:]],
        cwd=cwd,
        env=git_env(cwd, **extra),
        check=True,
        capture_output=True,
    )
    return server.bodies[before:]


@pytest.mark.parametrize("protocol", ["0", "1", "2"])
def test_real_git_bodies_key_alike_on_laptop_and_in_ci(
    git_server: GitServer, tmp_path: Path, protocol: str
) -> None:
    clones, fetches = {}, {}
    for variant in ("laptop", "ci"):
        clones[variant] = _git(
            git_server, variant, protocol, tmp_path, "clone", git_server.url, variant
        )
    branch = f"refs/heads/b{int(protocol) + 1:02d}"
    _fast_import(
        git_server.root / "repo.git", _commit(branch, f"new {protocol}", parent=f"{branch}^0")
    )
    for variant in ("laptop", "ci"):
        fetches[variant] = _git(git_server, variant, protocol, tmp_path / variant, "fetch")
    laptop = clones["laptop"] + fetches["laptop"]
    ci = clones["ci"] + fetches["ci"]
    assert len(laptop) == len(ci) >= 3  # the fetch negotiates in rounds
    assert clones["laptop"][-1].startswith(b"\x1f\x8b")  # 40 wants: git gzipped the body
    assert b"have " in _inflate(fetches["laptop"][-1])
    assert [raw for raw in laptop if raw in ci] == []  # agent, session id, progress differ
    assert [key(raw) for raw in laptop] == [key(raw) for raw in ci]

    single = _git(
        git_server,
        "ci",
        protocol,
        tmp_path,
        "clone",
        "--single-branch",
        "-b",
        "b05",
        git_server.url,
        "one",
    )
    assert key(single[-1]) != key(clones["ci"][-1])  # one want instead of 40: another key
