"""The retail env's judge: a small deterministic OpenAI-compatible chat-completions server.

It stands in for an LLM judge (no model, no key): `rlenv record` (and a `record_missing` miss
in `rlenv run`) starts it from the spec's `services:` block and asks it, at
`http://judge.rlenv.internal/v1`, to grade the agent's last reply with the spec's rubric. The
rubric's lines ``Order: ...`` and ``Agent's last reply: ...`` are read; the reply scores 5 when
it names the order and says it was cancelled, refunded or has shipped, 3 when it names the order
only, 1 otherwise, with a sentence of reasoning before ``score: N``.

    python envs/retail_env/judge_service.py --port PORT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 256 * 1024


def grade(rubric: str) -> str:
    """The judge's reply to a rendered rubric: reasoning, then ``score: N`` (1-5)."""
    order = re.search(r"^Order: *(\S*)", rubric, re.MULTILINE)
    reply = re.search(r"^Agent's last reply: *(.*)$", rubric, re.MULTILINE | re.DOTALL)
    order_id = order.group(1) if order else ""
    said = reply.group(1).strip() if reply else ""
    if order_id and order_id in said and re.search(r"\b(cancelled|refunded|shipped)\b", said):
        return f"The reply names order {order_id} and confirms what was done. score: 5"
    if order_id and order_id in said:
        return f"The reply names order {order_id} but does not confirm an outcome. score: 3"
    return f"The reply does not tell the customer what happened to order {order_id}. score: 1"


def completion(request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages") or []
    rubric = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
    content = grade(rubric)
    body = json.dumps(request, sort_keys=True).encode()
    return {
        "id": "chatcmpl-" + hashlib.sha256(body).hexdigest()[:16],
        "object": "chat.completion",
        "created": 0,
        "model": str(request.get("model") or "retail-judge"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": len(rubric.split()),
            "completion_tokens": len(content.split()),
            "total_tokens": len(rubric.split()) + len(content.split()),
        },
    }


class Handler(BaseHTTPRequestHandler):
    server_version = "retail-judge/1"

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

    def do_GET(self) -> None:
        if self.path in ("/health", "/v1/models"):
            self._reply(200, {"object": "list", "data": [{"id": "retail-judge"}]})
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._reply(404, {"error": f"no route {self.path}"})
            return
        if length > MAX_BODY_BYTES:
            self._reply(413, {"error": "body too large"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._reply(400, {"error": "body is not JSON"})
            return
        if not isinstance(request, dict):
            self._reply(400, {"error": "body is not a JSON object"})
            return
        self._reply(200, completion(request))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The retail env's deterministic judge.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8767)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
