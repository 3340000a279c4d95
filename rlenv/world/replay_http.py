"""The light replay path: httpx's transports and requests' adapter answered from the index.

Under vcrpy every replayed request builds a vcrpy Request (headers copied into its own dict),
goes through vcrpy's stub and, for requests, through urllib3's pool and a fake connection.
Here the request is read once into a `PlainRequest` (method, URI, body, content type: all that
`ToolIndex.key_for` reads) and served by `rlenv.world.replay.serve` (passed in, so this module
imports nothing of replay), the lookup vcrpy's cassette uses too, so keys, hits, fallbacks,
misses and their events are the same. The response is built as vcrpy's stub builds it (httpx: an
`httpx.Response` over the recorded bytes; requests: vcrpy's `VCRHTTPResponse`, headers as
urllib3 gives them). What the light path does not take goes on to vcrpy's patches underneath:
other libraries, requests bodies that are files or iterators, and adapters whose urllib3 retries
act on a response's status.

The patches are installed over vcrpy's (inside its cassette context) and removed before it
exits, so recording (vcrpy alone) is untouched.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


class PlainRequest:
    """A request as the index reads it (what vcrpy's Request gives `ToolIndex.key_for`): the
    method, the absolute URI, the body (bytes, or None) and the content type, if any."""

    __slots__ = ("body", "headers", "method", "uri")

    def __init__(self, method: str, uri: str, body: bytes | None, content_type: Any) -> None:
        self.method = method
        self.uri = uri
        self.body = body
        self.headers = {} if content_type is None else {"content-type": content_type}


Answer = Callable[[PlainRequest], dict[str, Any]]
Serve = Callable[[Any, PlainRequest], dict[str, Any]]


_DEFAULT_PORTS = {"http": 80, "https": 443}


@contextlib.contextmanager
def light_replay(state: Any, serve: Serve) -> Iterator[None]:
    """Patch httpx and requests (those loaded) to answer from `state`'s indexes through
    `serve(state, request)` (`rlenv.world.replay.serve`)."""

    def answer(request: PlainRequest) -> dict[str, Any]:
        return serve(state, request)

    patches: list[tuple[Any, str, Callable[..., Any]]] = []
    # loaded ones only: one imported later meets vcrpy's patches (`replay_patch.late_patches`)
    if "httpx" in sys.modules:
        import httpx

        patches += _httpx_patches(answer, httpx)
    if "requests" in sys.modules:
        import requests.adapters

        original = requests.adapters.HTTPAdapter.send
        patches.append((requests.adapters.HTTPAdapter, "send", _requests_send(answer, original)))
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, previous in reversed(saved):
            setattr(owner, name, previous)


# -- httpx -----------------------------------------------------------------------------------


def _httpx_patches(answer: Answer, httpx: Any) -> list[tuple[Any, str, Callable[..., Any]]]:
    def handle_request(self: Any, request: Any) -> Any:
        body = request.read()
        return _httpx_response(httpx, answer(_plain_httpx(request, body)))

    async def handle_async_request(self: Any, request: Any) -> Any:
        body = await request.aread()
        return _httpx_response(httpx, answer(_plain_httpx(request, body)))

    return [
        (httpx.HTTPTransport, "handle_request", handle_request),
        (httpx.AsyncHTTPTransport, "handle_async_request", handle_async_request),
        (httpx.Cookies, "extract_cookies", _extract_cookies(httpx.Cookies.extract_cookies)),
    ]


def _extract_cookies(original: Callable[..., Any]) -> Callable[..., Any]:
    """httpx's Client.extract_cookies, skipped for a response that sets no cookie: the standard
    jar then sets none either (`CookieJar.make_cookies` returns at once), but httpx first builds
    a urllib Request and an email Message for it, a fifth of a replayed call's time."""
    from http.cookiejar import CookieJar

    plain = CookieJar.extract_cookies

    def extract_cookies(self: Any, response: Any) -> None:
        headers = response.headers
        if (
            "set-cookie" in headers
            or "set-cookie2" in headers
            or type(self.jar).extract_cookies is not plain
        ):
            original(self, response)

    return extract_cookies


def _plain_httpx(request: Any, body: bytes) -> PlainRequest:
    # httpx.Headers.get joins repeated values with ", ", as vcrpy's copy of the headers does
    return PlainRequest(request.method, str(request.url), body, request.headers.get("content-type"))


def _httpx_response(httpx: Any, recorded: dict[str, Any]) -> Any:
    """The response vcrpy's httpx stub builds from a recorded one (same headers, same body,
    the recorded reason phrase; none given when the cassette has none)."""
    message = recorded["status"]["message"]
    return httpx.Response(
        recorded["status"]["code"],
        headers=[(name, value) for name, values in recorded["headers"].items() for value in values],
        stream=httpx.ByteStream(recorded["body"]["string"]),
        extensions={"reason_phrase": message.encode("ascii")} if message else None,
    )


# -- requests --------------------------------------------------------------------------------


def _requests_send(answer: Answer, original: Callable[..., Any]) -> Callable[..., Any]:
    from requests.exceptions import InvalidURL
    from urllib3 import HTTPHeaderDict
    from urllib3.exceptions import LocationValueError
    from urllib3.util.url import parse_url
    from vcr.stubs import VCRHTTPResponse
    from vcr.stubs.compat import get_header_items

    try:
        from urllib3.util.url import _encode_target
    except ImportError:  # pragma: no cover - present in urllib3 1.26 and 2.x

        def _encode_target(target: str) -> str:
            return target

    def send(
        self: Any,
        request: Any,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> Any:
        body = request.body
        if (
            not (body is None or isinstance(body, bytes | str))
            or _retries_on_status(self.max_retries)
            or not hasattr(self, "get_connection_with_tls_context")
        ):  # what urllib3 and vcrpy's stub do with it is theirs to do
            return original(self, request, stream, timeout, verify, cert, proxies)
        # what requests checks and adds before it sends, as it does it
        try:
            pool = self.get_connection_with_tls_context(request, verify, proxies=proxies, cert=cert)
        except LocationValueError as exc:
            raise InvalidURL(exc, request=request) from exc
        self.cert_verify(pool, request.url, verify, cert)
        url = self.request_url(request, proxies)
        self.add_headers(
            request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
        )
        # the URI vcrpy's connection stub gives the request: the pool's scheme, host and port
        # (none if the default) before the target urllib3 sends; a proxy's absolute URL as is
        if url.startswith("/"):
            port = pool.port
            suffix = "" if port in (None, _DEFAULT_PORTS.get(pool.scheme)) else f":{port}"
            uri = f"{pool.scheme}://{pool.host.rstrip('.')}{suffix}{_encode_target(url)}"
        else:
            uri = parse_url(url).url
        plain = PlainRequest(
            request.method,
            uri,
            body.encode("utf-8") if isinstance(body, str) else body,
            request.headers.get("content-type"),
        )
        raw = VCRHTTPResponse(answer(plain), uri)
        # as vcrpy's urllib3 stub sets them (`getheaders()`, without parsing them again)
        raw.headers = HTTPHeaderDict(list(get_header_items(raw.msg)))
        raw.retries = self.max_retries
        return self.build_response(request, raw)

    return send


def _retries_on_status(retries: Any) -> bool:
    """Whether urllib3 may retry (ask again) on a response's status with these retries (or
    cannot be told: not a `Retry`, as requests' adapter always holds)."""
    from urllib3.util.retry import Retry

    if not isinstance(retries, Retry):
        return True
    return bool(retries.status_forcelist) or bool(
        retries.total and retries.respect_retry_after_header
    )
