#!/usr/bin/env python3
"""The demo upstream behind Envoy: answers every request with 200 and a JSON
echo of what it received (method, path, the client IP Envoy derived), so that
you can see what passes the limiter. Standard library only.

    python3 envoy/upstream.py --host 127.0.0.1 --port 8000

Port 0 picks a free port; the first line on stdout says which.
"""

import argparse
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Separate header and body writes would otherwise stall on Nagle.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "client_ip": self.headers.get("x-envoy-external-address"),
                "request_id": self.headers.get("x-request-id"),
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: a burst of new connections
    # from Envoy overflows it, and a dropped SYN is resent only after 1 s,
    # as long as Envoy's connect timeout, so the request fails with 503.
    request_queue_size = 1024
    daemon_threads = True


def serve(handler, description):
    """Serves `handler` on --host and --port, saying the port first (the
    LLM stand-in, envoy/llm.py, serves the same way)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = Server((args.host, args.port), handler)
    host, port = server.server_address[:2]
    print(f"listening on {host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def main():
    return serve(Echo, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
