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

import hashlib
import json
import re
import sys
from typing import Any

from http_json import JSONHandler, serve  # beside this file: run as a script by `services:`

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


class Handler(JSONHandler):
    server_version = "retail-judge/1"
    max_body_bytes = MAX_BODY_BYTES

    def do_GET(self) -> None:
        if self.path in ("/health", "/v1/models"):
            self._reply(200, {"object": "list", "data": [{"id": "retail-judge"}]})
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._reply(404, {"error": f"no route {self.path}"})
            return
        request = self._json_body()
        if request is None:
            return
        if not isinstance(request, dict):
            self._reply(400, {"error": "body is not a JSON object"})
            return
        self._reply(200, completion(request))


def main(argv: list[str] | None = None) -> int:
    return serve(Handler, "The retail env's deterministic judge.", 8767, argv)


if __name__ == "__main__":
    sys.exit(main())
