"""Replay: the decisions (``decisions``, ``ranges``, pure), one :class:`Replayer` that makes them
for both engines, its books (``book``), the blobs it serves verified (``blobs``), and
fetchproxy's own replay engine: the HTTP/1.1 server (``server``, ``http1``) with a certificate
per host (``certs``).
"""
