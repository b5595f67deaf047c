#!/usr/bin/env python3
"""An LLM-style upstream for envoy/usage.yaml: every request is answered with
a streamed body (server-sent events, one chunk at a time) and the tokens it
"used" in the `x-usage-tokens` response header, which Envoy charges to the
caller's budget when the stream ends. Standard library only.

    python3 envoy/llm.py --host 127.0.0.1 --port 8000

What a request used is the `x-tokens` request header (default 100), so a
demo or a test chooses the cost; `x-delay-ms` (default 0, at most 60,000)
spreads the stream over that long, so requests can be held in flight; with
`x-hold: 1` a response waits (at most 30 s) while the gate is shut
(`GET /gate/shut`, then `GET /gate/open`), so a test holds its requests in
flight for as long as it needs. `GET /in-flight` says how many streams are
open now and at most so far, as JSON. Port 0 picks a free port; the first
line on stdout says which.
"""

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

# The demo upstream beside this file serves the same way.
from upstream import serve

CHUNKS = 4
LOCK = threading.Lock()
STATE = {"now": 0, "peak": 0, "served": 0}
GATE = threading.Event()
GATE.set()


class Model(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _count(self, by):
        with LOCK:
            STATE["now"] += by
            STATE["peak"] = max(STATE["peak"], STATE["now"])
            if by > 0:
                STATE["served"] += 1

    def do_GET(self):
        if self.path in ("/gate/shut", "/gate/open"):
            (GATE.clear if self.path == "/gate/shut" else GATE.set)()
            self.send_response(204)
            self.end_headers()
            return None
        if self.path != "/in-flight":
            return self.do_POST()
        with LOCK:
            body = json.dumps(STATE).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        tokens = int(self.headers.get("x-tokens") or 100)
        # At most a minute: the route is open to any client.
        delay = min(int(self.headers.get("x-delay-ms") or 0), 60_000) / 1000.0
        self._count(1)
        if self.headers.get("x-hold"):
            GATE.wait(timeout=30)
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("x-usage-tokens", str(tokens))
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for i in range(CHUNKS):
                time.sleep(delay / CHUNKS)
                data = f"data: {json.dumps({'chunk': i})}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            self._count(-1)

    def log_message(self, *args):
        pass


def main():
    return serve(Model, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
