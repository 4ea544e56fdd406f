"""The content-addressed store of response bodies (CAS), named by BLAKE3 digest.

Recording streams a body into ``Store.writer()``: each ``update(chunk)`` hashes
and writes, ``commit()`` publishes the bytes under their digest. Replay streams
it back with ``Store.open(digest)``, whose reader rehashes every byte and never
hands out the last chunk of a corrupt blob (replay's ``VerifiedBlobs`` adds the
rule for parts of a blob). Modules:

- ``layout``: where the store lives and how digests map to paths (pure);
- ``base``: the ``Store`` interface and ``BlobWriter``;
- ``reader``: ``BlobReader`` and ``BlobIdentity`` (which file, in which state);
- ``errors``: missing, corrupt (not a regular file, changed while served), failed;
- ``disk``: ``DiskStore``, the real thing (``<root>/blake3/<2 hex>/<62 hex>``);
- ``diskwriter`` and ``direct``: how it writes a blob (temp file, fsync, link; ``O_DIRECT``);
- ``fileops``: how ``DiskStore`` touches files: only regular files are read, nothing is
  renamed, linked or unlinked through a symbolic link;
- ``memory``: ``MemoryStore``, a dict with identical behaviour, for tests.

See docs/store.md for the guarantees and the measured numbers.
"""

from fetchproxy.store.base import (
    BlobIdentity,
    BlobReader,
    BlobWriter,
    ChangedBlobError,
    CorruptBlobError,
    MissingBlobError,
    NotRegularBlobError,
    Quarantined,
    Store,
    StoreError,
)
from fetchproxy.store.disk import DiskBlobWriter, DiskStore, TempFile, open_store
from fetchproxy.store.layout import default_store_path
from fetchproxy.store.memory import MemoryBlobWriter, MemoryStore

__all__ = [
    "BlobIdentity",
    "BlobReader",
    "BlobWriter",
    "ChangedBlobError",
    "CorruptBlobError",
    "DiskBlobWriter",
    "DiskStore",
    "MemoryBlobWriter",
    "MemoryStore",
    "MissingBlobError",
    "NotRegularBlobError",
    "Quarantined",
    "Store",
    "StoreError",
    "TempFile",
    "default_store_path",
    "open_store",
]
