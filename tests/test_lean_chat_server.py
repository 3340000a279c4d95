"""bench/lean_chat_server.py, the benchmarks' stand-in model server, answers what the tests'
threaded server answers (the same bodies, the same body-digest header), after its latency, on
keep-alive connections; what it does not speak is refused, not answered wrongly."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chat_server import start_chat_server

BENCH = Path(__file__).resolve().parent.parent / "bench"
BODY = {
    "model": "bench",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "echo k0000001 with   spaces"},
    ],
    "temperature": 0.0,
    "max_tokens": 3,
    "seed": 1,
}


@pytest.fixture()
def lean(request: pytest.FixtureRequest) -> Iterator[tuple[str, object]]:
    """The lean server on its own event loop in a thread: (base URL, its state)."""
    sys.path.insert(0, str(BENCH))
    try:
        import lean_chat_server
    finally:
        sys.path.remove(str(BENCH))
    latency = getattr(request, "param", 0.0)
    loop = lean_chat_server.new_loop()
    started: list[str] = []
    server, state = loop.run_until_complete(lean_chat_server.serve(latency, started.append))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield started[0], state
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        server.close()
        loop.close()


def _exchange(base_url: str, requests: list[bytes]) -> list[tuple[bytes, dict[str, str], bytes]]:
    """Send `requests` on one connection, back to back, and read as many replies."""
    host, port = base_url.removeprefix("http://").split(":")
    replies = []
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(b"".join(requests))
        stream = connection.makefile("rb")
        for _ in requests:
            status = stream.readline().rstrip(b"\r\n")
            headers: dict[str, str] = {}
            while (line := stream.readline().rstrip(b"\r\n")) != b"":
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            replies.append((status, headers, stream.read(int(headers["content-length"]))))
    return replies


def _post(body: bytes, path: str = "/v1/chat/completions") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_it_answers_what_the_tests_server_answers(lean: tuple[str, object]) -> None:
    base_url, state = lean
    threaded, threaded_url, _ = start_chat_server()
    try:
        bodies = [json.dumps(BODY).encode(), json.dumps({**BODY, "stop": ["with"]}).encode()]
        expected = _exchange(threaded_url, [_post(body) for body in bodies])
        got = _exchange(base_url, [_post(body) for body in bodies])  # two on one connection
    finally:
        threaded.stop()
    for (status, headers, payload), (want_status, want_headers, want_payload) in zip(
        got, expected, strict=True
    ):
        assert status == want_status == b"HTTP/1.1 200 OK"
        assert json.loads(payload) == json.loads(want_payload)
        digest = "x-received-body-sha256"
        assert headers[digest] == want_headers[digest]
    assert json.loads(got[0][2])["choices"][0]["finish_reason"] == "length"
    assert len(state.arrivals) == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("lean", [0.2], indirect=True)
def test_a_reply_waits_for_the_latency(lean: tuple[str, object]) -> None:
    base_url, _ = lean
    started = time.monotonic()
    [(status, _, _)] = _exchange(base_url, [_post(json.dumps(BODY).encode())])
    assert status == b"HTTP/1.1 200 OK"
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(
    "request_bytes",
    [
        _post(b"{}", "/v1/models"),
        b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ],
)
def test_what_it_does_not_speak_is_refused(lean: tuple[str, object], request_bytes: bytes) -> None:
    base_url, state = lean
    [(status, headers, _)] = _exchange(base_url, [request_bytes])
    assert status == b"HTTP/1.1 400 Bad Request"
    assert headers["connection"] == "close"
    assert state.arrivals == []  # type: ignore[attr-defined]


def test_a_body_that_is_not_a_chat_request_is_a_400(lean: tuple[str, object]) -> None:
    base_url, _ = lean
    [(status, _, payload)] = _exchange(base_url, [_post(b"[1, 2]")])
    assert status == b"HTTP/1.1 400 Bad Request"
    assert "error" in json.loads(payload)


def test_it_runs_under_asyncio_too() -> None:
    """Without uvloop (`new_loop` falls back): the same server on asyncio's own loop."""
    sys.path.insert(0, str(BENCH))
    try:
        import lean_chat_server
    finally:
        sys.path.remove(str(BENCH))
    loop = asyncio.new_event_loop()
    started: list[str] = []
    server, _ = loop.run_until_complete(lean_chat_server.serve(0.0, started.append))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        [(status, _, _)] = _exchange(started[0], [_post(json.dumps(BODY).encode())])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        server.close()
        loop.close()
    assert status == b"HTTP/1.1 200 OK"
