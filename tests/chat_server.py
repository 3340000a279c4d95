"""A small, real OpenAI-compatible chat-completions server for tests and benchmarks.

It speaks `POST /v1/chat/completions` over HTTP/1.1 (keep-alive, one thread per connection) and
answers with a deterministic "model":

- tools offered and the last message is the user's: a tool call to the first tool, with
  arguments {"query": <user content>} (or {} when that tool has no "query" parameter);
- the last message is a tool result: a final answer, by default its first 60 characters
  (pass `answer=callable(messages) -> str` to change the rule);
- otherwise: "echo: <last user content>".

`stop` cuts the answer at the first stop string and `max_tokens` truncates it (whitespace
tokens, finish_reason "length"); usage counts whitespace tokens; `logprobs: true` returns a
deterministic logprob per token. The response header `X-Received-Body-Sha256` is the sha256 of
the raw request body; every parsed request body is kept, in arrival order, in `received`.

Faults are injected per request, from `fault_rules` (a substring of the conversation's first
user message -> fault, for every request of that conversation) or else the `faults` plan (a
list consumed one per request) or else `default_fault`:

    "ok"            normal reply
    "500", "503"..  that HTTP status with an error body (any 3-digit code)
    "429:N"         HTTP 429 with Retry-After N ("429" alone: no Retry-After)
    "hang"          no reply for `hang_s` seconds (longer than the client timeout), then close
    "close"         close the connection without a response
    "garbage"       200 with a body that is not JSON
    "no_choices"    200 with JSON that has no choices
    "bad_tool_call" 200 with a tool call whose arguments are invalid JSON
    "no_tool_name"  200 with a tool call without a function name
    "unknown_tool"  200 with a tool call naming a tool that was not offered
    "no_tool_id"    the normal reply with the tool call ids removed

Run standalone: `python tests/chat_server.py --port 0 --latency-ms 20` prints
`listening on http://127.0.0.1:PORT` and serves until interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AnswerRule = Callable[[list[dict[str, Any]]], str]


def default_answer(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1].get("content") or "")[:60]


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def _first_user(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


class ChatServer(ThreadingHTTPServer):
    """The server object: configuration, fault plan and the log of what it received."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        latency_s: float = 0.0,
        faults: list[str] | None = None,
        default_fault: str = "ok",
        fault_rules: dict[str, str] | None = None,
        hang_s: float = 30.0,
        models: set[str] | None = None,
        answer: AnswerRule | None = None,
    ) -> None:
        super().__init__(address, ChatHandler)
        self.latency_s = latency_s
        self.faults: list[str] = list(faults or [])
        self.default_fault = default_fault
        self.fault_rules: dict[str, str] = dict(fault_rules or {})
        self.hang_s = hang_s
        self.models = models
        self.answer: AnswerRule = answer or default_answer
        self.received: list[Any] = []
        #: one entry per request, aligned with `received`:
        #: {"fault", "time" (monotonic), "sha256" (of the raw body), "authorization" (header),
        #:  "peer" (the client's address: one per TCP connection, so reuse is countable)}
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def admit(
        self,
        body: Any,
        digest: str,
        authorization: str | None = None,
        peer: tuple[str, int] | None = None,
    ) -> str:
        """Record a request and choose its fault (atomically, so the plan is consumed in order)."""
        with self.lock:
            fault = None
            if isinstance(body, dict) and isinstance(body.get("messages"), list):
                first = _first_user(body["messages"])
                for needle, rule in self.fault_rules.items():
                    if needle in first:
                        fault = rule
                        break
            if fault is None:
                fault = self.faults.pop(0) if self.faults else self.default_fault
            self.received.append(body)
            self.log.append(
                {
                    "fault": fault,
                    "time": time.monotonic(),
                    "sha256": digest,
                    "authorization": authorization,
                    "peer": peer,
                }
            )
            return fault

    def stop(self) -> None:
        """Release hung requests, stop serving and close the listening socket."""
        self.stopping.set()
        self.shutdown()
        self.server_close()


def reply_for(server: ChatServer, body: dict[str, Any], fault: str) -> dict[str, Any]:
    """The deterministic model's chat.completion object for a request."""
    messages = body["messages"]
    tools = body.get("tools") or []
    last = messages[-1] if messages else {}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    prompt_tokens = sum(_words(message.get("content")) for message in messages)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    completion_text = ""
    if (
        tools
        and last.get("role") == "user"
        or fault in ("bad_tool_call", "no_tool_name", "unknown_tool")
    ):
        function = (tools[0].get("function") or {}) if tools else {}
        properties = (function.get("parameters") or {}).get("properties") or {}
        arguments = {"query": last.get("content")} if "query" in properties else {}
        encoded = json.dumps(arguments)
        call: dict[str, Any] = {
            "id": f"call_{digest[:12]}",
            "type": "function",
            "function": {"name": function.get("name", "tool"), "arguments": encoded},
        }
        if fault == "bad_tool_call":
            call["function"]["arguments"] = encoded[:-1] or "{"
        elif fault == "no_tool_name":
            del call["function"]["name"]
        elif fault == "unknown_tool":
            call["function"]["name"] = "no_such_tool"
        elif fault == "no_tool_id":
            del call["id"]
        message["tool_calls"] = [call]
        finish = "tool_calls"
        completion_text = call["function"]["arguments"]
    else:
        if last.get("role") == "tool":
            text = server.answer(messages)
        else:
            user = [m for m in messages if m.get("role") == "user"]
            text = f"echo: {user[-1].get('content') if user else ''}"
        stops = body.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        for stop in stops:
            if stop and stop in text:
                text = text[: text.index(stop)]
        words = text.split()
        limit = body.get("max_tokens")
        if isinstance(limit, int) and len(words) > limit:
            text, finish = " ".join(words[:limit]), "length"
        message["content"] = text
        completion_text = text
    completion_tokens = _words(completion_text)
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if body.get("logprobs"):
        choice["logprobs"] = {
            "content": [
                {
                    "token": token,
                    "logprob": -round(len(token) / 10, 4),
                    "bytes": list(token.encode()),
                    "top_logprobs": [],
                }
                for token in completion_text.split()
            ]
        }
    return {
        "id": f"chatcmpl-{digest[:16]}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ChatHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: ChatServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return None

    def _send(
        self,
        status: int,
        payload: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        body = {"error": {"message": message, "type": "error", "code": status}}
        self._send(status, json.dumps(body).encode(), headers)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path.rstrip("/") == "/v1/models":
            names = sorted(self.server.models or {"any"})
            data = [{"id": name, "object": "model"} for name in names]
            self._send(200, json.dumps({"object": "list", "data": data}).encode())
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        digest = hashlib.sha256(raw).hexdigest()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route {self.path}")
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        server = self.server
        fault = server.admit(
            body if body is not None else raw,
            digest,
            self.headers.get("Authorization"),
            self.client_address[:2],
        )
        headers = {"X-Received-Body-Sha256": digest}
        if server.latency_s:
            server.stopping.wait(server.latency_s)
        if fault == "hang":
            server.stopping.wait(server.hang_s)
            self.close_connection = True
            return
        if fault == "close":
            self.close_connection = True
            return
        if fault.split(":")[0].isdigit():
            status, _, after = fault.partition(":")
            if after:
                headers["Retry-After"] = after
            self._error(int(status), f"injected HTTP {status}", headers)
            return
        if fault == "garbage":
            self._send(200, b"<html>upstream exploded", headers)
            return
        if fault == "no_choices":
            self._send(200, json.dumps({"object": "chat.completion"}).encode(), headers)
            return
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("messages"), list)
            or not body["messages"]
        ):
            self._error(
                400, "request body must be a JSON object with non-empty 'messages'", headers
            )
            return
        if server.models is not None and body.get("model") not in server.models:
            self._error(404, f"The model `{body.get('model')}` does not exist.", headers)
            return
        payload = json.dumps(reply_for(server, body, fault)).encode()
        self._send(200, payload, headers)


def start_chat_server(
    host: str = "127.0.0.1", port: int = 0, **options: Any
) -> tuple[ChatServer, str, list[Any]]:
    """Start a server in a background thread; returns (server, base_url, received bodies)."""
    server = ChatServer((host, port), **options)
    thread = threading.Thread(target=server.serve_forever, name="chat-server", daemon=True)
    thread.start()
    return server, server.base_url, server.received


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed per-request latency")
    parser.add_argument("--faults", default="", help="comma-separated fault plan, e.g. 500,ok")
    parser.add_argument("--default-fault", default="ok")
    parser.add_argument("--hang-s", type=float, default=30.0)
    parser.add_argument("--models", default="", help="comma-separated model names (default any)")
    args = parser.parse_args(argv)
    server = ChatServer(
        (args.host, args.port),
        latency_s=args.latency_ms / 1000,
        faults=[fault for fault in args.faults.split(",") if fault],
        default_fault=args.default_fault,
        hang_s=args.hang_s,
        models={name for name in args.models.split(",") if name} or None,
    )
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.stop).start())
    print(f"listening on {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
