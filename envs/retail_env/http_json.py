"""What the retail env's two HTTP services share: a quiet JSON handler whose replies carry no
Date header (two recordings are byte-identical), a bounded JSON body, and a command line that
serves it until SIGTERM (`services:` starts them as ``python retail_env/NAME.py --port P``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    max_body_bytes = 16 * 1024

    def send_response(self, code: int, message: str | None = None) -> None:
        self.log_request(code)  # no Date header: two recordings are byte-identical
        self.send_response_only(code, message)
        self.send_header("Server", self.version_string())

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, code: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, sort_keys=True).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json_body(self) -> Any:
        """The request's JSON body; None once an error reply (413, 400) has been sent."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.max_body_bytes:
            self._reply(413, {"error": "body too large"})
            return None
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._reply(400, {"error": "body is not JSON"})
            return None


def serve(handler: type[JSONHandler], description: str, port: int, argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
