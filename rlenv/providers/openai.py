"""`openai:MODEL` policies: any OpenAI-compatible chat-completions server (vLLM, SGLang, ...).

Model calls run in the orchestrator's event loop, outside the frozen world: no cassette and no
frozen clock can intercept them. Every decoding field of the spec, and always a seed, is sent
the same way to every request and recorded in the reply's `extra["sent"]`.

Failures are classified: an endpoint that is down, times out, rate-limits, 5xxs or sends a
broken body is retried with seeded exponential backoff and then becomes an `InfraError`; a
request the server rejects (400/404/422: unknown model, bad field) is an `InfraError` at once;
a reply whose tool call is unusable is a `ModelOutputError` (the model's failure).

Retries are a small loop rather than tenacity/stamina: the jitter must come from a
`random.Random` seeded by the request (never global state), and a 429's Retry-After replaces
the backoff, which would need custom wait and retry hooks in either library anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import orjson

from rlenv.bounds import bounds_problem, has_digit_run, nesting_problem
from rlenv.errors import InfraError, ModelOutputError, UserError
from rlenv.providers.base import ModelReply, ModelRequest
from rlenv.urls import SECRET_QUERY as _SECRET_QUERY
from rlenv.urls import normalise_base_url as normalise_base_url  # also the judge's (a grader)
from rlenv.urls import public_url as public_url
from rlenv.urls import strip_credentials as _strip_credentials

logger = logging.getLogger(__name__)

DEFAULT_BACKOFF_BASE = 0.5
_DEFAULT_PORTS = {"http": 80, "https": 443}
_RETRIED_STATUS = {408, 429}
MAX_TOKENS = 2**40
"""The largest token count a reply's usage may state (summed over turns, it stays an integer
canonical JSON holds)."""


_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""A request body's encoder (as httpx encoded it: compact, UTF-8, no NaN), made once:
`json.dumps` with these options builds a new encoder for every request."""


class _Transient(Exception):
    """One failed attempt that may succeed when repeated."""

    def __init__(self, what: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.what = what
        self.detail = detail
        self.retry_after = retry_after


def _server_message(body: bytes) -> str:
    """The error message in an error body (OpenAI, vLLM, TGI shapes), else the text itself."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:300] or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        for key in ("message", "detail", "error"):
            if data.get(key):
                return str(data[key])[:300]
    return json.dumps(data)[:300]


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        from rlenv.clock import wall_now

        if moment.tzinfo is None:
            return None
        seconds = (moment - wall_now()).total_seconds()
    return max(0.0, seconds)


class OpenAIProvider:
    """A chat-completions endpoint, called once per turn with the spec's decoding."""

    in_world = False
    remote = True
    """Its calls wait on the network: the run's results are written by a process of their own
    (rlenv.results_aside), leaving the orchestrator's one core to the calls."""

    def __init__(
        self,
        uri: str,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 4,
        request_timeout: float = 60.0,
        backoff_base: float | None = None,
        backoff_max: float = 8.0,
        retry_after_cap: float = 30.0,
        max_connections: int = 256,
        pools: int = 1,
    ) -> None:
        self.uri = uri
        self.model_name = model_name
        raw = base_url or os.environ.get("OPENAI_BASE_URL")
        if not raw:
            raise UserError(
                "openai: no base URL: pass --base-url or set OPENAI_BASE_URL", where="--model"
            )
        given = normalise_base_url(raw)
        parts = urlsplit(given)
        # credentials in the URL become basic auth (unless a key is given), never part of a log
        self.base_url = _strip_credentials(given)
        self._basic_auth = (
            (unquote(parts.username), unquote(parts.password or "")) if parts.username else None
        )
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        # what an error message must never carry into a record or summary.json: the key, the
        # URL's password and its secret-named query values (a server may echo the URL back)
        self._secrets = sorted(
            {
                value
                for value in [
                    self.api_key,
                    self._basic_auth[1] if self._basic_auth else None,
                    *(v for n, v in parse_qsl(parts.query) if _SECRET_QUERY.search(n)),
                ]
                if value and len(value) >= 4
            },
            key=len,
            reverse=True,
        )
        if max_retries < 0:
            raise UserError("openai: max_retries must be >= 0")
        if self.api_key and not _header_safe(self.api_key):  # sent as a header's value
            raise UserError(
                "openai: the API key (OPENAI_API_KEY) holds a line break or a character an HTTP"
                " header cannot carry (not latin-1)"
            )
        self.max_retries = max_retries
        self.request_timeout = request_timeout
        if backoff_base is None:
            try:
                backoff_base = float(os.environ.get("RLENV_BACKOFF_BASE", DEFAULT_BACKOFF_BASE))
            except ValueError:
                raise UserError("RLENV_BACKOFF_BASE must be a number of seconds") from None
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_cap = retry_after_cap
        self.max_connections = max_connections
        # several connection pools: one httpx pool serialises under many concurrent requests
        # (httpcore's pool bookkeeping), measured in bench/concurrency.py
        self.pools = max(1, pools)
        self._clients: list[Any] = []
        self._proxy: tuple[Any, Any] = (None, None)  # from the environment, read once
        self._url: Any = None  # the endpoint as a yarl.URL, made with the first client
        self._turn = 0

    # -- identity ------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "base_url": public_url(self.base_url),  # run.json/summary.json: no secret
            "model": self.model_name,
        }

    def endpoints(self) -> list[tuple[str, int]]:
        parts = urlsplit(self.base_url)
        return [(str(parts.hostname), parts.port or _DEFAULT_PORTS[parts.scheme])]

    def _redact(self, text: str) -> str:
        """An error message without the provider's secrets (raw or URL-encoded)."""
        for secret in self._secrets:
            text = text.replace(secret, "REDACTED").replace(quote(secret, safe=""), "REDACTED")
        return text

    # -- the HTTP client -----------------------------------------------------------------

    def _client_for_loop(self) -> Any:
        """The next of the provider's clients (created inside the running loop), round robin."""
        if not self._clients:
            self._clients = [self._new_client() for _ in range(self.pools)]
        self._turn = (self._turn + 1) % len(self._clients)
        return self._clients[self._turn]

    def _new_client(self) -> Any:
        """The light client of a plain-HTTP endpoint without a proxy (`rlenv.providers.http1`),
        else an aiohttp session (httpx alone reached 57 % of the latency limit at 64 requests
        in flight on the 2-core machine, aiohttp 98 %: bench/concurrency.py)."""
        from rlenv.version import __version__

        headers = {"User-Agent": f"rlenv/{__version__}", "Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        else:  # the URL's credentials, else the host's in ~/.netrc
            credentials = self._basic_auth or _netrc_credentials(self.base_url)
            if credentials is not None:
                headers["Authorization"] = _basic(*credentials)
        # aiohttp is imported to read the proxy only when the environment names one
        self._proxy = _env_proxy(self.base_url) if _proxy_named(self.base_url) else (None, None)
        parts = urlsplit(f"{self.base_url}/chat/completions")
        per_pool = max(1, -(-self.max_connections // self.pools))
        # a plain-HTTP endpoint without a proxy: the lighter client, unless the user asks for
        # aiohttp's (RLENV_HTTP_CLIENT=aiohttp: a server this client does not get on with)
        light = os.environ.get("RLENV_HTTP_CLIENT", "").strip().lower() != "aiohttp"
        if light and parts.scheme == "http" and self._proxy[0] is None:
            from rlenv.providers.http1 import Http1Pool

            target = parts.path + (f"?{parts.query}" if parts.query else "")
            # as yarl sends it: a space or a non-ASCII character escaped, an escape kept
            target = quote(target, safe="/?&=%:@!$'()*+,;~-._")
            return Http1Pool(
                str(parts.hostname),
                parts.port or _DEFAULT_PORTS["http"],
                target,
                headers,
                limit=per_pool,
                timeout=self.request_timeout,
            )
        import aiohttp

        if self._url is None:  # parsed once: aiohttp parses a URL given as text per request
            from yarl import URL

            self._url = URL(f"{self.base_url}/chat/completions")
        return aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=per_pool, limit_per_host=0),
            # no total: waiting for a free connection is bounded by the rollout timeout
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self.request_timeout, sock_read=self.request_timeout
            ),
            # the environment's proxy and netrc are read once above: with trust_env aiohttp
            # reads both in a thread on every request, and each hand-off made the loop wait
            # for the GIL (the orchestrator's CPU per rollout doubled: bench/concurrency.py)
            trust_env=False,
        )

    async def aclose(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            await client.close()

    # -- one turn ------------------------------------------------------------------------

    def decoding_fields(self, request: ModelRequest) -> dict[str, Any]:
        """The decoding fields sent with every request: always a seed; extras only when set."""
        decoding = request.decoding
        sent: dict[str, Any] = {
            "temperature": decoding.get("temperature", 1.0),
            "top_p": decoding.get("top_p", 1.0),
            "max_tokens": decoding.get("max_tokens", 512),
        }
        if decoding.get("stop"):
            sent["stop"] = list(decoding["stop"])
        seed = decoding.get("seed")
        sent["seed"] = int(seed) if seed is not None else int(request.seed)
        for key in ("top_k", "min_p"):
            if decoding.get(key) is not None:
                sent[key] = decoding[key]
        if decoding.get("min_tokens"):
            sent["min_tokens"] = decoding["min_tokens"]
        if decoding.get("logprobs"):
            sent["logprobs"] = True
            if decoding.get("top_logprobs") is not None:
                sent["top_logprobs"] = decoding["top_logprobs"]
        return sent

    def build_body(self, request: ModelRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        sent = self.decoding_fields(request)
        body: dict[str, Any] = {"model": self.model_name, "messages": request.messages}
        if request.tools:
            body["tools"] = request.tools
            body["tool_choice"] = "auto"
        body.update(sent)
        return body, sent

    async def complete(self, request: ModelRequest) -> ModelReply:
        body, sent = self.build_body(request)
        data = await self._post_with_retries(body, request)
        return self.parse_reply(data, request, sent)

    async def _post_with_retries(self, body: dict[str, Any], request: ModelRequest) -> Any:
        from rlenv.seeding import derive_seed

        rng: random.Random | None = None  # made at the first retry (most requests need none)
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return await self._post_once(body)
            except _Transient as failure:
                if rng is None:
                    rng = random.Random(derive_seed(request.seed, "openai-retry", request.turn))
                if attempt + 1 >= attempts:
                    raise InfraError(
                        self._redact(
                            f"openai: {failure.what} after {attempts} attempts: {failure.detail}"
                        )
                    ) from None
                if failure.retry_after is not None:
                    wait = min(failure.retry_after, self.retry_after_cap)
                else:
                    delay = min(self.backoff_max, self.backoff_base * 2**attempt)
                    wait = delay * (0.5 + 0.5 * rng.random())
                logger.info(
                    "openai: %s (attempt %d/%d, input %s rollout %d turn %d); retrying in %.3fs",
                    failure.what,
                    attempt + 1,
                    attempts,
                    request.input_id,
                    request.rollout,
                    request.turn,
                    wait,
                )
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post_once(self, body: dict[str, Any]) -> Any:
        from rlenv.providers.http1 import Http1Pool

        client = self._client_for_loop()
        payload = _BODY_ENCODER.encode(body)
        if isinstance(client, Http1Pool):
            status, retry_header, content = await self._post_http1(client, payload)
            return self._checked_reply(status, retry_header, content)
        import aiohttp  # only here: the plain-HTTP client's runs never import it (~10 MB)

        try:
            proxy, proxy_credentials = self._proxy
            secure = self.base_url.startswith("https:")
            # awaited, not `async with`: its two context managers and the wait for a body
            # writer that is done by the time the reply is read were ~5 % of the HTTP client's
            # instructions per request (callgrind, a bare aiohttp loop at 64 in flight)
            response = await client.post(
                self._url,
                data=payload.encode("utf-8"),
                proxy=proxy,
                # a plain-HTTP request carries the proxy's credentials itself; an HTTPS one
                # sends them with the CONNECT that opens the tunnel
                headers=None if secure else proxy_credentials,
                proxy_headers=proxy_credentials if secure else None,
            )
            try:
                status = response.status
                retry_header = response.headers.get("Retry-After") if status == 429 else None
                content = await response.read()
            finally:
                # the connection back to the pool, or closed when the reply was not read to
                # its end (a body writer still running is cancelled), as `async with` does
                response.release()
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError and connect timeouts
            detail = str(exc) or f"no reply within {self.request_timeout:g} s"
            raise _Transient("timeout", f"ReadTimeout: {detail}") from None
        except aiohttp.ClientConnectorError as exc:
            raise _Transient("connection error", f"ConnectError: {exc}") from None
        except aiohttp.ClientError as exc:  # the connection broke, a malformed reply
            raise _Transient("connection error", f"{type(exc).__name__}: {exc}") from None
        return self._checked_reply(status, retry_header, content)

    async def _post_http1(self, client: Any, payload: str) -> tuple[int, str | None, bytes]:
        """One POST through the plain-HTTP client (`rlenv.providers.http1`): status, the
        Retry-After of a 429, the body; its failures worded as aiohttp's are above."""
        from rlenv.providers.http1 import WireError

        try:
            reply = await client.post(payload.encode("utf-8"))
        except TimeoutError as exc:
            detail = str(exc) or f"no reply within {self.request_timeout:g} s"
            raise _Transient("timeout", f"ReadTimeout: {detail}") from None
        except WireError as exc:
            raise _Transient("connection error", str(exc)) from None
        retry_header = reply.retry_after if reply.status == 429 else None
        return reply.status, retry_header, reply.content

    def _checked_reply(self, status: int, retry_header: str | None, content: bytes) -> Any:
        """The reply's JSON, or the failure its status or body is (retried or not)."""
        if status in _RETRIED_STATUS or status >= 500:
            retry_after = _retry_after(retry_header) if status == 429 else None
            raise _Transient(
                f"HTTP {status}", f"HTTP {status}: {_server_message(content)}", retry_after
            )
        if not 200 <= status < 300:
            raise InfraError(
                self._redact(
                    f"openai: the server rejected the request (HTTP {status}, not retried):"
                    f" {_server_message(content)}"
                )
            )
        try:
            data = _json_body(content)
        except RecursionError:
            raise _Transient("broken JSON body", "body is JSON nested too deeply") from None
        except ValueError:
            snippet = content[:80].decode("utf-8", "replace")
            raise _Transient("broken JSON body", f"body is not JSON: {snippet!r}") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if (
            not isinstance(choices, list)
            or not choices
            or not isinstance(choices[0], dict)
            or not isinstance(choices[0].get("message"), dict)
        ):
            raise _Transient("broken JSON body", "reply has no choices[0].message")
        return data

    # -- the reply -----------------------------------------------------------------------

    def parse_reply(
        self, data: dict[str, Any], request: ModelRequest, sent: dict[str, Any]
    ) -> ModelReply:
        """choices[0] -> assistant message (tool calls checked), usage, logprobs, extra."""
        choice = data["choices"][0]
        raw = choice["message"]
        content = raw.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        elif content is not None and not isinstance(content, str):
            raise ModelOutputError(f"message content is {type(content).__name__}, not a string")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        calls = raw.get("tool_calls")
        if calls:
            message["tool_calls"] = self._check_tool_calls(calls, request)
        usage: dict[str, int] = {}
        raw_usage = data.get("usage")
        if isinstance(raw_usage, dict):
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                value = raw_usage.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    if not 0 <= value <= MAX_TOKENS:  # NaN too: int() of it raised
                        raise ModelOutputError(f"usage.{key} is not a token count: {value!r:.40}")
                    usage[key] = int(value)
            if "total_tokens" not in usage and {"prompt_tokens", "completion_tokens"} <= set(usage):
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        logprobs: list[dict[str, Any]] | None = None
        raw_logprobs = choice.get("logprobs")
        if isinstance(raw_logprobs, dict) and isinstance(raw_logprobs.get("content"), list):
            logprobs = [
                {"token": item.get("token"), "logprob": item.get("logprob")}
                for item in raw_logprobs["content"]
                if isinstance(item, dict)
            ]
        extra = {"finish_reason": choice.get("finish_reason"), "sent": sent}
        return ModelReply(message=message, usage=usage, logprobs=logprobs, extra=extra)

    def _check_tool_calls(self, calls: Any, request: ModelRequest) -> list[dict[str, Any]]:
        if not isinstance(calls, list):
            raise ModelOutputError("tool_calls is not a list")
        known = {
            tool.get("function", {}).get("name") for tool in request.tools if isinstance(tool, dict)
        }
        checked = []
        for number, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                raise ModelOutputError(f"tool_calls[{number}] has no function")
            name = function.get("name")
            if not isinstance(name, str) or not name:
                raise ModelOutputError(f"tool_calls[{number}] has no function name")
            if name not in known:
                raise ModelOutputError(f"tool_calls[{number}] names unknown tool {name!r}")
            arguments = function.get("arguments", "")
            if isinstance(arguments, dict):
                from rlenv.canonical import canonical_bytes

                nested = bounds_problem(arguments)
                if nested is not None:
                    raise ModelOutputError(f"tool_calls[{number}] ({name}): arguments {nested}")
                arguments = canonical_bytes(arguments).decode()
            elif isinstance(arguments, str):
                nested = nesting_problem(arguments)
                if nested is not None:
                    raise ModelOutputError(f"tool_calls[{number}] ({name}): arguments {nested}")
                if arguments.strip():
                    try:
                        decoded = json.loads(arguments)
                    except ValueError as exc:
                        raise ModelOutputError(
                            f"tool_calls[{number}] ({name}): arguments are not valid JSON ({exc})"
                        ) from None
                    if not isinstance(decoded, dict):
                        raise ModelOutputError(
                            f"tool_calls[{number}] ({name}): arguments are not a JSON object"
                        )
            else:
                raise ModelOutputError(
                    f"tool_calls[{number}] ({name}): arguments are {type(arguments).__name__},"
                    " not a JSON string or object"
                )
            call_id = call.get("id")
            checked.append(
                {
                    "id": call_id
                    if isinstance(call_id, str) and call_id
                    else f"call_{request.turn}_{number}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        return checked


def _json_body(content: bytes) -> Any:
    """A reply body parsed as `json.loads` parses it, through orjson where the two agree: valid
    UTF-8 JSON without NaN or a number of 19 digits or more (orjson reads an integer past 64
    bits as a float). Anything orjson refuses (a lone surrogate's escape, NaN, nesting past
    its limit) goes to json.loads, which takes it or raises as it always did."""
    if not has_digit_run(content, 19):
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            pass
    return json.loads(content)


def _header_safe(value: str) -> bool:
    """Whether `value` can stand in an HTTP/1.1 header as it is: latin-1, no CR, LF or NUL."""
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return not any(char in value for char in "\r\n\0")


def _proxy_named(base_url: str) -> bool:
    """Whether the environment names a proxy for `base_url` that NO_PROXY does not bypass, as
    urllib reads it, which is how aiohttp's `get_env_proxy_for_url` reads it too (`_env_proxy`
    then says which, and with what credentials)."""
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(base_url)
    if parts.hostname and proxy_bypass(parts.hostname):
        return False
    return parts.scheme in getproxies()


def _env_proxy(base_url: str) -> tuple[Any, dict[str, str] | None]:
    """The proxy the environment names for `base_url`, as aiohttp's trust_env would pick it
    (NO_PROXY honoured), and the header carrying its credentials; (None, None) if none."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, auth = get_env_proxy_for_url(URL(base_url))
    except LookupError:
        return None, None
    return proxy, ({"Proxy-Authorization": auth.encode()} if auth is not None else None)


def _basic(login: str, password: str) -> str:
    """An Authorization header's basic credentials (latin-1, as aiohttp and httpx send)."""
    import base64

    pair = f"{login}:{password}"
    try:
        data = pair.encode("latin1")
    except UnicodeEncodeError:  # beyond latin-1: UTF-8, as RFC 7617 allows
        data = pair.encode("utf-8")
    return "Basic " + base64.b64encode(data).decode()


def _netrc_credentials(base_url: str) -> tuple[str, str] | None:
    """The login and password for the server's host in $NETRC (or ~/.netrc), if any."""
    import netrc
    from pathlib import Path

    host = urlsplit(base_url).hostname
    try:
        path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
        entry = netrc.netrc(path).authenticators(host) if host else None
    except (OSError, RuntimeError, netrc.NetrcParseError):  # none, no home, malformed
        return None
    return (entry[0], entry[2] or "") if entry else None
