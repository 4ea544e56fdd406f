"""Package URLs from fetch URLs: the registries' documented shapes, the purl spec's encoding,
conservative refusals, and hostile input that must never raise."""

from __future__ import annotations

import time

import packageurl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchproxy.provenance.purl import PackageURL, Role, identify

PROPERTIES = settings(derandomize=True, max_examples=300, deadline=None)

A = Role.ARTIFACT
M = Role.METADATA

# (method, url, role, purl). Each group names the document its shapes come from.
SHAPES = [
    # PyPI. Wheel names: packaging.python.org/en/latest/specifications/binary-distribution-format/
    # sdist names: .../specifications/source-distribution-format/ ; the simple index (PEP 503,
    # PEP 691): .../specifications/simple-repository-api/ ; the JSON API: docs.pypi.org/api/json/
    (
        "https://files.pythonhosted.org/packages/f9/9b/335f9764261e915ed497fcdeb11df5dfd6f7bf257d4a"
        "6a2a686d80da4d54/requests-2.32.3-py3-none-any.whl",
        A,
        "pkg:pypi/requests@2.32.3?file_name=requests-2.32.3-py3-none-any.whl",
    ),
    (
        "https://files.pythonhosted.org/packages/aa/bb/cc/zope.interface-6.1-cp311-cp311-"
        "manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        A,
        "pkg:pypi/zope-interface@6.1?file_name=zope.interface-6.1-cp311-cp311-manylinux_2_17_"
        "x86_64.manylinux2014_x86_64.whl",
    ),
    (
        "https://files.pythonhosted.org/packages/aa/bb/cc/Django-1.11.1-1-py2.py3-none-any.whl",
        A,
        "pkg:pypi/django@1.11.1?file_name=Django-1.11.1-1-py2.py3-none-any.whl",
    ),
    (
        "https://files.pythonhosted.org/packages/63/70/2b/requests-2.32.3.tar.gz",
        A,
        "pkg:pypi/requests@2.32.3?file_name=requests-2.32.3.tar.gz",
    ),
    (
        "https://files.pythonhosted.org/packages/source/p/python-dateutil/"
        "python-dateutil-2.8.2.tar.gz",
        A,
        "pkg:pypi/python-dateutil@2.8.2?file_name=python-dateutil-2.8.2.tar.gz",
    ),
    (  # PEP 658/714: a wheel's metadata file beside it
        "https://files.pythonhosted.org/packages/aa/bb/cc/requests-2.32.3-py3-none-any.whl"
        ".metadata",
        M,
        "pkg:pypi/requests@2.32.3?file_name=requests-2.32.3-py3-none-any.whl",
    ),
    ("https://pypi.org/simple/", M, None),
    ("https://pypi.org/simple/typing-extensions/", M, "pkg:pypi/typing-extensions"),
    ("https://pypi.org/pypi/Requests/json", M, "pkg:pypi/requests"),
    ("https://pypi.org/pypi/requests/2.32.3/json", M, "pkg:pypi/requests@2.32.3"),
    # any host: a private index (devpi, a static directory) keeps the simple API's shape
    ("https://127.0.0.2:8443/simple/demo/", M, "pkg:pypi/demo"),
    (
        "https://127.0.0.2:8443/files/demo-1.0-py3-none-any.whl",
        A,
        "pkg:pypi/demo@1.0?file_name=demo-1.0-py3-none-any.whl",
    ),
    # npm, after the registry API doc (github.com/npm/registry, docs/REGISTRY-API.md) for
    # packuments and tarballs; scoped packuments are asked for as /@scope%2Fname
    ("https://registry.npmjs.org/lodash", M, "pkg:npm/lodash"),
    ("https://registry.npmjs.org/@types%2Fnode", M, "pkg:npm/%40types/node"),
    ("https://registry.npmjs.org/@types/node", M, "pkg:npm/%40types/node"),
    ("https://registry.npmjs.org/lodash/4.17.21", M, "pkg:npm/lodash@4.17.21"),
    ("https://registry.npmjs.org/lodash/latest", M, "pkg:npm/lodash"),
    ("https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz", A, "pkg:npm/lodash@4.17.21"),
    (
        "https://registry.npmjs.org/@types/node/-/node-20.11.5.tgz",
        A,
        "pkg:npm/%40types/node@20.11.5",
    ),
    (
        "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0-beta.1.tgz",
        A,
        "pkg:npm/left-pad@1.3.0-beta.1",
    ),
    ("https://registry.npmjs.org/-/v1/search?text=left-pad", M, None),
    (  # a repository manager serves the same layout under a path of its own
        "https://art.example.com/api/npm/npm-remote/@babel/core/-/core-7.24.0.tgz",
        A,
        "pkg:npm/%40babel/core@7.24.0",
    ),
    # crates.io: doc.rust-lang.org/cargo/reference/registry-index.html ("dl", the index files'
    # paths) and .../registry-web-api.html (the download endpoint)
    ("https://crates.io/api/v1/crates/serde/1.0.197/download", A, "pkg:cargo/serde@1.0.197"),
    ("https://static.crates.io/crates/serde/serde-1.0.197.crate", A, "pkg:cargo/serde@1.0.197"),
    ("https://static.crates.io/crates/serde/1.0.197/download", A, "pkg:cargo/serde@1.0.197"),
    ("https://crates.io/api/v1/crates/serde", M, "pkg:cargo/serde"),
    ("https://index.crates.io/config.json", M, None),
    ("https://index.crates.io/se/rd/serde", M, "pkg:cargo/serde"),
    ("https://index.crates.io/3/s/syn", M, "pkg:cargo/syn"),
    ("https://index.crates.io/2/cc", M, "pkg:cargo/cc"),
    ("https://index.crates.io/1/a", M, "pkg:cargo/a"),
    # Maven: maven.apache.org/repositories/layout.html, maven.apache.org/ref/current/
    # maven-repository-metadata/repository-metadata.html
    (
        "https://repo.maven.apache.org/maven2/org/apache/commons/commons-lang3/3.14.0/"
        "commons-lang3-3.14.0.jar",
        A,
        "pkg:maven/org.apache.commons/commons-lang3@3.14.0",
    ),
    (
        "https://repo1.maven.org/maven2/org/apache/commons/commons-lang3/3.14.0/"
        "commons-lang3-3.14.0-sources.jar",
        A,
        "pkg:maven/org.apache.commons/commons-lang3@3.14.0?classifier=sources",
    ),
    (
        "https://repo.maven.apache.org/maven2/org/apache/commons/commons-lang3/3.14.0/"
        "commons-lang3-3.14.0.pom",
        A,
        "pkg:maven/org.apache.commons/commons-lang3@3.14.0?type=pom",
    ),
    (
        "https://repo.maven.apache.org/maven2/org/apache/commons/commons-lang3/3.14.0/"
        "commons-lang3-3.14.0.jar.sha1",
        M,
        "pkg:maven/org.apache.commons/commons-lang3@3.14.0",
    ),
    (
        "https://repo.maven.apache.org/maven2/org/apache/commons/commons-lang3/maven-metadata.xml",
        M,
        "pkg:maven/org.apache.commons/commons-lang3",
    ),
    (
        "https://maven.google.com/androidx/core/core/1.12.0/core-1.12.0.aar",
        A,
        "pkg:maven/androidx.core/core@1.12.0?repository_url=https:%2F%2Fmaven.google.com&type=aar",
    ),
    (  # Nexus 3 (help.sonatype.com: repository URLs are /repository/NAME/)
        "https://nexus.example.com/repository/maven-public/org/slf4j/slf4j-api/2.0.9/"
        "slf4j-api-2.0.9.jar",
        A,
        "pkg:maven/org.slf4j/slf4j-api@2.0.9?repository_url=https:%2F%2Fnexus.example.com"
        "%2Frepository%2Fmaven-public",
    ),
    (  # a deployed snapshot: ARTIFACT-BASE-TIMESTAMP-BUILD.jar under VERSION-SNAPSHOT/
        "https://repo.maven.apache.org/maven2/com/example/app/1.0-SNAPSHOT/"
        "app-1.0-20240101.123456-3.jar",
        A,
        "pkg:maven/com.example/app@1.0-SNAPSHOT",
    ),
    # Go module proxy: go.dev/ref/mod#goproxy-protocol (paths, and the !-escaping of capitals)
    (
        "https://proxy.golang.org/golang.org/x/text/@v/v0.14.0.zip",
        A,
        "pkg:golang/golang.org/x/text@v0.14.0",
    ),
    ("https://proxy.golang.org/golang.org/x/text/@v/list", M, "pkg:golang/golang.org/x/text"),
    (
        "https://proxy.golang.org/golang.org/x/text/@v/v0.14.0.info",
        M,
        "pkg:golang/golang.org/x/text@v0.14.0",
    ),
    (
        "https://proxy.golang.org/golang.org/x/text/@v/v0.14.0.mod",
        M,
        "pkg:golang/golang.org/x/text@v0.14.0",
    ),
    ("https://proxy.golang.org/golang.org/x/text/@latest", M, "pkg:golang/golang.org/x/text"),
    (
        "https://proxy.golang.org/github.com/!burnt!sushi/toml/@v/v1.3.2.zip",
        A,
        "pkg:golang/github.com/BurntSushi/toml@v1.3.2",
    ),
    (
        "https://proxy.golang.org/github.com/!azure/azure-sdk-for-go/@v/v68.0.0+incompatible.zip",
        A,
        "pkg:golang/github.com/Azure/azure-sdk-for-go@v68.0.0%2Bincompatible",
    ),
    (  # a GOPROXY under a path (Artifactory's /api/go/REPO)
        "https://art.example.com/api/go/go-remote/gopkg.in/yaml.v3/@v/v3.0.1.zip",
        A,
        "pkg:golang/gopkg.in/yaml.v3@v3.0.1",
    ),
    (
        "https://sum.golang.org/lookup/golang.org/x/text@v0.14.0",
        M,
        "pkg:golang/golang.org/x/text@v0.14.0",
    ),
    # Debian: wiki.debian.org/DebianRepository/Format (pool/COMPONENT/PREFIX/SOURCE/) and the
    # file names of deb-src-control(5), deb(5)
    (
        "https://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3_amd64.deb",
        A,
        "pkg:deb/debian/hello@2.10-3?arch=amd64",
    ),
    (
        "https://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3.dsc",
        A,
        "pkg:deb/debian/hello@2.10-3?arch=source",
    ),
    (
        "https://deb.debian.org/debian/pool/main/h/hello/hello_2.10.orig.tar.gz",
        A,
        "pkg:deb/debian/hello?arch=source",
    ),
    (
        "https://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3.debian.tar.xz",
        A,
        "pkg:deb/debian/hello@2.10-3?arch=source",
    ),
    (
        "https://deb.debian.org/debian/pool/main/libx/libxml2/libxml2_2.9.14+dfsg-1.3~deb12u1_"
        "amd64.deb",
        A,
        "pkg:deb/debian/libxml2@2.9.14%2Bdfsg-1.3~deb12u1?arch=amd64",
    ),
    (
        "https://security.debian.org/debian-security/pool/updates/main/o/openssl/"
        "libssl3_3.0.11-1~deb12u2_arm64.deb",
        A,
        "pkg:deb/debian/libssl3@3.0.11-1~deb12u2?arch=arm64",
    ),
    (
        "http://archive.ubuntu.com/ubuntu/pool/main/c/curl/curl_8.5.0-2ubuntu10_amd64.deb",
        A,
        "pkg:deb/ubuntu/curl@8.5.0-2ubuntu10?arch=amd64",
    ),
    ("https://deb.debian.org/debian/dists/bookworm/InRelease", M, None),
    # GitHub, after its docs "Linking to releases" (releases/download/TAG/ASSET) and
    # "Downloading source code archives" (refs/tags/TAG.zip and COMMIT.zip under archive)
    (
        "https://github.com/cli/cli/releases/download/v2.45.0/gh_2.45.0_linux_amd64.tar.gz",
        A,
        "pkg:github/cli/cli@v2.45.0?file_name=gh_2.45.0_linux_amd64.tar.gz",
    ),
    (  # a wheel attached to a release is a release asset, not a file from PyPI
        "https://github.com/Org/Tool/releases/download/v1/tool-1.0-py3-none-any.whl",
        A,
        "pkg:github/org/tool@v1?file_name=tool-1.0-py3-none-any.whl",
    ),
    (
        "https://github.com/github/codeql/archive/refs/heads/main.zip",
        A,
        "pkg:github/github/codeql@main",
    ),
    (
        "https://github.com/github/codeql/archive/refs/tags/codeql-cli/v2.12.0.zip",
        A,
        "pkg:github/github/codeql@codeql-cli%2Fv2.12.0",
    ),
    (
        "https://github.com/github/codeql/archive/aef66c462abe817e33aad91d97aa782a1e2ad2c7.zip",
        A,
        "pkg:github/github/codeql@aef66c462abe817e33aad91d97aa782a1e2ad2c7",
    ),
    (
        "https://codeload.github.com/github/codeql/tar.gz/refs/tags/v1.0",
        A,
        "pkg:github/github/codeql@v1.0",
    ),
    ("https://api.github.com/repos/cli/cli/releases/latest", M, "pkg:github/cli/cli"),
    ("https://api.github.com/repos/cli/cli/tarball/v2.45.0", A, "pkg:github/cli/cli@v2.45.0"),
    # everything else: the purl spec's generic type with the download URL
    (
        "https://example.org/pkg/foo-1.0.tar.gz",
        A,
        "pkg:generic/foo-1.0.tar.gz?download_url=https:%2F%2Fexample.org%2Fpkg%2Ffoo-1.0.tar.gz",
    ),
    ("https://example.org/", A, "pkg:generic/example.org?download_url=https:%2F%2Fexample.org%2F"),
    # git smart HTTP (git-scm.com/docs/http-protocol): the ref advertisement is a listing
    ("https://127.0.0.2:1234/repo.git/info/refs?service=git-upload-pack", M, "pkg:generic/repo"),
]


@pytest.mark.parametrize(("url", "role", "purl"), SHAPES, ids=[s[0][:90] for s in SHAPES])
def test_documented_shapes(url: str, role: Role, purl: str | None) -> None:
    found = identify("GET", url)
    assert found.role is role
    assert (None if found.purl is None else str(found.purl)) == purl


@pytest.mark.parametrize(("url", "role", "purl"), SHAPES, ids=[s[0][:90] for s in SHAPES])
def test_an_independent_parser_reads_the_same_components(
    url: str, role: Role, purl: str | None
) -> None:
    found = identify("GET", url).purl
    if found is None:
        return
    parsed = packageurl.PackageURL.from_string(str(found))
    assert parsed.type == found.type
    assert (parsed.namespace or "") == "/".join(found.namespace)
    assert parsed.name == found.name
    assert parsed.version == found.version
    assert (parsed.qualifiers or {}) == dict(found.qualifiers)


def test_registry_names_the_layout_and_generic_has_none() -> None:
    assert identify("GET", "https://registry.npmjs.org/lodash").registry == "npm"
    assert identify("GET", "https://example.org/a.tgz").registry is None


def test_git_upload_pack_is_the_repository_fetched_with_its_vcs_url() -> None:
    found = identify("POST", "https://127.0.0.2:1234/srv/repo.git/git-upload-pack")
    assert found.role is A
    assert (
        str(found.purl)
        == "pkg:generic/repo?vcs_url=git%2Bhttps:%2F%2F127.0.0.2:1234%2Fsrv%2Frepo.git"
    )
    on_github = identify("POST", "https://github.com/Cli/Cli.git/git-upload-pack")
    assert (on_github.role, str(on_github.purl)) == (A, "pkg:github/cli/cli")


def test_answers_without_a_file_keep_the_purl_of_what_was_asked_for() -> None:
    # A release asset answers with a redirect to a storage host; the SBOM names the target
    # after the request.
    url = "https://github.com/cli/cli/releases/download/v2.45.0/gh.tar.gz"
    redirect = identify("GET", url, status=302)
    assert redirect.role is Role.NO_CONTENT
    assert str(redirect.purl) == "pkg:github/cli/cli@v2.45.0?file_name=gh.tar.gz"
    assert identify("GET", url, status=404).role is Role.NO_CONTENT
    assert identify("HEAD", url).role is Role.NO_CONTENT
    assert identify("GET", url, status=204).role is Role.NO_CONTENT
    assert identify("POST", "https://example.org/api", status=200).role is A


def test_accept_marks_indexes_on_hosts_that_are_not_the_registries() -> None:
    # pip asks for simple pages with these media types (simple-repository-api, PEP 691)
    pip = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.1"
    assert str(identify("GET", "https://idx.example/simple/demo", accept=pip).purl) == (
        "pkg:pypi/demo"
    )
    # npm's abbreviated packuments (npm/registry docs/responses/package-metadata.md)
    npm = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
    found = identify("GET", "https://verdaccio.example/@scope%2Fpkg", accept=npm)
    assert (found.role, str(found.purl)) == (M, "pkg:npm/%40scope/pkg")
    assert identify("GET", "https://verdaccio.example/@scope%2Fpkg").registry is None


# Shapes that look like a registry's but are not safely one: generic.
NOT_A_PACKAGE = [
    "https://example.org/downloads/foo/1.0/foo-1.0.tar.gz",  # Maven-like path, no known root
    "https://example.org/maven2/org/foo/bar/1.0/bar-1.0.tar.gz",  # not a Maven type
    "https://example.org/foo-1.0.tar.gz",  # an sdist-like name off PyPI
    "https://example.org/pool/main/h/hello/hello_2.10-3_amd64.deb",  # no vendor before pool
    "https://deb.debian.org/debian/pool/main/x/hello/hello_2.10-3_amd64.deb",  # wrong prefix
    "https://example.org/lodash/-/other-4.17.21.tgz",  # the tarball names another package
    "https://example.org/serde/other-1.0.0.crate",
    "https://example.org/a/@v/v1.0.0.zip",  # no module path (no host-like first element)
    "https://proxy.golang.org/github.com/Azure/x/@v/v1.0.0.zip",  # capitals must be !-escaped
    "https://index.crates.io/se/xx/serde",  # a prefix that does not match
    "https://registry.npmjs.org/lodash/-/lodash-latest.tgz",  # not a version
    "https://files.pythonhosted.org/packages/aa/not-a-dist.txt",
    "https://github.com/cli/cli/blob/trunk/README.md",
]


@pytest.mark.parametrize("url", NOT_A_PACKAGE)
def test_conservative_where_a_layout_is_not_certain(url: str) -> None:
    found = identify("GET", url)
    assert found.registry is None, found
    assert found.purl is not None
    assert found.purl.type == "generic"


# The purl spec's own build vectors (package-url/purl-spec tests/types/*-test.json).
SPEC_BUILD = [
    (
        PackageURL(
            type="generic",
            name="openssl",
            version="1.1.10g",
            qualifiers=(
                ("download_url", "https://openssl.org/source/openssl-1.1.0g.tar.gz"),
                ("checksum", "sha256:de4d501267da"),
            ),
        ),
        "pkg:generic/openssl@1.1.10g?checksum=sha256:de4d501267da&download_url=https:%2F%2F"
        "openssl.org%2Fsource%2Fopenssl-1.1.0g.tar.gz",
    ),
    (
        PackageURL(
            type="generic",
            name="bitwarderl",
            qualifiers=(("vcs_url", "git+https://git.fsfe.org/dxtr/bitwarderl@cc55108da32"),),
        ),
        "pkg:generic/bitwarderl?vcs_url=git%2Bhttps:%2F%2Fgit.fsfe.org%2Fdxtr%2Fbitwarderl"
        "%40cc55108da32",
    ),
    (
        PackageURL(type="npm", namespace=("@angular",), name="animation", version="12.3.1"),
        "pkg:npm/%40angular/animation@12.3.1",
    ),
    (
        PackageURL(
            type="deb",
            namespace=("debian",),
            name="attr",
            version="1:2.4.47-2+b1",
            qualifiers=(("arch", "amd64"),),
        ),
        "pkg:deb/debian/attr@1:2.4.47-2%2Bb1?arch=amd64",
    ),
    (
        PackageURL(
            type="maven",
            namespace=("mygroup",),
            name="myartifact",
            version="1.0.0 Final",
            qualifiers=(("mykey", "my value"),),
        ),
        "pkg:maven/mygroup/myartifact@1.0.0%20Final?mykey=my%20value",
    ),
    (
        PackageURL(
            type="golang",
            namespace=("google.golang.org",),
            name="genproto",
            version="abcdedf",
            subpath=("googleapis", "api", "annotations"),
        ),
        "pkg:golang/google.golang.org/genproto@abcdedf#googleapis/api/annotations",
    ),
]


@pytest.mark.parametrize(("purl", "text"), SPEC_BUILD)
def test_encoding_matches_the_purl_spec_vectors(purl: PackageURL, text: str) -> None:
    assert str(purl) == text


def test_encoding_of_odd_characters() -> None:
    purl = PackageURL(type="generic", name="a b/c?d#e@f&g=h%i\u00fc\u2603", version="1+2")
    assert str(purl) == ("pkg:generic/a%20b%2Fc%3Fd%23e%40f%26g%3Dh%25i%C3%BC%E2%98%83@1%2B2")
    # empty qualifier values are dropped; an empty subpath or dot segments vanish
    empty = PackageURL(type="generic", name="x", qualifiers=(("k", ""),), subpath=("", ".", ".."))
    assert str(empty) == "pkg:generic/x"


def test_percent_encoded_paths_are_decoded_once() -> None:
    # %2B is '+' in the path and must come out as %2B in the purl, not %252B
    found = identify("GET", "https://proxy.golang.org/golang.org/x/text/@v/v0.0.0%2Bx.zip")
    assert str(found.purl) == "pkg:golang/golang.org/x/text@v0.0.0%2Bx"
    weird = identify("GET", "https://example.org/%E2%98%83%00%ZZ%")
    assert str(weird.purl).startswith("pkg:generic/%E2%98%83%00%25ZZ%25?download_url=")


HOSTILE = [
    "",
    "not a url",
    "http://",
    "https://[::1",
    "https://user:pass@example.org:99999/x",
    "https://example.org/@v/",
    "https://example.org/@v/.zip",
    "https://proxy.golang.org/@v/list",
    "https://registry.npmjs.org/@%2F",
    "https://registry.npmjs.org/%2F%2F%2F",
    "https://github.com/a/b/releases/download/",
    "https://github.com/a/b/archive/.zip",
    "https://deb.debian.org/debian/pool/",
    "https://repo.maven.apache.org/maven2/maven-metadata.xml",
    "https://repo.maven.apache.org/maven2/a/maven-metadata.xml",
    "https://index.crates.io/",
    "https://files.pythonhosted.org/",
    "https://codeload.github.com/a/b/zip/",
    "https://example.org/" + "\ud800",
    "https://example.org/" + "%" * 1000,
    "https://example.org/" + "a-" * 5000 + ".whl",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_urls_get_an_answer(url: str) -> None:
    for method in ("GET", "POST", "HEAD", "", "\x00"):
        found = identify(method, url)
        assert found.role in Role
        if found.purl is not None:
            str(found.purl)


@PROPERTIES
@given(st.text(), st.sampled_from(["GET", "POST", "HEAD"]), st.integers(100, 599))
def test_any_string_gets_an_answer(url: str, method: str, status: int) -> None:
    found = identify(method, url, status=status, accept=url)
    text = "" if found.purl is None else str(found.purl)
    assert text.isascii()


_SEGMENT = st.text(st.characters(codec="utf-8"), max_size=12)
_HOSTS = st.sampled_from(
    [
        "files.pythonhosted.org",
        "pypi.org",
        "registry.npmjs.org",
        "crates.io",
        "static.crates.io",
        "index.crates.io",
        "repo.maven.apache.org",
        "proxy.golang.org",
        "deb.debian.org",
        "github.com",
        "codeload.github.com",
        "api.github.com",
        "example.org",
    ]
)
_MARKERS = st.sampled_from(
    [
        "@v",
        "-",
        "pool",
        "maven2",
        "simple",
        "releases",
        "download",
        "archive",
        "api",
        "v1",
        "crates",
        "refs",
        "tags",
        "list",
        "x.zip",
        "a-1.0.tgz",
        "a_1.0_amd64.deb",
        "a",
        "debian",
    ]
)


@PROPERTIES
@given(_HOSTS, st.lists(st.one_of(_MARKERS, _SEGMENT), max_size=10))
def test_registry_like_paths_get_an_answer(host: str, segments: list[str]) -> None:
    url = f"https://{host}/" + "/".join(segments)
    found = identify("GET", url)
    if found.purl is not None:
        text = str(found.purl)
        assert text.startswith(f"pkg:{found.purl.type}/")
        assert text.isascii()
        assert " " not in text


def test_very_long_urls_are_answered_quickly() -> None:
    long_urls = [
        "https://example.org/" + "a/" * 200_000,
        "https://repo.maven.apache.org/maven2/" + "a/" * 100_000 + "a-1.jar",
        "https://proxy.golang.org/" + "a.b/" * 100_000 + "@v/v1.zip",
        "https://example.org/" + "a-" * 200_000 + "1.tar.gz",
        "https://example.org/x?" + "a=b&" * 200_000,
    ]
    start = time.perf_counter()
    for url in long_urls:
        identify("GET", url)
    # linear work: a few hundred ms for ~4 MB of URLs; quadratic matching would take minutes
    assert time.perf_counter() - start < 10
