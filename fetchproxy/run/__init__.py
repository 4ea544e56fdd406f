"""Running the proxy for a build: the sandboxed build (``build``), its private directory
(``rundir``) and environment (``buildenv``), the relay of the user sandbox (``relay``),
``serve`` (``serve``), which engine runs (``engines``, ``settings``), how a run ends
(``outcome``: the exit status and the end-of-run text) and the attestation a replay writes at
its end (``attest``).
"""
