"""Provenance: what a build was made of, in the words other supply-chain tools read.

Pure functions over values; no files, sockets or clock (a timestamp SPDX requires is a
parameter). The input is :class:`~fetchproxy.provenance.entry.Entry`, one fetch's request key
and answer; ``entry.py`` alone knows the lock model (one adapter, :func:`entry_from_fetch`).

- ``jcs.py``: canonical JSON (RFC 8785), the bytes every digest and signature here is over.
- ``fetchset.py``: the fetch-set digest, one digest of a set of entries, independent of order
  and of the lock's text; the construction is in ``docs/provenance.md``.
- ``purl.py``: what a fetch's URL says it is: a package artifact (with its package URL),
  metadata about packages (an index, a packument), or no file at all (a redirect, an error).
- ``statement.py``: the in-toto Statement a replay writes (predicate
  ``https://fetchproxy.dev/fetch-set/v1``) and the check ``attest verify`` makes against a lock.
- ``dsse.py``: DSSE envelopes signed and verified with Ed25519 or ECDSA P-256 keys.
- ``attestation.py``: ``attest verify``'s decision: an envelope (or a bare statement) checked
  against a lock, bad input told apart from an attestation that does not hold.
- ``sbom.py``: CycloneDX 1.6 and SPDX 2.3 documents, one component per fetched file.
- ``servedlog.py``: what a replay served, read back from its event log (``lock sbom --served``).

What uses them: the replay book (the fetch-set digest at a replay's end), ``run/attest.py``
(``replay --attest``), ``review/packages.py`` (the package view of a lock diff) and the commands
in ``cli/provenance.py`` and ``cli/attest.py``.

Where a decision is made (the predicate, how metadata is marked, the fetch-set construction),
``docs/provenance.md`` says why.
"""
