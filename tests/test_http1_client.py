"""The openai provider's plain-HTTP client (`rlenv.providers.http1`) against scripted servers on
loopback: what aiohttp did for the provider, it does (keep-alive, a bound on connections, a stale
pooled connection retried once, read and connect timeouts, chunked, gzip and EOF-delimited
bodies, a cancelled request's connection not reused), and a broken exchange is a named error."""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlenv.providers.http1 import Http1Pool, WireError

Handler = Callable[[socket.socket, int], None]


def read_request(conn: socket.socket) -> bytes | None:
    """One whole request (head and Content-Length body) from `conn`; None at its end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def ok(body: bytes = b'{"ok":1}', extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Server:
    """A TCP server on loopback; each connection is given to `handler(conn, number)` in a
    thread of its own. It counts connections and the most open at once."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
                number = self.connections
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            self.handler(conn, number)
        except OSError:
            pass
        finally:
            with self.lock:
                self.open -= 1
            conn.close()

    def pool(self, *, limit: int = 8, timeout: float = 5.0) -> Http1Pool:
        return Http1Pool(
            "127.0.0.1", self.port, "/v1/chat/completions", {"X-Test": "1"}, limit=limit,
            timeout=timeout,
        )  # fmt: skip

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    made: list[Server] = []

    def make(handler: Handler) -> Server:
        made.append(Server(handler))
        return made[-1]

    yield make
    for server in made:
        server.close()


def keep_alive(reply: Callable[[int], bytes]) -> Handler:
    """Answer every request of a connection with `reply(request number on it)`."""

    def handler(conn: socket.socket, _: int) -> None:
        count = 0
        while read_request(conn) is not None:
            conn.sendall(reply(count))
            count += 1

    return handler


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def post_once(pool: Http1Pool) -> Any:
    """One POST through a new `pool`, closed after it: its reply."""

    async def go() -> Any:
        try:
            return await pool.post(b"{}")
        finally:
            await pool.close()

    return run(go())


def test_requests_reuse_one_keep_alive_connection(serve: Callable[[Handler], Server]) -> None:
    seen: list[bytes] = []

    def handler(conn: socket.socket, _: int) -> None:
        while (request := read_request(conn)) is not None:
            seen.append(request)
            conn.sendall(ok(b'{"n":%d}' % len(seen)))

    server = serve(handler)

    async def go() -> list[Any]:
        pool = server.pool()
        try:
            return [await pool.post(b'{"a":1}') for _ in range(3)]
        finally:
            await pool.close()

    replies = run(go())
    assert [reply.content for reply in replies] == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    assert all(reply.status == 200 and reply.keep_alive for reply in replies)
    assert server.connections == 1
    head = seen[0].split(b"\r\n")
    assert head[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}".encode() in head and b"X-Test: 1" in head
    assert seen[0].endswith(b'\r\n\r\n{"a":1}') and b"Content-Length: 7" in head


def test_no_more_connections_than_the_limit(serve: Callable[[Handler], Server]) -> None:
    def slow(conn: socket.socket, _: int) -> None:
        while read_request(conn) is not None:
            time.sleep(0.05)
            conn.sendall(ok())

    server = serve(slow)

    async def go() -> list[Any]:
        pool = server.pool(limit=2)
        try:
            return await asyncio.gather(*(pool.post(b"{}") for _ in range(8)))
        finally:
            await pool.close()

    replies = run(go())
    assert [reply.status for reply in replies] == [200] * 8
    assert server.most_open <= 2 and server.connections == 2


@pytest.mark.parametrize("noticed", [True, False], ids=["closed-idle", "closed-on-request"])
def test_a_pooled_connection_the_server_closed_is_retried_once_on_a_new_one(
    serve: Callable[[Handler], Server], noticed: bool
) -> None:
    """The server answers one request per connection, keep-alive promised, and closes it after
    that (idle, or as the next request arrives): the next request, on a pooled connection with
    no byte of its reply come, is sent again on a fresh one (aiohttp's provider retried it
    with backoff)."""

    def once(conn: socket.socket, _: int) -> None:
        if read_request(conn) is not None:
            conn.sendall(ok())
        if not noticed:
            read_request(conn)  # the next request arrives, and is never answered

    server = serve(once)

    async def go() -> list[int]:
        pool = server.pool()
        try:
            statuses = []
            for _ in range(3):
                statuses.append((await pool.post(b"{}")).status)
                if noticed:
                    await asyncio.sleep(0.05)  # the close reaches the client while it idles
            return statuses
        finally:
            await pool.close()

    assert run(go()) == [200, 200, 200]
    assert server.connections == 3


def test_a_connection_closed_mid_reply_is_a_disconnect(
    serve: Callable[[Handler], Server],
) -> None:
    def cut(conn: socket.socket, _: int) -> None:
        if read_request(conn) is not None:
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial')

    server = serve(cut)

    with pytest.raises(WireError, match="ServerDisconnectedError"):
        post_once(server.pool())
    assert server.connections == 1, "a reply begun is not sent again"


def test_read_timeout_when_the_reply_stalls(serve: Callable[[Handler], Server]) -> None:
    """The reply's head and one byte come, then nothing: a TimeoutError, while the server still
    holds the connection open (it lets go only when the test is over; a client that waited
    for it would see the connection end instead)."""
    release = threading.Event()

    def stall(conn: socket.socket, _: int) -> None:
        if read_request(conn) is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{")
            release.wait(30)

    server = serve(stall)
    try:
        with pytest.raises(TimeoutError):
            post_once(server.pool(timeout=0.3))
        assert not release.is_set()
    finally:
        release.set()


def test_a_slow_reply_that_keeps_coming_is_not_cut_off(
    serve: Callable[[Handler], Server],
) -> None:
    """The read timeout is between bytes, as aiohttp's sock_read: a body trickling in for
    longer than it, a byte well within it each time, is read whole."""

    def trickle(conn: socket.socket, _: int) -> None:
        if read_request(conn) is not None:
            body = b'{"slow":"' + b"x" * 8 + b'"}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
            for byte in body:
                conn.sendall(bytes([byte]))
                time.sleep(0.05)

    server = serve(trickle)

    async def go() -> bytes:
        pool = server.pool(timeout=0.4)
        try:
            return (await pool.post(b"{}")).content
        finally:
            await pool.close()

    assert run(go()) == b'{"slow":"xxxxxxxx"}'


def test_chunked_gzip_and_eof_delimited_bodies(serve: Callable[[Handler], Server]) -> None:
    payload = b'{"content":"hello"}'
    packed = gzip.compress(payload)
    replies = {
        1: (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'5\r\n{"con\r\n' + b"%x\r\n" % (len(payload) - 5) + payload[5:] + b"\r\n0\r\n\r\n"
        ),
        2: ok(packed, "Content-Encoding: gzip\r\n"),
        3: b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + payload,
    }

    def handler(conn: socket.socket, number: int) -> None:
        if read_request(conn) is not None:
            conn.sendall(replies[number])
            if number == 3:
                conn.shutdown(socket.SHUT_WR)  # the body ends with the connection
                time.sleep(0.2)

    server = serve(handler)

    async def go() -> list[Any]:
        got = []
        for _ in range(3):
            pool = server.pool()  # a connection per reply, in the order they are scripted
            try:
                got.append(await pool.post(b"{}"))
            finally:
                await pool.close()
        return got

    chunked, zipped, eof = run(go())
    assert chunked.content == zipped.content == eof.content == payload
    assert not eof.keep_alive


def test_retry_after_of_a_429_is_read(serve: Callable[[Handler], Server]) -> None:
    def busy(conn: socket.socket, _: int) -> None:
        while read_request(conn) is not None:
            conn.sendall(
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 2\r\n\r\n{}"
            )

    server = serve(busy)

    reply = post_once(server.pool())
    assert (reply.status, reply.retry_after, reply.content) == (429, "7", b"{}")


def test_a_cancelled_request_leaves_no_connection_to_reuse(
    serve: Callable[[Handler], Server],
) -> None:
    """Cancelled mid-exchange (the rollout's time ran out): its connection would carry the late
    reply into the next request; it is closed, and the next request opens another."""

    def handler(conn: socket.socket, number: int) -> None:
        while read_request(conn) is not None:
            if number == 1:
                time.sleep(0.5)
            conn.sendall(ok(b'{"from":%d}' % number))

    server = serve(handler)

    async def go() -> bytes:
        pool = server.pool()
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await pool.post(b"{}")
            return (await pool.post(b"{}")).content
        finally:
            await pool.close()

    assert run(go()) == b'{"from":2}'
    assert server.connections == 2


def test_a_closed_port_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = Http1Pool("127.0.0.1", port, "/", {}, limit=2, timeout=2.0)

    with pytest.raises(WireError, match="ConnectError: Cannot connect to host 127.0.0.1"):
        post_once(pool)


def test_a_malformed_reply_is_a_response_error(serve: Callable[[Handler], Server]) -> None:
    def garbage(conn: socket.socket, _: int) -> None:
        if read_request(conn) is not None:
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            time.sleep(0.2)

    server = serve(garbage)

    with pytest.raises(WireError, match="ClientResponseError: malformed HTTP reply"):
        post_once(server.pool())


def test_waiting_requests_get_the_place_a_failed_one_freed(
    serve: Callable[[Handler], Server],
) -> None:
    """With one connection allowed, a request whose connection breaks frees its place for the
    ones waiting: none waits forever."""

    def handler(conn: socket.socket, number: int) -> None:
        if number == 1:
            read_request(conn)
            return  # closed before any reply: the first request fails
        while read_request(conn) is not None:
            conn.sendall(ok())

    server = serve(handler)

    async def go() -> list[Any]:
        pool = server.pool(limit=1)
        try:
            posts = [pool.post(b"{}") for _ in range(4)]
            return await asyncio.gather(*posts, return_exceptions=True)
        finally:
            await pool.close()

    results = run(go())
    assert isinstance(results[0], WireError)
    assert [reply.status for reply in results[1:]] == [200, 200, 200]
