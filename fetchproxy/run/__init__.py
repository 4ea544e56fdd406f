"""Running the proxy for a build: the sandboxed build (``build``), its private directory
(``rundir``) and environment (``buildenv``), the relay of the user sandbox (``relay``),
``serve`` (``serve``), which engine runs (``engines``, ``settings``) and how a run ends
(``outcome``: the exit status and the end-of-run text).
"""
