"""The openai provider's client for a plain-HTTP endpoint without a proxy (a local vLLM, SGLang or
TGI server: where a run sends the most requests): keep-alive HTTP/1.1 POSTs over asyncio's
transports, replies parsed by httptools (llhttp, the parser aiohttp and uvicorn use).

Why not aiohttp here: its session machinery (request and response objects, cookie jar, tracing,
redirects, timers) was ~215 µs of CPU per request on the orchestrator's one core, half of what a
rollout costs it at 256 requests in flight; this client is ~70 µs (bench/concurrency.py). HTTPS
endpoints and proxies stay with aiohttp (`rlenv.providers.openai`).

What it keeps of aiohttp's behaviour: at most `limit` connections (a request waits for a free
one), a connect timeout and a read timeout (no byte of the reply for `timeout` seconds), a
connection the server closed while it was idle in the pool retried once on a fresh one (before
any byte of a reply came), gzip/deflate bodies decoded, and a reply delimited by the end of the
connection read to that end. Failures are :class:`WireError` (named as aiohttp names them) or
TimeoutError.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import zlib
from dataclasses import dataclass
from typing import Any

import httptools


class WireError(Exception):
    """The connection failed: `kind` is the name the provider's message gives it."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class _Stale(Exception):
    """A reused connection ended before any byte of the reply: the server had closed it."""


@dataclass(frozen=True)
class Reply:
    status: int
    retry_after: str | None
    content: bytes
    keep_alive: bool


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Reply] | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.body: list[bytes] = []
        self.received = False  # a byte of this exchange's reply
        self.headers_done = False
        self.retry_after: str | None = None
        self.encoding = b""
        self.delimited = False  # a Content-Length or chunked: the reply ends by itself
        self.last = 0.0

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.received = True
        self.last = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(WireError("ClientResponseError", f"malformed HTTP reply: {exc}"))
            self.transport.close()

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if self.headers_done and not self.delimited:  # a reply that ends with its connection
            self._complete(keep_alive=False)
        elif not self.received:
            self._fail(_Stale())
        else:
            self._fail(WireError("ServerDisconnectedError", "Server disconnected"))

    # -- httptools' callbacks --------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"retry-after":
            self.retry_after = value.decode("latin-1").strip()
        elif name == b"content-encoding":
            self.encoding = value.strip().lower()
        elif name == b"content-length" or (
            name == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        status = self.parser.get_status_code()
        if status in (204, 304) or 100 <= status < 200:
            self.delimited = True  # no body (an interim 1xx reply is followed by the real one)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # interim: the reply proper follows on this connection
            self._reset()
            self.received = True
            return
        self._complete(keep_alive=self.parser.should_keep_alive())

    # -- an exchange -----------------------------------------------------------------------

    def _complete(self, *, keep_alive: bool) -> None:
        content = b"".join(self.body)
        if self.encoding in (b"gzip", b"x-gzip", b"deflate"):
            try:
                content = zlib.decompress(content, wbits=47)  # gzip or zlib, by the header
            except zlib.error as exc:
                self._fail(WireError("ClientPayloadError", f"undecodable body: {exc}"))
                return
        elif self.encoding not in (b"", b"identity"):
            self._fail(
                WireError("ClientPayloadError", f"unsupported content encoding {self.encoding!r}")
            )
            return
        reply = Reply(self.parser.get_status_code(), self.retry_after, content, keep_alive)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(reply)

    def _fail(self, error: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)

    def _check_read(self) -> None:
        """The read timeout: no byte of the reply for `timeout` seconds."""
        if self.waiter is None or self.waiter.done():
            return
        loop = asyncio.get_running_loop()
        since = loop.time() - self.last
        if since >= self.timeout:
            self._fail(TimeoutError())
        else:
            self.timer = loop.call_later(self.timeout - since, self._check_read)

    async def exchange(self, request: bytes) -> Reply:
        loop = asyncio.get_running_loop()
        self._reset()
        self.waiter = loop.create_future()
        self.transport.write(request)
        self.last = loop.time()
        self.timer = loop.call_later(self.timeout, self._check_read)
        try:
            return await self.waiter
        finally:
            self.timer.cancel()
            self.waiter = None


class Http1Pool:
    """Keep-alive connections to one `host:port`, POSTing to `target` with `headers`."""

    def __init__(
        self,
        host: str,
        port: int,
        target: str,
        headers: dict[str, str],
        *,
        limit: int,
        timeout: float,
    ) -> None:
        for name, value in headers.items():  # no header of the caller's may inject another
            text = name + value
            if any(char in text for char in "\r\n\0") or not text.isascii() and max(text) > "\xff":
                raise ValueError(
                    f"header {name!r} holds a line break or a character outside latin-1"
                )
        authority = host if ":" not in host else f"[{host}]"
        lines = [f"POST {target} HTTP/1.1", f"Host: {authority}:{port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self.host, self.port = host, port
        self.limit, self.timeout = max(1, limit), timeout
        self._idle: list[_Connection] = []
        self._open = 0  # connections open or being opened (at most `limit`)
        self._waiting: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()
        self.closed = False

    async def post(self, body: bytes) -> Reply:
        request = self._head + b"%d\r\n\r\n" % len(body) + body
        for _ in range(2):
            connection, reused = await self._take()
            try:
                reply = await connection.exchange(request)
            except _Stale:
                self._drop(connection)
                if reused:
                    continue  # the server closed it while it was idle: once more, on a new one
                raise WireError("ServerDisconnectedError", "Server disconnected") from None
            except BaseException:
                self._drop(connection)  # mid-exchange (a timeout, a cancel): not reusable
                raise
            if reply.keep_alive and not connection.closed:
                self._give_back(connection)
            else:
                self._drop(connection)
            return reply
        raise WireError("ServerDisconnectedError", "Server disconnected")  # pragma: no cover

    async def _take(self) -> tuple[_Connection, bool]:
        """An idle connection (reused), or a new one when fewer than `limit` are open; else
        wait for one given back or for a place."""
        while True:
            if self.closed:
                raise WireError("ClientConnectionError", "the client is closed")
            while self._idle:
                connection = self._idle.pop()
                if not connection.closed:
                    return connection, True
                self._open -= 1
            if self._open < self.limit:
                self._open += 1
                try:
                    return await self._connect(), False
                except BaseException:
                    self._open -= 1
                    self._wake(None)
                    raise
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                given = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # handed one as it was cancelled
                    handed = waiter.result()
                    if handed is not None:
                        self._give_back(handed)
                    else:
                        self._wake(None)
                else:
                    with contextlib.suppress(ValueError):
                        self._waiting.remove(waiter)
                raise
            if given is not None:
                return given, True
            # a place was freed: loop to open one

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self.timeout), self.host, self.port
                )
        except TimeoutError:
            raise
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise WireError(
                "ConnectError", f"Cannot connect to host {self.host}:{self.port} [{reason}]"
            ) from None
        return connection

    def _give_back(self, connection: _Connection) -> None:
        if self.closed:
            self._drop(connection)
        elif not self._wake(connection):
            self._idle.append(connection)

    def _drop(self, connection: _Connection) -> None:
        connection.closed = True
        if connection.transport is not None:
            connection.transport.close()
        self._open -= 1
        self._wake(None)

    def _wake(self, given: _Connection | None) -> bool:
        """Hand `given` (or a free place: None) to the first request still waiting."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(given)
                return True
        return False

    async def close(self) -> None:
        self.closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            self._drop(connection)
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_exception(WireError("ClientConnectionError", "the client is closed"))
        self._waiting.clear()
