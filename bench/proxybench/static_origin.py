"""An HTTPS file server on 127.0.0.1, the benchmark's origin when nginx is not installed.

    python bench/proxybench/static_origin.py --port PORT --root DIR --cert PEM --key PEM

HTTP/1.1 with keep-alive and content-length, one thread per connection, TLS handshakes in the
connection's thread. Much slower than nginx: its "direct" rows are then not the physical limit.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import socket
import ssl
from pathlib import Path
from typing import Any


class _Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ANN401
        pass


class TLSFileServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, root: Path, context: ssl.SSLContext) -> None:
        handler = functools.partial(_Handler, directory=str(root))
        super().__init__(("127.0.0.1", port), handler)
        self.context = context

    def finish_request(
        self,
        request: socket.socket | tuple[bytes, socket.socket],
        client_address: Any,  # noqa: ANN401
    ) -> None:
        assert isinstance(request, socket.socket)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        super().finish_request(tls, client_address)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    args = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["http/1.1"])
    with TLSFileServer(args.port, args.root, context) as server:
        print(f"static origin: listening on https://127.0.0.1:{args.port}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
