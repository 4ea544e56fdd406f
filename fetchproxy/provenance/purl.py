"""What a fetch is, from its URL: a package artifact, metadata about packages, or no file at all.

:func:`identify` reads the layouts registries document (PyPI, npm, crates.io, Maven, the Go
module proxy, Debian pools, GitHub releases and archives) and names the package in a package URL
(purl, https://github.com/package-url/purl-spec); any other URL is ``pkg:generic`` with its
``download_url``. Pure and total: any string gives an answer, never an exception.

A layout is trusted only where it cannot be mistaken for something else: on the registries' own
hosts, or on any host when the path is unmistakable (a wheel's file name, an npm tarball whose
name appears twice, a Go proxy's ``/@v/``, a Debian pool whose prefix directory matches the
package, a Maven path under a repository root a repository manager uses). Otherwise the answer is
``pkg:generic``: a wrong package name in an SBOM is worse than none.

Deviation from the purl spec, on purpose: ``pkg:golang`` keeps the module path's case (the Go
proxy's ``!x`` case-encoding exists because module paths are case-sensitive; vulnerability
databases such as OSV match them with their case). ``docs/provenance.md`` lists the rules.
"""

from __future__ import annotations

import enum
import re
import string
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

# ------------------------------------------------------------------------------------ the value


class Role(enum.Enum):
    """What an answer is, for an SBOM."""

    ARTIFACT = "artifact"
    """A file that is (part of) a package, or any other file the build downloaded."""
    METADATA = "metadata"
    """An index, a packument, a listing, a checksum or signature: about packages, not one."""
    NO_CONTENT = "no-content"
    """No file: a redirect, an error, a HEAD or 204 answer."""


_PURL_SAFE: Final = frozenset(string.ascii_letters + string.digits + ".-_~:")
"""What the purl spec never percent-encodes in a component (the colon included)."""


def _encode(text: str) -> str:
    return "".join(
        char
        if char in _PURL_SAFE
        else "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        for char in text
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class PackageURL:
    """A package URL's components, decoded; ``str()`` gives the canonical string."""

    type: str
    namespace: tuple[str, ...] = ()
    name: str
    version: str | None = None
    qualifiers: tuple[tuple[str, str], ...] = ()
    subpath: tuple[str, ...] = ()

    def __str__(self) -> str:
        parts = [f"pkg:{self.type}/"]
        parts.extend(f"{_encode(segment)}/" for segment in self.namespace)
        parts.append(_encode(self.name))
        if self.version:
            parts.append(f"@{_encode(self.version)}")
        qualifiers = sorted(f"{key}={_encode(value)}" for key, value in self.qualifiers if value)
        if qualifiers:
            parts.append("?" + "&".join(qualifiers))
        subpath = [_encode(s) for s in self.subpath if s not in ("", ".", "..")]
        if subpath:
            parts.append("#" + "/".join(subpath))
        return "".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class Identification:
    """What :func:`identify` found.

    ``purl`` names what the URL is or is about: the package of an artifact, the package a
    metadata file describes (None when it describes no single one, like ``/simple/``). It is
    given for ``NO_CONTENT`` answers too, so a redirect's target can be named after its source.
    ``registry`` is the layout recognised (``"pypi"``, ``"npm"``, …), None for generic URLs.
    """

    role: Role
    purl: PackageURL | None
    registry: str | None


# --------------------------------------------------------------------------------- the URL


_URI_RE: Final = re.compile(
    r"(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#.*)?", re.DOTALL
)


@dataclass(frozen=True, slots=True)
class _URL:
    text: str
    scheme: str
    host: str  # lowercase, without port or user info
    authority: str  # host[:port], without user info
    raw_path: str
    segments: tuple[str, ...]  # percent-decoded, without the empty first one
    query: str
    trailing_slash: bool


def _split(url: str) -> _URL:
    match = _URI_RE.fullmatch(url)
    assert match is not None  # RFC 3986 appendix B matches every string
    scheme, authority, path, query = match.groups()
    hostport = (authority or "").rpartition("@")[2]
    if hostport.startswith("["):
        host = hostport.partition("]")[0] + "]"
    else:
        host = hostport.partition(":")[0]
    raw = (path or "").split("/")
    segments = tuple(unquote(segment) for segment in raw[1:] if segment)
    return _URL(
        url,
        (scheme or "").lower(),
        host.lower().rstrip("."),
        hostport.lower(),
        path or "",
        segments,
        query or "",
        (path or "").endswith("/"),
    )


# ------------------------------------------------------------------------------------ PyPI

_PYPI_FILES: Final = frozenset({"files.pythonhosted.org", "test-files.pythonhosted.org"})
_PYPI_INDEXES: Final = frozenset({"pypi.org", "test.pypi.org", "pypi.python.org"})
_PEP503_RUN_RE: Final = re.compile(r"[-_.]+")
_WHEEL_RE: Final = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[0-9][A-Za-z0-9_.!+]*)"
    r"(?:-[0-9][A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl"
)
_SDIST_RE: Final = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*?[A-Za-z0-9])?)-(?P<version>[0-9][A-Za-z0-9_.!+-]*)"
    r"\.(?:tar\.gz|tar\.bz2|tar\.xz|tgz|zip)"
)
_PROJECT_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_PYPI_SIMPLE_ACCEPT: Final = "application/vnd.pypi.simple"
_SIGNATURE_SUFFIXES: Final = (".asc", ".sig", ".sigstore", ".sigstore.json", ".metadata")


def _pypi_name(name: str) -> str:
    """PEP 503 normalization: lowercase, each run of ``-_.`` one ``-``."""
    return _PEP503_RUN_RE.sub("-", name).lower()


def _pypi_file(filename: str, *, sdists: bool) -> tuple[Role, PackageURL] | None:
    role = Role.ARTIFACT
    for suffix in _SIGNATURE_SUFFIXES:
        if filename.endswith(suffix):
            filename = filename[: -len(suffix)]
            role = Role.METADATA
            break
    match = _WHEEL_RE.fullmatch(filename)
    if match is None and sdists:
        match = _SDIST_RE.fullmatch(filename)
    if match is None:
        return None
    purl = PackageURL(
        type="pypi",
        name=_pypi_name(match["name"]),
        version=match["version"],
        qualifiers=(("file_name", filename),),
    )
    return role, purl


def _pypi(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    segs = url.segments
    if not segs:
        return None
    on_index = url.host in _PYPI_INDEXES
    if url.host in _PYPI_FILES or (on_index and segs[0] == "packages"):
        return _pypi_file(segs[-1], sdists=True)
    found = _pypi_file(segs[-1], sdists=False)  # a wheel's name is unmistakable anywhere
    if found is not None:
        return found
    if (  # the JSON API: /pypi/<name>[/<version>]/json
        on_index
        and segs[0] == "pypi"
        and len(segs) in (3, 4)
        and segs[-1] == "json"
        and _PROJECT_RE.fullmatch(segs[1])
    ):
        version = segs[2] if len(segs) == 4 else None
        return Role.METADATA, PackageURL(type="pypi", name=_pypi_name(segs[1]), version=version)
    simple = on_index or (accept is not None and _PYPI_SIMPLE_ACCEPT in accept)
    if segs[-1] == "simple" and url.trailing_slash and simple:
        return Role.METADATA, None  # the project list
    if (
        len(segs) >= 2
        and segs[-2] == "simple"
        and (simple or url.trailing_slash)
        and _PROJECT_RE.fullmatch(segs[-1])
    ):
        return Role.METADATA, PackageURL(type="pypi", name=_pypi_name(segs[-1]))
    return None


# ------------------------------------------------------------------------------------- npm

_NPM_HOSTS: Final = frozenset(
    {"registry.npmjs.org", "registry.yarnpkg.com", "registry.npmmirror.com"}
)
_NPM_NAME_RE: Final = re.compile(r"[A-Za-z0-9~-][A-Za-z0-9._~-]*")
_NPM_SCOPE_RE: Final = re.compile(r"@[A-Za-z0-9~-][A-Za-z0-9._~-]*")
_NPM_VERSION_RE: Final = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9.+-]*")
_NPM_ACCEPT: Final = "application/vnd.npm.install-v1+json"


def _npm_purl(scope: str | None, name: str, version: str | None) -> PackageURL:
    return PackageURL(type="npm", namespace=(scope,) if scope else (), name=name, version=version)


def _npm_package(segs: tuple[str, ...]) -> tuple[str | None, str] | None:
    """``(scope, name)`` from one segment (``name``, ``@scope/name`` decoded from ``%2F``) or
    two (``@scope``, ``name``)."""
    if len(segs) == 1:
        scope, slash, name = segs[0].rpartition("/")
        if not slash:
            return (None, name) if _NPM_NAME_RE.fullmatch(name) else None
    elif len(segs) == 2:
        scope, name = segs
    else:
        return None
    if _NPM_SCOPE_RE.fullmatch(scope) and _NPM_NAME_RE.fullmatch(name):
        return scope, name
    return None


def _npm(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    segs = url.segments
    # A tarball: [prefix/](@scope/)?name/-/name-VERSION.tgz, on any host.
    if len(segs) >= 3 and segs[-2] == "-" and segs[-1].endswith(".tgz"):
        name = segs[-3]
        scope = segs[-4] if len(segs) >= 4 and segs[-4].startswith("@") else None
        stem = segs[-1][: -len(".tgz")]
        version = stem[len(name) + 1 :]
        if (
            stem.startswith(name + "-")
            and _NPM_VERSION_RE.fullmatch(version)
            and _NPM_NAME_RE.fullmatch(name)
            and (scope is None or _NPM_SCOPE_RE.fullmatch(scope))
        ):
            return Role.ARTIFACT, _npm_purl(scope, name, version)
        return None
    known = url.host in _NPM_HOSTS
    if not (known or (accept is not None and _NPM_ACCEPT in accept)):
        return None
    if segs and segs[0] == "-":
        return Role.METADATA, None  # /-/v1/search, /-/npm/v1/security/...: the registry's API
    package = _npm_package(segs)
    if package is not None:  # the packument: /name, /@scope%2Fname, /@scope/name
        return Role.METADATA, _npm_purl(*package, None)
    if len(segs) >= 2 and known:  # one version's document: /name/1.0.0, /@scope/name/latest
        package = _npm_package(segs[:-1])
        if package is not None:
            tag = segs[-1] if _NPM_VERSION_RE.fullmatch(segs[-1]) else None
            return Role.METADATA, _npm_purl(*package, tag)
    return None


# ---------------------------------------------------------------------------------- crates.io

_CRATE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_SEMVER_RE: Final = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9.+-]*")


def _cargo_purl(name: str, version: str | None = None) -> PackageURL:
    return PackageURL(type="cargo", name=name, version=version)


def _sparse_index_name(segs: tuple[str, ...]) -> str | None:
    """The crate a sparse-index path names: ``1/a``, ``2/ab``, ``3/a/abc``, ``ab/cd/abcd…``."""
    if not segs or not _CRATE_RE.fullmatch(segs[-1]):
        return None
    name = segs[-1]
    lower = name.lower()
    expected: tuple[str, ...]
    if len(name) <= 2:
        expected = (str(len(name)), name)
    elif len(name) == 3:
        expected = ("3", lower[0], name)
    else:
        expected = (lower[:2], lower[2:4], name)
    return name if tuple(s.lower() for s in segs) == tuple(e.lower() for e in expected) else None


def _crates(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    segs = url.segments
    # The download API (crates.io and registries that copy it): api/v1/crates/NAME/VER/download
    if len(segs) >= 6 and segs[-6:-3] == ("api", "v1", "crates") and segs[-1] == "download":
        name, version = segs[-3], segs[-2]
        if _CRATE_RE.fullmatch(name) and _SEMVER_RE.fullmatch(version):
            return Role.ARTIFACT, _cargo_purl(name, version)
        return None
    if url.host == "crates.io" and segs[:3] == ("api", "v1", "crates") and len(segs) >= 4:
        if _CRATE_RE.fullmatch(segs[3]):
            return Role.METADATA, _cargo_purl(segs[3])
        return None
    # A .crate file: [prefix/]NAME/NAME-VER.crate, on any host.
    if len(segs) >= 2 and segs[-1].endswith(".crate"):
        name = segs[-2]
        version = segs[-1][len(name) + 1 : -len(".crate")]
        if (
            segs[-1].startswith(name + "-")
            and _CRATE_RE.fullmatch(name)
            and _SEMVER_RE.fullmatch(version)
        ):
            return Role.ARTIFACT, _cargo_purl(name, version)
        return None
    if url.host == "static.crates.io" and len(segs) == 4 and segs[0] == "crates":
        # the index's "dl" without markers: /crates/NAME/VERSION/download
        name, version = segs[1], segs[2]
        if segs[3] == "download" and _CRATE_RE.fullmatch(name) and _SEMVER_RE.fullmatch(version):
            return Role.ARTIFACT, _cargo_purl(name, version)
        return None
    if url.host == "index.crates.io":
        if segs == ("config.json",):
            return Role.METADATA, None
        indexed = _sparse_index_name(segs)
        if indexed is not None:
            return Role.METADATA, _cargo_purl(indexed.lower())
    return None


# -------------------------------------------------------------------------------------- Maven

_MAVEN_CENTRAL: Final = frozenset({"repo.maven.apache.org", "repo1.maven.org"})
_MAVEN_ROOTS: Final = {
    "repo.maven.apache.org": ("maven2",),
    "repo1.maven.org": ("maven2",),
    "maven.google.com": (),
    "dl.google.com": ("dl", "android", "maven2"),
    "plugins.gradle.org": ("m2",),
    "jitpack.io": (),
}
"""Hosts whose repository root is known, and that root's path."""
_MAVEN_TYPES: Final = frozenset({"jar", "pom", "war", "ear", "aar", "module", "klib"})
"""The extensions that make a path Maven's on a host not known to be a Maven repository."""
_MAVEN_CHECKSUMS: Final = (".asc", ".md5", ".sha1", ".sha256", ".sha512")
_MAVEN_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_SNAPSHOT_STAMP_RE: Final = re.compile(r"[0-9]{8}\.[0-9]{6}-[0-9]+")


def _maven_root(url: _URL) -> int | None:
    """How many leading segments form the repository root, or None when it is unknown.

    On a host not in :data:`_MAVEN_ROOTS` the root ends after the first ``maven2`` or ``m2``,
    Nexus 3's ``repository/NAME``, Artifactory's ``artifactory/NAME`` or Nexus 2's
    ``content/repositories/NAME`` (or ``content/groups/NAME``).
    """
    segs = url.segments
    known = _MAVEN_ROOTS.get(url.host)
    if known is not None:
        return len(known) if segs[: len(known)] == known else None
    for index in range(len(segs) - 1):
        if segs[index] in ("maven2", "m2"):
            return index + 1
        if segs[index] in ("repository", "artifactory"):
            return index + 2
        if segs[index] == "content" and segs[index + 1] in ("repositories", "groups"):
            return index + 3
    return None


def _maven(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    root = _maven_root(url)
    if root is None:
        return None
    known = url.host in _MAVEN_ROOTS
    segs = url.segments[root:]
    if not all(_MAVEN_SEGMENT_RE.fullmatch(s) for s in segs):
        return None
    qualifiers: tuple[tuple[str, str], ...] = ()
    if url.host not in _MAVEN_CENTRAL:
        base = "/".join(url.raw_path.split("/")[: root + 1])
        qualifiers = (("repository_url", f"{url.scheme}://{url.authority}{base}"),)
    if segs and segs[-1].startswith("maven-metadata.xml"):
        return _maven_metadata(segs, qualifiers)
    return _maven_file(segs, qualifiers, any_extension=known)


def _maven_metadata(
    segs: tuple[str, ...], qualifiers: tuple[tuple[str, str], ...]
) -> tuple[Role, PackageURL | None] | None:
    """.../GROUP/ARTIFACT/maven-metadata.xml, or .../ARTIFACT/VERSION-SNAPSHOT/maven-metadata.xml"""
    if len(segs) >= 4 and segs[-2].endswith("-SNAPSHOT"):
        group, artifact, version = segs[:-3], segs[-3], segs[-2]
    elif len(segs) >= 3:
        group, artifact, version = segs[:-2], segs[-2], None
    else:
        return None
    purl = PackageURL(
        type="maven",
        namespace=(".".join(group),),
        name=artifact,
        version=version,
        qualifiers=qualifiers,
    )
    return Role.METADATA, purl


def _maven_file(
    segs: tuple[str, ...], qualifiers: tuple[tuple[str, str], ...], *, any_extension: bool
) -> tuple[Role, PackageURL | None] | None:
    """.../GROUP/ARTIFACT/VERSION/ARTIFACT-VERSION[-CLASSIFIER].EXT[.sha1|.asc|...]"""
    if len(segs) < 4:
        return None
    group, artifact, version, filename = segs[:-3], segs[-3], segs[-2], segs[-1]
    role = Role.ARTIFACT
    for suffix in _MAVEN_CHECKSUMS:
        while filename.endswith(suffix):
            filename = filename[: -len(suffix)]
            role = Role.METADATA
    rest = _maven_file_rest(filename, artifact, version)
    if rest is None:
        return None
    classifier, extension = rest
    if not any_extension and extension not in _MAVEN_TYPES:
        return None
    if classifier:
        qualifiers += (("classifier", classifier),)
    if extension != "jar":
        qualifiers += (("type", extension),)
    purl = PackageURL(
        type="maven",
        namespace=(".".join(group),),
        name=artifact,
        version=version,
        qualifiers=qualifiers,
    )
    return role, purl


def _maven_file_rest(filename: str, artifact: str, version: str) -> tuple[str, str] | None:
    """``(classifier, extension)`` of ``ARTIFACT-VERSION[-CLASSIFIER].EXT``, or None."""
    prefix = f"{artifact}-{version}"
    if filename.startswith(prefix):
        rest = filename[len(prefix) :]
    elif version.endswith("-SNAPSHOT"):  # a deployed snapshot: ARTIFACT-BASE-STAMP-N...
        base = f"{artifact}-{version[: -len('-SNAPSHOT')]}-"
        if not filename.startswith(base):
            return None
        stamp = _SNAPSHOT_STAMP_RE.match(filename, len(base))
        if stamp is None:
            return None
        rest = filename[stamp.end() :]
    else:
        return None
    if rest.startswith("-"):
        classifier, dot, extension = rest[1:].partition(".")
        if not classifier or not dot:
            return None
    elif rest.startswith("."):
        classifier, extension = "", rest[1:]
    else:
        return None
    return (classifier, extension) if extension else None


# ------------------------------------------------------------------------------ Go module proxy

_GO_PROXIES: Final = frozenset({"proxy.golang.org", "goproxy.io", "goproxy.cn"})
_GO_ELEMENT_RE: Final = re.compile(r"(?:[a-z0-9._~-]|![a-z])+")
_GO_VERSION_RE: Final = re.compile(r"v[0-9](?:[a-z0-9.+-]|![a-z])*")


def _go_decode(text: str) -> str:
    """Undo the proxy's case-encoding: ``!x`` is ``X`` (checked by the callers' patterns)."""
    return re.sub(r"!([a-z])", lambda m: m[1].upper(), text)


def _go_purl(module: tuple[str, ...], version: str | None) -> PackageURL | None:
    if len(module) < 2:
        return None
    return PackageURL(type="golang", namespace=module[:-1], name=module[-1], version=version)


def _go_sum_lookup(segs: tuple[str, ...]) -> PackageURL | None:
    """The module a checksum database lookup (``/lookup/MODULE@VERSION``) is about."""
    if len(segs) < 2 or segs[0] != "lookup" or "@" not in segs[-1]:
        return None
    last, _, version = segs[-1].partition("@")
    module = (*segs[1:-1], last)
    if not all(_GO_ELEMENT_RE.fullmatch(s) for s in module):
        return None
    if not _GO_VERSION_RE.fullmatch(version):
        return None
    return _go_purl(tuple(_go_decode(s) for s in module), _go_decode(version))


def _go_module(url: _URL, at: int) -> tuple[str, ...] | None:
    """The module path before ``segs[at]``, decoded; None unless it is a valid one."""
    module = url.segments[:at]
    if url.host not in _GO_PROXIES:  # a proxy under a path: the module starts at a host name
        start = next((i for i, s in enumerate(module) if "." in s), None)
        if start is None:
            return None
        module = module[start:]
    if not module or not all(_GO_ELEMENT_RE.fullmatch(s) for s in module):
        return None
    return tuple(_go_decode(s) for s in module)


def _go(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    segs = url.segments
    if url.host == "sum.golang.org":
        return Role.METADATA, _go_sum_lookup(segs)
    if "@v" in segs:
        at = segs.index("@v")
    elif segs and segs[-1] == "@latest":
        at = len(segs) - 1
    else:
        return None
    module = _go_module(url, at)
    tail = segs[at + 1 :]
    if module is None:
        return None
    if segs[at] == "@latest" or tail == ("list",):
        return Role.METADATA, _go_purl(module, None)
    version, dot, extension = tail[0].rpartition(".") if len(tail) == 1 else ("", "", "")
    if not dot or not _GO_VERSION_RE.fullmatch(version):
        return None
    purl = _go_purl(module, _go_decode(version))
    if purl is None or extension not in ("zip", "info", "mod"):
        return None
    return (Role.ARTIFACT if extension == "zip" else Role.METADATA), purl


# ------------------------------------------------------------------------------------- Debian

_DEB_VENDORS: Final = {
    "debian": "debian",
    "debian-security": "debian",
    "debian-ports": "debian",
    "debian-archive": "debian",
    "debian-debug": "debian",
    "ubuntu": "ubuntu",
    "ubuntu-ports": "ubuntu",
}
_DEB_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9+.-]+")
_DEB_VERSION_RE: Final = re.compile(r"[0-9][A-Za-z0-9.+~-]*")
_DEB_ARCH_RE: Final = re.compile(r"[a-z0-9-]+")
_DEB_BINARY_RE: Final = re.compile(r"([^_/]+)_([^_/]+)_([^_/]+)\.u?deb")
_DEB_SOURCE_RE: Final = re.compile(
    r"([^_/]+)_([^_/]+?)(\.dsc|\.debian\.tar\.[a-z0-9]+|\.diff\.gz|\.tar\.[a-z0-9]+"
    r"|\.orig(?:-[A-Za-z0-9-]+)?\.tar\.[a-z0-9]+(?:\.asc)?)"
)


def _deb(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    segs = url.segments
    if len(segs) >= 2 and segs[1] == "dists" and segs[0] in _DEB_VENDORS:
        return Role.METADATA, None  # Release, Packages, Sources, Contents: the archive's index
    if "pool" not in segs:
        return None
    at = segs.index("pool")
    vendor = _DEB_VENDORS.get(segs[at - 1]) if at else None
    rest = segs[at + 1 :]
    if rest[:1] == ("updates",):  # debian-security's pool/updates/...
        rest = rest[1:]
    if vendor is None or len(rest) != 4:
        return None
    _component, prefix, source, filename = rest
    expected = source[:4] if source.startswith("lib") and len(source) > 3 else source[:1]
    if prefix != expected or not _DEB_NAME_RE.fullmatch(source):
        return None
    binary = _DEB_BINARY_RE.fullmatch(filename)
    if binary is not None:
        name, version, arch = binary.groups()
        if not (
            _DEB_NAME_RE.fullmatch(name)
            and _DEB_VERSION_RE.fullmatch(version)
            and _DEB_ARCH_RE.fullmatch(arch)
        ):
            return None
        qualifiers = (("arch", arch),)
        purl = PackageURL(
            type="deb", namespace=(vendor,), name=name, version=version, qualifiers=qualifiers
        )
        return Role.ARTIFACT, purl
    found = _DEB_SOURCE_RE.fullmatch(filename)
    if found is None or found[1] != source or not _DEB_VERSION_RE.fullmatch(found[2]):
        return None
    # An upstream tarball (.orig) carries the upstream version only, not the package's: none.
    upstream = ".orig" in found[3]
    role = Role.METADATA if found[3].endswith(".asc") else Role.ARTIFACT
    purl = PackageURL(
        type="deb",
        namespace=(vendor,),
        name=source,
        version=None if upstream else found[2],
        qualifiers=(("arch", "source"),),
    )
    return role, purl


# ------------------------------------------------------------------------------------- GitHub

_GITHUB_OWNER_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_GITHUB_REPO_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,100}")
_ARCHIVE_SUFFIXES: Final = (".tar.gz", ".zip")


def _github_purl(
    owner: str, repo: str, version: str | None = None, file_name: str | None = None
) -> PackageURL | None:
    repo = repo.removesuffix(".git")
    if not (_GITHUB_OWNER_RE.fullmatch(owner) and _GITHUB_REPO_RE.fullmatch(repo)):
        return None
    qualifiers = (("file_name", file_name),) if file_name else ()
    return PackageURL(
        type="github",
        namespace=(owner.lower(),),
        name=repo.lower(),
        version=version or None,
        qualifiers=qualifiers,
    )


def _ref_name(ref: tuple[str, ...]) -> str:
    """``refs/tags/v1.0`` → ``v1.0``; ``refs/heads/main`` → ``main``; a commit stays itself."""
    if len(ref) >= 3 and ref[0] == "refs" and ref[1] in ("tags", "heads"):
        ref = ref[2:]
    return "/".join(ref)


def _github(url: _URL, accept: str | None) -> tuple[Role, PackageURL | None] | None:
    segs = url.segments
    if url.host == "codeload.github.com":
        # /OWNER/REPO/(tar.gz|zip|legacy.tar.gz|legacy.zip)/REF...
        if len(segs) >= 4 and segs[2] in ("tar.gz", "zip", "legacy.tar.gz", "legacy.zip"):
            purl = _github_purl(segs[0], segs[1], _ref_name(segs[3:]))
            return (Role.ARTIFACT, purl) if purl is not None else None
        return None
    if url.host == "api.github.com":
        if len(segs) >= 3 and segs[0] == "repos":
            if len(segs) >= 5 and segs[3] in ("tarball", "zipball"):
                purl = _github_purl(segs[1], segs[2], "/".join(segs[4:]))
                return (Role.ARTIFACT, purl) if purl is not None else None
            return Role.METADATA, _github_purl(segs[1], segs[2])
        return Role.METADATA, None
    if url.host not in ("github.com", "www.github.com") or len(segs) < 3:
        return None
    owner, repo, what = segs[0], segs[1], segs[2:]
    if what[:2] == ("releases", "download") and len(what) >= 4:
        tag, asset = "/".join(what[2:-1]), what[-1]
        purl = _github_purl(owner, repo, tag, asset)
        return (Role.ARTIFACT, purl) if purl is not None else None
    if what[0] == "archive" and len(what) >= 2 and what[-1].endswith(_ARCHIVE_SUFFIXES):
        last = what[-1]
        for suffix in _ARCHIVE_SUFFIXES:
            last = last.removesuffix(suffix)
        ref = _ref_name((*what[1:-1], last))
        purl = _github_purl(owner, repo, ref)
        return (Role.ARTIFACT, purl) if purl is not None and ref else None
    if what in (("info", "refs"), ("git-upload-pack",)):
        purl = _github_purl(owner, repo)
        if purl is not None:
            return (Role.METADATA if what[0] == "info" else Role.ARTIFACT), purl
    return None


# ----------------------------------------------------------------------------- anything else


def _generic(url: _URL, method: str) -> tuple[Role, PackageURL]:
    segs = url.segments
    if len(segs) >= 2 and segs[-2:] == ("info", "refs"):  # git's ref advertisement: a listing
        name = segs[-3].removesuffix(".git") if len(segs) >= 3 else url.host
        return Role.METADATA, PackageURL(type="generic", name=name or url.host)
    if segs and segs[-1] == "git-upload-pack" and method == "POST":
        repo_path = url.raw_path[: -len("/git-upload-pack")]
        name = segs[-2].removesuffix(".git") if len(segs) >= 2 else url.host
        vcs = f"git+{url.scheme}://{url.authority}{repo_path}"
        return Role.ARTIFACT, PackageURL(
            type="generic", name=name or url.host, qualifiers=(("vcs_url", vcs),)
        )
    name = segs[-1] if segs else url.host
    qualifiers = (("download_url", url.text),) if method == "GET" else ()
    return Role.ARTIFACT, PackageURL(type="generic", name=name or "-", qualifiers=qualifiers)


def identify(
    method: str, url: str, *, status: int = 200, accept: str | None = None
) -> Identification:
    """What the answer to ``method url`` (with ``status``; ``accept`` as sent) is.

    ``accept`` helps on hosts that are not the registries' own: pip and npm ask for their
    indexes with media types of their own. Never raises.
    """
    parts = _split(url)
    found: tuple[Role, PackageURL | None] | None = None
    registry = None
    for name, recognise in _RECOGNISERS:
        found = recognise(parts, accept)
        if found is not None:
            registry = name
            break
    if found is None:
        found = _generic(parts, method)
    role, purl = found
    if not 200 <= status < 300 or status == 204 or method == "HEAD":
        role = Role.NO_CONTENT
    return Identification(role=role, purl=purl, registry=registry)


_RECOGNISERS: Final = (
    # the ones bound to hosts of their own first: a wheel attached to a GitHub release is a
    # GitHub release asset, not a file from PyPI
    ("github", _github),
    ("deb", _deb),
    ("golang", _go),
    ("cargo", _crates),
    ("npm", _npm),
    ("pypi", _pypi),
    ("maven", _maven),
)
