"""The benchmarks' stand-in for a remote model server: tests/chat_server.py's replies (its
`reply_for`, the same deterministic model) from one asyncio event loop (uvloop when installed),
not a thread per connection.

A model server is on another machine in use (a GPU box, an API); on the benchmark's two cores
it is a process beside rlenv, and every cycle it spends is one rlenv's processes cannot. The
tests' threaded server spends ~0.25 ms of CPU per request (header parsing by the standard
library's `http.server`, a thread woken per reply, 256 threads switching under one GIL): at 256
in flight and 100 ms, ~45 % of a core. This one answers the same bodies for a fraction of that.
It speaks only what `bench/concurrency.py` sends: `POST /v1/chat/completions` with a
`Content-Length` body over keep-alive HTTP/1.1; anything else is answered 400 and closed.
Faults, `/v1/models` and the rest stay in the tests' server.

Every request's arrival time (`time.monotonic`) is kept, in `LeanChatServer.arrivals`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chat_server import default_answer, reply_for  # noqa: E402

_PATH = b"/v1/chat/completions"
_MAX_HEAD = 64 * 1024


class _Answers:
    """What `reply_for` reads of its server: the rule for an answer after a tool result."""

    answer = staticmethod(default_answer)


class LeanChatServer:
    """The server's state: its latency and the arrival time of every request."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.arrivals: list[float] = []

    def connection(self) -> asyncio.Protocol:
        return _Connection(self)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: requests parsed as their bytes arrive, each answered
    `latency_s` after it arrived (replies in order: a client sends the next request on this
    connection only after its reply)."""

    def __init__(self, server: LeanChatServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._refuse(b"headers too long")
                return
            head = bytes(self.buffer[:end])
            length = _content_length(head)
            if length is None or not head.startswith(b"POST " + _PATH + b" "):
                self._refuse(b"only POST /v1/chat/completions with a Content-Length")
                return
            if len(self.buffer) < end + 4 + length:
                return
            raw = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            self.server.arrivals.append(time.monotonic())
            loop = asyncio.get_running_loop()
            loop.call_later(self.server.latency_s, self._reply, raw)

    def _reply(self, raw: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        try:
            body: Any = json.loads(raw)
            payload = json.dumps(reply_for(_Answers(), body, "ok")).encode()  # type: ignore[arg-type]
            status = b"200 OK"
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            payload = json.dumps({"error": {"message": str(exc), "code": 400}}).encode()
            status = b"400 Bad Request"
        digest = hashlib.sha256(raw).hexdigest().encode()
        self.transport.write(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(payload)).encode()
            + b"\r\nX-Received-Body-Sha256: "
            + digest
            + b"\r\n\r\n"
            + payload
        )

    def _refuse(self, why: bytes) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: "
            + str(len(why)).encode()
            + b"\r\n\r\n"
            + why
        )
        self.transport.close()
        self.transport = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


async def serve(latency_s: float, ready: Any, host: str = "127.0.0.1") -> tuple[Any, Any]:
    """Start serving on an ephemeral port: (the asyncio server, the `LeanChatServer`);
    `ready(base_url)` is called once it listens."""
    state = LeanChatServer(latency_s)
    server = await asyncio.get_running_loop().create_server(state.connection, host, 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    ready(f"http://{host}:{port}")
    return server, state


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is in rlenv's dependencies
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return]
