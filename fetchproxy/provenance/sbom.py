"""SBOMs of what a build fetched: CycloneDX 1.6 JSON and SPDX 2.3 JSON.

One component (SPDX: package) per answer that carried a file: every 2xx answer except 204 and
HEAD. Redirects and errors carry none; a file reached through a redirect is named after the
redirect's source when only the source's URL says what it is (a GitHub release asset stored on
a CDN). Each has its BLAKE3 hash (both specs name the algorithm), the URL it was fetched from,
and, for package artifacts, its package URL (CycloneDX ``purl``; SPDX ``PACKAGE-MANAGER``
external reference).

Metadata fetches (indexes, packuments, listings) are listed, because the build read them, but
never as packages: CycloneDX type ``data`` and SPDX purpose ``OTHER``, no purl of their own,
the property / comment ``fetchproxy:role = metadata`` and the purl they describe in
``fetchproxy:describes``. Scanners that match purls see only real packages.

Deterministic: no timestamp but SPDX's required ``created`` (a parameter), and the CycloneDX
serial number and the SPDX namespace are UUIDs derived from the document's own content.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import blake3

from fetchproxy.digest import hex_of
from fetchproxy.provenance.entry import Entry
from fetchproxy.provenance.fetchset import entry_line, fetch_set_digest
from fetchproxy.provenance.jcs import canonical_json
from fetchproxy.provenance.purl import PackageURL, Role, identify
from fetchproxy.provenance.statement import LockReference

URI_BASE: Final = "https://fetchproxy.dev"
"""The namespace the SPDX document namespaces and the CycloneDX serial numbers are made in."""
MAX_REDIRECTS: Final = 10
_TIMESTAMP_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_SAFE_URI_RE: Final = re.compile(r"https?://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
"""A URL a CycloneDX reader accepts as an IRI. Lock URLs always are (they are normalized); an
entry whose URL is not gets no external reference."""
_SPDX_LOCATION_RE: Final = re.compile(
    r"https?://(?:[a-z0-9]+(?:[-.][a-z0-9]+)*\.[a-z]{2,5})(?::[0-9]{1,5})?(?:/[^\s]*)?",
    re.IGNORECASE,
)
"""SPDX 2.3's download location grammar for http(s) (section 7.7): a host *name* with a
top-level domain of 2 to 5 letters. An IP address or a one-label host is not one; such a
package's location is NOASSERTION and its URL goes into its comment."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Component:
    """One fetched file as both SBOMs describe it."""

    entry: Entry
    ref: str
    """``fetch-`` and 32 hex digits of the key's BLAKE3: unique per request, stable."""
    role: Role
    purl: PackageURL | None
    """The package an artifact is, or the one metadata describes."""
    registry: str | None
    redirected_from: str | None
    """The URL whose redirect led here, when the purl was inferred from it."""

    @property
    def name(self) -> str:
        if self.purl is not None:
            return self.purl.name
        segments = [s for s in self.entry.url.split("?")[0].split("/")[3:] if s]
        return segments[-1] if segments else self.entry.url.split("/")[2]

    @property
    def package_purl(self) -> str | None:
        """The purl as a package identifier: artifacts only."""
        return str(self.purl) if self.role is Role.ARTIFACT and self.purl is not None else None

    def properties(self) -> list[tuple[str, str]]:
        props = [
            ("fetchproxy:method", self.entry.method),
            ("fetchproxy:role", self.role.value),
            ("fetchproxy:size", str(self.entry.size)),
            ("fetchproxy:status", str(self.entry.status)),
        ]
        if self.role is Role.METADATA and self.purl is not None:
            props.append(("fetchproxy:describes", str(self.purl)))
        if self.redirected_from is not None:
            props.append(("fetchproxy:redirected-from", self.redirected_from))
        return sorted(props)


def components(entries: Iterable[Entry]) -> list[Component]:
    """The files among ``entries``, in fetch-set order, each identified."""
    distinct = {entry_line(e): e for e in entries}
    ordered = [distinct[line] for line in sorted(distinct)]
    sources: dict[str, list[Entry]] = {}
    for entry in ordered:
        location = entry.location
        if 300 <= entry.status < 400 and entry.method == "GET" and location is not None:
            sources.setdefault(location, []).append(entry)
    found = []
    for entry in ordered:
        identified = identify(entry.method, entry.url, status=entry.status, accept=entry.accept)
        if identified.role is Role.NO_CONTENT:
            continue
        role: Role = identified.role
        purl, registry, origin = identified.purl, identified.registry, None
        if registry is None:
            source = _redirect_source(entry.url, sources)
            if source is not None:
                upstream = identify("GET", source.url, accept=source.accept)
                role, purl, registry = upstream.role, upstream.purl, upstream.registry
                origin = source.url
        key_hash = blake3.blake3(canonical_json(entry.key_fields())).hexdigest()[:32]
        found.append(
            Component(
                entry=entry,
                ref=f"fetch-{key_hash}",
                role=role,
                purl=purl,
                registry=registry,
                redirected_from=origin,
            )
        )
    return found


def _redirect_source(url: str, sources: Mapping[str, list[Entry]]) -> Entry | None:
    """The nearest redirect leading to ``url`` whose own URL names a registry's package."""
    seen = {url}
    for _ in range(MAX_REDIRECTS):
        candidates = sources.get(url)
        if not candidates:
            return None
        source = candidates[0]  # fetch-set order: the same choice every time
        if source.url in seen:
            return None
        if identify("GET", source.url, accept=source.accept).registry is not None:
            return source
        seen.add(source.url)
        url = source.url
    return None


def _document_uuid(kind: str, document: Mapping[str, object]) -> str:
    content = blake3.blake3(canonical_json(document)).hexdigest()
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{URI_BASE}/sbom/{kind}/{content}"))


def _subject_properties(entries: list[Entry], lock: LockReference | None) -> list[dict[str, str]]:
    props = [{"name": "fetchproxy:fetch-set-digest", "value": fetch_set_digest(entries)}]
    if lock is not None:
        props.append({"name": "fetchproxy:lock-blake3", "value": lock.blake3})
    return props


# ------------------------------------------------------------------------------------ CycloneDX


def cyclonedx(
    entries: Iterable[Entry],
    *,
    name: str,
    fetchproxy_version: str,
    lock: LockReference | None = None,
) -> dict[str, object]:
    """A CycloneDX 1.6 BOM whose subject (``metadata.component``) is the fetch set ``name``."""
    listed = list(entries)
    items = components(listed)
    bom: dict[str, object] = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "version": 1,
        "metadata": {
            "tools": {
                "components": [
                    {"type": "application", "name": "fetchproxy", "version": fetchproxy_version}
                ]
            },
            "component": {
                "type": "application",
                "bom-ref": "fetch-set",
                "name": name,
                "properties": _subject_properties(listed, lock),
            },
        },
        "components": [_cyclonedx_component(c) for c in items],
    }
    return {"serialNumber": f"urn:uuid:{_document_uuid('cyclonedx', bom)}", **bom}


def _cyclonedx_component(item: Component) -> dict[str, object]:
    if item.role is Role.METADATA:
        kind = "data"
    else:
        kind = "library" if item.registry is not None else "file"
    component: dict[str, object] = {"type": kind, "bom-ref": item.ref, "name": item.name}
    if item.purl is not None and item.purl.namespace and item.registry is not None:
        component["group"] = "/".join(item.purl.namespace)
    if item.purl is not None and item.purl.version and item.registry is not None:
        component["version"] = item.purl.version
    component["hashes"] = [{"alg": "BLAKE3", "content": hex_of(item.entry.digest)}]
    if item.package_purl is not None:
        component["purl"] = item.package_purl
    if _SAFE_URI_RE.fullmatch(item.entry.url):  # a lock's URLs are: they are normalized
        component["externalReferences"] = [{"type": "distribution", "url": item.entry.url}]
    component["properties"] = [{"name": n, "value": v} for n, v in item.properties()]
    return component


# ----------------------------------------------------------------------------------------- SPDX


def spdx(
    entries: Iterable[Entry],
    *,
    name: str,
    created: str,
    fetchproxy_version: str,
    lock: LockReference | None = None,
) -> dict[str, object]:
    """An SPDX 2.3 document: the fetch set ``name`` CONTAINS one package per fetched file.

    ``created`` (``YYYY-MM-DDThh:mm:ssZ``) is required by SPDX; pass a fixed value (e.g. from
    ``SOURCE_DATE_EPOCH``) for a reproducible document.
    """
    if not _TIMESTAMP_RE.fullmatch(created):
        raise ValueError(f"created: {created!r} is not YYYY-MM-DDThh:mm:ssZ")
    listed = list(entries)
    items = components(listed)
    root: dict[str, object] = {
        "SPDXID": "SPDXRef-fetch-set",
        "name": name,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "primaryPackagePurpose": "OTHER",
        "comment": "The files a build fetched through fetchproxy; fetch-set digest "
        + fetch_set_digest(listed),
    }
    if lock is not None:
        root["checksums"] = [
            {"algorithm": "BLAKE3", "checksumValue": lock.blake3},
            {"algorithm": "SHA256", "checksumValue": lock.sha256},
        ]
    relationships = [
        {
            "spdxElementId": "SPDXRef-DOCUMENT",
            "relationshipType": "DESCRIBES",
            "relatedSpdxElement": "SPDXRef-fetch-set",
        }
    ]
    relationships.extend(
        {
            "spdxElementId": "SPDXRef-fetch-set",
            "relationshipType": "CONTAINS",
            "relatedSpdxElement": f"SPDXRef-{c.ref}",
        }
        for c in items
    )
    document: dict[str, object] = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"fetchproxy fetch set {name}",
        "creationInfo": {
            "created": created,
            "creators": [f"Tool: fetchproxy-{fetchproxy_version}"],
        },
        "packages": [root, *(_spdx_package(c) for c in items)],
        "relationships": relationships,
    }
    namespace = f"{URI_BASE}/spdx/{_document_uuid('spdx', document)}"
    return {**document, "documentNamespace": namespace}


def _spdx_package(item: Component) -> dict[str, object]:
    url = item.entry.url
    package: dict[str, object] = {"SPDXID": f"SPDXRef-{item.ref}", "name": item.name}
    if item.purl is not None and item.purl.version and item.registry is not None:
        package["versionInfo"] = item.purl.version
    located = bool(_SAFE_URI_RE.fullmatch(url) and _SPDX_LOCATION_RE.fullmatch(url))
    package["downloadLocation"] = url if located else "NOASSERTION"
    package["filesAnalyzed"] = False
    package["checksums"] = [{"algorithm": "BLAKE3", "checksumValue": hex_of(item.entry.digest)}]
    if item.package_purl is not None:
        package["externalRefs"] = [
            {
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": item.package_purl,
            }
        ]
    if item.role is Role.METADATA:
        package["primaryPackagePurpose"] = "OTHER"
    else:
        package["primaryPackagePurpose"] = "LIBRARY" if item.registry is not None else "FILE"
    notes = item.properties()
    if not located:
        notes.append(("fetchproxy:url", url))
    package["comment"] = "; ".join(f"{n} = {v}" for n, v in notes)
    return package


def render(document: Mapping[str, object]) -> str:
    """A document as written to a file: indented JSON, keys in the order built, a newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
