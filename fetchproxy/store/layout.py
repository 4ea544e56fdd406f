"""Where the store lives and how blobs are named inside it (pure: no I/O).

A blob with digest ``blake3:abcd…`` lives at ``<root>/blake3/ab/cd…``: the
algorithm, a two-hex-digit shard, then the remaining 62 hex digits. Temp files
live in ``<root>/tmp/`` (the same file system, so a rename publishes them) and
end in ``.tmp``; listings of blobs never look there. A blob being pruned waits
in ``tmp/`` under a name that says which blob it is; corrupt blobs moved out of
the way go to ``<root>/corrupt/blake3-<64 hex>[-N]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from fetchproxy.digest import ALGORITHM, Digest, from_hex, hex_of, parse_digest

SHARD_LENGTH = 2
TEMP_DIR = "tmp"
TEMP_SUFFIX = ".tmp"
CORRUPT_DIR = "corrupt"

_SHARD_RE = re.compile(r"[0-9a-f]{2}")
_REST_RE = re.compile(r"[0-9a-f]{62}")
_PRUNED_RE = re.compile(r"blob-[0-9]+-gc-([0-9a-f]{64})" + re.escape(TEMP_SUFFIX))


def blob_relpath(digest: Digest) -> PurePosixPath:
    """``blake3/<2 hex>/<62 hex>`` for ``digest``, validated first (``ValueError``)."""
    hex_digest = hex_of(parse_digest(digest))
    return PurePosixPath(ALGORITHM, hex_digest[:SHARD_LENGTH], hex_digest[SHARD_LENGTH:])


def is_shard_name(name: str) -> bool:
    """Whether ``name`` can be a shard directory (two lowercase hex digits)."""
    return _SHARD_RE.fullmatch(name) is not None


def digest_of_entry(shard: str, name: str) -> Digest | None:
    """The digest a file ``<shard>/<name>`` stands for, or ``None`` for anything else."""
    if is_shard_name(shard) and _REST_RE.fullmatch(name):
        return from_hex(shard + name)
    return None


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one of the store's temp files (see ``temp_prefix``)."""
    return name.startswith("blob-") and name.endswith(TEMP_SUFFIX)


def temp_prefix(pid: int) -> str:
    """The start of a temp file's name: it says which process wrote it."""
    return f"blob-{pid}-"


def pruned_name(digest: Digest, pid: int) -> str:
    """The name in ``tmp/`` of ``digest`` while process ``pid`` prunes it."""
    return f"{temp_prefix(pid)}gc-{hex_of(parse_digest(digest))}{TEMP_SUFFIX}"


def digest_of_pruned(name: str) -> Digest | None:
    """The blob a ``pruned_name`` stands for; ``None`` for any other name."""
    match = _PRUNED_RE.fullmatch(name)
    return from_hex(match.group(1)) if match is not None else None


def moving_name(digest: Digest, pid: int) -> str:
    """The private name in ``corrupt/`` of ``digest`` while process ``pid`` checks it once more."""
    return f".moving-{pid}-{hex_of(parse_digest(digest))}"


def quarantine_name(digest: Digest, attempt: int) -> str:
    """``blake3-<hex>``, then ``blake3-<hex>-2``…: a corrupt blob's names in ``corrupt/``."""
    suffix = "" if attempt == 1 else f"-{attempt}"
    return f"{ALGORITHM}-{hex_of(parse_digest(digest))}{suffix}"


def default_store_path(environ: Mapping[str, str] = os.environ) -> Path:
    """The store to use when ``--store`` is not given.

    ``$FETCHPROXY_STORE``, else ``$XDG_CACHE_HOME/fetchproxy/store``, else
    ``~/.cache/fetchproxy/store``. Empty values count as unset and, as the XDG
    spec asks, a relative ``XDG_CACHE_HOME`` is ignored.
    """
    explicit = environ.get("FETCHPROXY_STORE", "")
    if explicit:
        return Path(explicit)
    cache = environ.get("XDG_CACHE_HOME", "")
    if not (cache and Path(cache).is_absolute()):
        home = environ.get("HOME", "")
        cache = str(Path(home) / ".cache") if home else str(Path.home() / ".cache")
    return Path(cache) / "fetchproxy" / "store"
