"""Request → key: everything that decides under which key a fetch is recorded and looked up.

Pure: no I/O, no mitmproxy. ``rules`` (:class:`KeyRules`) is the one place a request becomes a
key, for every engine; ``url`` normalizes URLs and makes them fit for messages; ``request`` is
the key itself; ``bodies`` and ``gitbody`` turn a request body into what its digest is taken
over; ``intercepted`` names the server of a connection the sandbox redirected to the proxy.
"""
