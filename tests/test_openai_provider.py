"""The `openai:MODEL` provider against a real chat-completions server on 127.0.0.1.

No mocks: tests/chat_server.py is a real HTTP server with a deterministic model and injected
faults (500, 429 + Retry-After, hang, close, garbage, malformed tool calls).
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from rlenv.errors import InfraError, ModelOutputError, UserError
from rlenv.providers import http1
from rlenv.providers.base import ModelReply, ModelRequest
from rlenv.providers.openai import OpenAIProvider
from rlenv.providers.registry import resolve_provider
from tests.chat_server import ChatServer
from tests.conftest import EnvBuilder, cli, probe_report, read_jsonl

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "look something up",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
DECODING = {
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": None,
    "max_tokens": 64,
    "min_tokens": 0,
    "stop": ["END"],
    "seed": None,
}
FAST = {"backoff_base": 0.01, "max_retries": 4, "request_timeout": 5.0}
CLI_ENV = {"RLENV_BACKOFF_BASE": "0.01"}


@pytest.fixture(autouse=True, params=["http1", "aiohttp"])
def http_client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test against each client of a plain-HTTP endpoint: the light one
    (`rlenv.providers.http1`, the default) and aiohttp's (RLENV_HTTP_CLIENT=aiohttp)."""
    monkeypatch.setenv("RLENV_HTTP_CLIENT", request.param)
    return str(request.param)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def request(
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    decoding: dict[str, Any] | None = None,
    seed: int = 4242,
    turn: int = 0,
) -> ModelRequest:
    return ModelRequest(
        messages=messages or [{"role": "user", "content": "hello there"}],
        tools=tools or [],
        decoding=dict(DECODING if decoding is None else decoding),
        seed=seed,
        input_id="a",
        rollout=0,
        turn=turn,
    )


def complete(provider: OpenAIProvider, req: ModelRequest) -> ModelReply:
    """One call in a fresh event loop, as the runner does (client created inside the loop)."""

    async def go() -> ModelReply:
        try:
            return await provider.complete(req)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def provider_for(server: ChatServer, suffix: str = "", **options: Any) -> OpenAIProvider:
    settings = {**FAST, **options}
    return OpenAIProvider("openai:tiny", "tiny", base_url=server.base_url + suffix, **settings)


# -- the request on the wire -------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_decoding_fields_arrive_exactly(chat: Callable[..., ChatServer], suffix: str) -> None:
    server = chat()
    decoding = {**DECODING, "seed": 123, "min_p": 0.05, "min_tokens": 2}
    reply = complete(provider_for(server, suffix), request(decoding=decoding))
    assert len(server.received) == 1
    body = server.received[0]
    assert body["model"] == "tiny"
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    expected = {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.05,
        "max_tokens": 64,
        "min_tokens": 2,
        "stop": ["END"],
        "seed": 123,
    }
    assert {key: body[key] for key in expected} == expected
    assert "tools" not in body and "tool_choice" not in body and "logprobs" not in body
    assert reply.extra == {"finish_reason": "stop", "sent": expected}
    assert reply.message == {"role": "assistant", "content": "echo: hello there"}
    assert reply.usage == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert reply.logprobs is None


def test_rollout_seed_sent_when_spec_sets_none(chat: Callable[..., ChatServer]) -> None:
    server = chat()
    decoding = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": None,
        "min_p": None,
        "max_tokens": 512,
        "min_tokens": 0,
        "stop": [],
        "seed": None,
    }
    reply = complete(provider_for(server), request(decoding=decoding, seed=987654321))
    body = server.received[0]
    sent = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 512, "seed": 987654321}
    assert {key: body[key] for key in body if key not in ("model", "messages")} == sent
    assert reply.extra["sent"] == sent


def test_tools_sent_and_tool_calls_parsed(chat: Callable[..., ChatServer]) -> None:
    server = chat()
    provider = provider_for(server)
    first = complete(provider, request(tools=[SEARCH_TOOL]))
    body = server.received[0]
    assert body["tools"] == [SEARCH_TOOL] and body["tool_choice"] == "auto"
    (call,) = first.message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "search", "arguments": '{"query": "hello there"}'}
    assert first.extra["finish_reason"] == "tool_calls"
    conversation = [
        {"role": "user", "content": "hello there"},
        first.message,
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": "search",
            "content": "the answer is forty-two, and this sentence is longer than sixty characters",
        },
    ]
    second = complete(provider, request(conversation, tools=[SEARCH_TOOL], turn=1))
    assert server.received[1]["messages"] == conversation, "history goes out as given"
    assert second.message == {
        "role": "assistant",
        "content": "the answer is forty-two, and this sentence is longer than si",
    }


def test_missing_tool_call_id_is_synthesised(chat: Callable[..., ChatServer]) -> None:
    server = chat(faults=["no_tool_id"])
    reply = complete(provider_for(server), request(tools=[SEARCH_TOOL], turn=3))
    assert reply.message["tool_calls"][0]["id"] == "call_3_0"


def test_logprobs_only_when_asked(chat: Callable[..., ChatServer]) -> None:
    server = chat()
    reply = complete(provider_for(server), request(decoding={**DECODING, "logprobs": True}))
    assert server.received[0]["logprobs"] is True
    assert reply.extra["sent"]["logprobs"] is True
    assert reply.logprobs == [
        {"token": "echo:", "logprob": -0.5},
        {"token": "hello", "logprob": -0.5},
        {"token": "there", "logprob": -0.5},
    ]


def test_api_key_sent_as_bearer_and_identity_hides_credentials(
    chat: Callable[..., ChatServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = chat()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    host, port = server.server_address[:2]
    provider = OpenAIProvider(
        "openai:tiny", "tiny", base_url=f"http://user:pw@{host}:{port}", **FAST
    )
    complete(provider, request())
    assert server.log[0]["authorization"] == "Bearer sk-test-123"
    identity = provider.identity()
    assert identity == {
        "uri": "openai:tiny",
        "base_url": f"http://{host}:{port}/v1",
        "model": "tiny",
    }
    assert "sk-test" not in json.dumps(identity)
    assert provider.endpoints() == [(host, port)]


class _ForwardProxy(http.server.ThreadingHTTPServer):
    """A real HTTP forward proxy on 127.0.0.1: it relays each absolute-URI request to its
    target and notes the request line and the Proxy-Authorization it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                proxy.seen.append((self.path, self.headers.get("Proxy-Authorization")))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                forwarded = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in ("host", "proxy-authorization", "connection")
                }
                reply = httpx.post(
                    self.path, content=body, headers=forwarded, timeout=10, trust_env=False
                )
                self.send_response(reply.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def forward_proxy() -> Any:
    proxy = _ForwardProxy()
    yield proxy
    proxy.close()


@pytest.mark.parametrize("bypass", [False, True])
def test_proxy_from_the_environment_is_used_unless_bypassed(
    chat: Callable[..., ChatServer],
    forward_proxy: _ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
    bypass: bool,
) -> None:
    """HTTP_PROXY (with its credentials) and NO_PROXY are honoured as aiohttp's trust_env
    would, though they are read once per client rather than on every request."""
    server = chat()
    host, port = forward_proxy.server_address[:2]
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://pu:pp@{host}:{port}")
    if bypass:
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    provider = provider_for(server)
    replies = [complete(provider, request(seed=seed)) for seed in (1, 2)]
    assert all(reply.message.get("content") for reply in replies)
    assert len(server.received) == 2
    if bypass:
        assert forward_proxy.seen == []
    else:
        target = f"{server.base_url}/v1/chat/completions"
        assert [path for path, _ in forward_proxy.seen] == [target, target]
        assert {auth for _, auth in forward_proxy.seen} == {"Basic cHU6cHA="}  # pu:pp


def test_netrc_credentials_sent_when_no_key(
    chat: Callable[..., ChatServer], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = chat()
    host = server.server_address[0]
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host} login nu password np\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    complete(provider_for(server), request())
    assert server.log[0]["authorization"] == "Basic bnU6bnA="  # nu:np
    host, port = server.server_address[:2]
    server.log.clear()  # the URL's credentials come before the host's netrc entry
    with_user = OpenAIProvider(
        "openai:tiny", "tiny", base_url=f"http://uu:up@{host}:{port}", **FAST
    )
    complete(with_user, request())
    assert server.log[0]["authorization"] == "Basic dXU6dXA="  # uu:up
    monkeypatch.setenv("OPENAI_API_KEY", "sk-over-netrc")
    server.log.clear()
    complete(provider_for(server), request())
    assert server.log[0]["authorization"] == "Bearer sk-over-netrc"


def test_base_url_from_env_or_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UserError, match="no base URL: pass --base-url or set OPENAI_BASE_URL"):
        resolve_provider("openai:tiny")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.example.org/v1/")
    provider = resolve_provider("openai:tiny")
    assert provider.identity()["base_url"] == "https://api.example.org/v1"
    assert provider.endpoints() == [("api.example.org", 443)]
    with pytest.raises(UserError, match="not an http"):
        OpenAIProvider("openai:tiny", "tiny", base_url="ftp://x")


def test_server_echoes_body_hash(chat: Callable[..., ChatServer]) -> None:
    server = chat()
    raw = b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}]}'
    response = httpx.post(f"{server.base_url}/v1/chat/completions", content=raw)
    assert response.headers["X-Received-Body-Sha256"] == hashlib.sha256(raw).hexdigest()
    assert server.log[0]["sha256"] == hashlib.sha256(raw).hexdigest()


# -- faults --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan", [["500"], ["503", "502"], ["garbage"], ["no_choices"], ["close"], ["408"]]
)
def test_transient_faults_are_retried(chat: Callable[..., ChatServer], plan: list[str]) -> None:
    server = chat(faults=list(plan))
    reply = complete(provider_for(server), request())
    assert reply.message["content"] == "echo: hello there"
    assert [entry["fault"] for entry in server.log] == [*plan, "ok"]
    assert len({entry["sha256"] for entry in server.log}) == 1, "a retry resends the same body"


# A hang never answers (until the server stops); the timeout is generous so that an answering
# server always beats it, even on a loaded machine: the timeout, not a race, decides.
HANG_TIMEOUT_S = 2.0


def test_hang_times_out_and_is_retried(chat: Callable[..., ChatServer]) -> None:
    server = chat(faults=["hang"], hang_s=600)
    reply = complete(provider_for(server, request_timeout=HANG_TIMEOUT_S), request())
    assert reply.message["content"] == "echo: hello there"
    assert [entry["fault"] for entry in server.log] == ["hang", "ok"]


def test_429_retry_after_is_honoured_and_capped(
    chat: Callable[..., ChatServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rlenv.providers.openai")
    server = chat(faults=["429:1"])
    reply = complete(provider_for(server), request())
    assert reply.message["content"] == "echo: hello there"
    assert [entry["fault"] for entry in server.log] == ["429:1", "ok"]
    waits = [record.getMessage() for record in caplog.records]
    assert len(waits) == 1 and waits[0].startswith("openai: HTTP 429 (attempt 1/5")
    assert waits[0].endswith("retrying in 1.000s"), "Retry-After replaces the 0.01 s backoff"
    caplog.clear()
    server.faults.append("429:600")
    complete(provider_for(server, retry_after_cap=0.05), request())
    assert caplog.records[0].getMessage().endswith("retrying in 0.050s")


def test_backoff_jitter_is_seeded_by_the_request(
    chat: Callable[..., ChatServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rlenv.providers.openai")
    server = chat(faults=["500", "500", "ok", "500", "500", "ok", "500", "500"])
    for seed in (1, 1, 2):
        complete(provider_for(server, backoff_base=0.1), request(seed=seed))
    waits = [record.getMessage().rsplit(" ", 1)[-1] for record in caplog.records]
    assert len(waits) == 6
    assert waits[0:2] == waits[2:4], "same request, same jitter"
    assert waits[0:2] != waits[4:6], "another rollout seed, other jitter"


def test_persistent_500_is_an_infra_error(chat: Callable[..., ChatServer]) -> None:
    server = chat(default_fault="500")
    with pytest.raises(InfraError) as caught:
        complete(provider_for(server, max_retries=2), request())
    assert str(caught.value) == "openai: HTTP 500 after 3 attempts: HTTP 500: injected HTTP 500"
    assert len(server.received) == 3


def test_persistent_hang_is_an_infra_error(chat: Callable[..., ChatServer]) -> None:
    server = chat(default_fault="hang", hang_s=600)
    with pytest.raises(InfraError, match="openai: timeout after 2 attempts: ReadTimeout"):
        complete(provider_for(server, max_retries=1, request_timeout=HANG_TIMEOUT_S), request())


def test_rejected_request_is_infra_error_without_retry(chat: Callable[..., ChatServer]) -> None:
    server = chat(models={"tiny"})
    provider = OpenAIProvider("openai:huge", "huge", base_url=server.base_url, **FAST)
    with pytest.raises(InfraError) as caught:
        complete(provider, request())
    assert "HTTP 404" in str(caught.value) and "The model `huge` does not exist." in str(
        caught.value
    )
    server.faults.append("422")
    with pytest.raises(InfraError, match="HTTP 422, not retried"):
        complete(provider_for(server), request())
    assert len(server.received) == 2, "neither was retried"


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("bad_tool_call", "arguments are not valid JSON"),
        ("no_tool_name", "has no function name"),
        ("unknown_tool", "names unknown tool 'no_such_tool'"),
    ],
)
def test_malformed_tool_call_is_a_model_error(
    chat: Callable[..., ChatServer], fault: str, message: str
) -> None:
    server = chat(faults=[fault])
    with pytest.raises(ModelOutputError, match=message):
        complete(provider_for(server), request(tools=[SEARCH_TOOL]))
    assert len(server.received) == 1, "the model's answer is not retried"


def test_unreachable_endpoint_is_an_infra_error() -> None:
    provider = OpenAIProvider(
        "openai:tiny", "tiny", base_url=f"http://127.0.0.1:{closed_port()}", **FAST
    )
    with pytest.raises(InfraError, match="openai: connection error after 5 attempts: ConnectError"):
        complete(provider, request())


def test_64_concurrent_requests_share_one_client(
    chat: Callable[..., ChatServer], monkeypatch: pytest.MonkeyPatch, http_client: str
) -> None:
    server = chat(latency_s=0.05)
    created: list[Any] = []
    if http_client == "aiohttp":
        session_class = aiohttp.ClientSession

        def counted_session(*args: Any, **kwargs: Any) -> aiohttp.ClientSession:
            created.append(session_class(*args, **kwargs))
            return created[-1]

        monkeypatch.setattr(aiohttp, "ClientSession", counted_session)
    else:

        class Counted(http1.Http1Pool):  # the provider tells its client by its class
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                created.append(self)

        monkeypatch.setattr(http1, "Http1Pool", Counted)
    provider = provider_for(server, request_timeout=60.0, max_retries=0)  # no hidden retries

    async def wave(seeds: range) -> list[ModelReply]:
        return await asyncio.gather(*(provider.complete(request(seed=seed)) for seed in seeds))

    async def go() -> tuple[list[ModelReply], list[ModelReply]]:
        try:
            return await wave(range(64)), await wave(range(64, 128))
        finally:
            await provider.aclose()

    first, second = asyncio.run(go())
    assert [reply.extra["sent"]["seed"] for reply in first] == list(range(64))
    assert [reply.extra["sent"]["seed"] for reply in second] == list(range(64, 128))
    assert sorted(body["seed"] for body in server.received) == list(range(128))
    assert len(created) == 1, f"{len(created)} HTTP clients for 128 requests, not one shared"
    assert created[0].closed, "aclose closes the shared client"
    first_peers = {entry["peer"] for entry in server.log[:64]}
    all_peers = {entry["peer"] for entry in server.log}
    assert len(first_peers) <= 64 and all_peers == first_peers, (
        "the second wave reuses the shared client's pooled connections"
    )


# -- through the real CLI ------------------------------------------------------------------

SEARCH_CODE = """
def search(args, ctx):
    return "result for " + args["query"]
"""


def spec_tools() -> list[dict[str, Any]]:
    """A fresh list each time: EnvBuilder.write fills the module name in place."""
    return [
        {
            "name": "search",
            "function": "MOD:search",
            "parameters": SEARCH_TOOL["function"]["parameters"],
        }
    ]


INPUTS = [
    {"id": "a", "prompt": "say a", "answer": "result for say a"},
    {"id": "b", "prompt": "say b", "answer": "result for say b"},
]


def run_cli(
    spec: Path, out: Path, base_url: str, *extra: str, exit_code: int = 0
) -> dict[str, Any]:
    result = cli(
        "run",
        str(spec),
        "--model",
        "openai:tiny",
        "--base-url",
        base_url,
        "--out",
        str(out),
        "--json",
        *extra,
        env=CLI_ENV,
        timeout=120,
    )
    assert result.returncode == exit_code, result.stderr
    return json.loads(result.stdout)


def test_full_run_twice_records_usage_and_sent_decoding(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    server = chat()
    decoding = {key: value for key, value in DECODING.items() if value not in (None, 0)}
    spec = env_builder.write(SEARCH_CODE, inputs=INPUTS, tools=spec_tools(), decoding=decoding)
    before = sorted(path.name for path in env_builder.root.iterdir())
    first = run_cli(spec, tmp_path / "one", server.base_url)
    assert first["counts"] == {"ok": 4} and first["pass_rate"]["value"] == 1.0
    assert len(server.received) == 8, "every model call reached the live server"
    second = run_cli(spec, tmp_path / "two", server.base_url + "/v1")
    assert second["digest"] == first["digest"]
    assert len(server.received) == 16
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    seeds = {record["seed"] for record in records}
    assert len(seeds) == 4, "each rollout has its own derived seed"
    sent_on_wire = []
    for body in server.received:
        assert body["model"] == "tiny" and body["tools"][0]["function"]["name"] == "search"
        sent_on_wire.append(
            {
                key: body[key]
                for key in body
                if key not in ("model", "messages", "tools", "tool_choice")
            }
        )
    for record in records:
        assert (
            record["status"] == "ok" and record["answer"] == f"result for say {record['input_id']}"
        )
        assert record["usage"]["total_tokens"] > 0
        assert record["usage"]["total_tokens"] == (
            record["usage"]["prompt_tokens"] + record["usage"]["completion_tokens"]
        )
        assert [call["fixture"] for call in record["tool_calls"]] == ["none"]
        turns = record["extra"]["turns"]
        assert [turn["finish_reason"] for turn in turns] == ["tool_calls", "stop"]
        for turn in turns:
            assert turn["sent"] == {
                "temperature": 0.7,
                "top_p": 0.9,
                "top_k": 40,
                "max_tokens": 64,
                "stop": ["END"],
                "seed": record["seed"],
            }
            assert turn["sent"] in sent_on_wire, "what is recorded is what the server got"
    assert {body["seed"] for body in server.received} == seeds
    meta = json.loads((tmp_path / "one" / "run.json").read_text())
    assert meta["model"] == {
        "uri": "openai:tiny",
        "base_url": f"{server.base_url}/v1",
        "model": "tiny",
    }
    after = sorted(path.name for path in env_builder.root.iterdir() if path.name != "__pycache__")
    assert after == before, "no cassette or other file written next to the env"


def test_frozen_world_still_refuses_other_network(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    server = chat()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        other.setblocking(False)
        code = f"""
import socket
def search(args, ctx):
    socket.create_connection(("127.0.0.1", {other.getsockname()[1]}), timeout=2).close()
    return "reached it"
"""
        spec = env_builder.write(code, inputs=INPUTS[:1], tools=spec_tools(), rollouts=1)
        summary = run_cli(spec, tmp_path / "run", server.base_url)
        with pytest.raises(BlockingIOError):
            other.accept()  # nothing ever connected
    assert summary["counts"] == {"ok": 1} and len(server.received) == 2
    (record,) = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert record["tool_calls"][0]["ok"] is False
    tool_message = record["messages"][-2]
    assert tool_message["role"] == "tool"
    assert "NetworkRefused" in tool_message["content"] and "refused" in tool_message["content"]


def test_infra_and_model_errors_are_counted_apart(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    server = chat(fault_rules={"say b": "500", "say c": "bad_tool_call"})
    inputs = [*INPUTS, {"id": "c", "prompt": "say c", "answer": "result for say c"}]
    spec = env_builder.write(SEARCH_CODE, inputs=inputs, tools=spec_tools())
    summary = run_cli(spec, tmp_path / "run", server.base_url)
    assert summary["counts"] == {"infra_error": 2, "model_error": 2, "ok": 2}
    records = {
        (r["input_id"], r["rollout"]): r for r in read_jsonl(tmp_path / "run" / "results.jsonl")
    }
    for rollout in (0, 1):
        infra, model = records["b", rollout], records["c", rollout]
        assert infra["error"] == "openai: HTTP 500 after 5 attempts: HTTP 500: injected HTTP 500"
        assert infra["passed"] is None and infra["verifiers"] == []
        assert "arguments are not valid JSON" in model["error"]
        assert model["passed"] is False
    per_input = {
        needle: sum(1 for body in server.received if body["messages"][-1]["content"] == needle)
        for needle in ("say a", "say b", "say c")
    }
    assert per_input == {"say a": 2, "say b": 10, "say c": 2}


def test_unreachable_base_url_every_rollout_infra_error(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(SEARCH_CODE, inputs=INPUTS, tools=spec_tools())
    # every rollout an infra error: the run could not produce its scores (exit 1)
    summary = run_cli(spec, tmp_path / "run", f"http://127.0.0.1:{closed_port()}", exit_code=1)
    assert summary["counts"] == {"infra_error": 4}
    assert summary["rollouts"] == 4
    for record in read_jsonl(tmp_path / "run" / "results.jsonl"):
        assert record["error"].startswith("openai: connection error after 5 attempts: ConnectError")


def test_cli_without_base_url_is_a_user_error(
    env_builder: EnvBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = env_builder.write(SEARCH_CODE, inputs=INPUTS, tools=spec_tools())
    result = cli("run", str(spec), "--model", "openai:tiny", "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "no base URL: pass --base-url or set OPENAI_BASE_URL" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3}}',
        b'{"usage": {"completion_tokens": 18446744073709551616}}',  # past 64 bits
        b'{"logprob": -123456789012345678901234567890}',
        b'{"logprob": NaN, "top": Infinity}',
        b'{"content": "\\ud800 alone"}',  # a lone surrogate's escape
        b'{"x": 1e400}',
        b'\xef\xbb\xbf{"bom": true}',
        b'{"a": 1, "a": 2}',
        b'{"seed": 9007199254740993, "f": 0.1, "z": -0.0}',
    ],
)
def test_a_reply_body_is_read_as_json_loads_reads_it(body: bytes) -> None:
    """The body goes through orjson where it agrees with json.loads, and to json.loads
    elsewhere: an integer past 64 bits stays an integer (orjson would make it a float), NaN,
    a lone surrogate and a BOM are read as before (a surrogate is then the model's error, not
    a broken body retried as the endpoint's)."""
    from rlenv.providers.openai import _json_body

    assert repr(_json_body(body)) == repr(json.loads(body))


@pytest.mark.parametrize("body", [b"not json", b'{"a": 1,}', b"\xff\xfe\x00", b"[" * 100_000])
def test_a_broken_reply_body_raises_as_json_loads_raises(body: bytes) -> None:
    from rlenv.providers.openai import _json_body

    with pytest.raises((ValueError, RecursionError)) as ours:
        _json_body(body)
    with pytest.raises((ValueError, RecursionError)) as reference:
        json.loads(body)
    assert type(ours.value) is type(reference.value)


@pytest.mark.parametrize(
    "key", ["sk-a\r\nX-Injected: 1", "sk-\u2603"], ids=["line-break", "not-latin-1"]
)
def test_an_api_key_no_header_can_carry_is_a_user_error(key: str) -> None:
    """Sent as `Authorization: Bearer KEY`: a line break would add a header of its own (the
    plain-HTTP client writes the head itself), and a character outside latin-1 cannot be sent
    at all. One line naming the key, before any request."""
    with pytest.raises(UserError, match="the API key .OPENAI_API_KEY. holds a line break"):
        OpenAIProvider("openai:tiny", "tiny", base_url="http://127.0.0.1:1", api_key=key)
    with pytest.raises(ValueError, match="holds a line break"):
        http1.Http1Pool("127.0.0.1", 1, "/", {"Authorization": key}, limit=1, timeout=1.0)


def test_a_base_url_path_with_a_space_is_sent_escaped(chat: Callable[..., ChatServer]) -> None:
    """Both clients send the path as yarl escapes it (a space as %20): the server names the
    path it was asked for, not a request line it could not read."""
    server = chat()
    provider = OpenAIProvider(
        "openai:tiny", "tiny", base_url=f"{server.base_url}/v1 x", max_retries=0
    )
    with pytest.raises(InfraError, match="HTTP 404.*no route /v1%20x/v1/chat/completions"):
        complete(provider, request())


LOADS_PROBE = """
import asyncio, json, sys
from rlenv.providers.base import ModelRequest
from rlenv.providers.openai import OpenAIProvider

provider = OpenAIProvider("openai:tiny", "tiny", base_url=sys.argv[1], max_retries=0)
request = ModelRequest(
    messages=[{"role": "user", "content": "hi"}], tools=[], decoding={}, seed=1,
    input_id="a", rollout=0, turn=0,
)

async def go():
    try:
        return await provider.complete(request)
    finally:
        await provider.aclose()

reply = asyncio.run(go())
print(json.dumps({"answered": bool(reply.message["content"]), "aiohttp": "aiohttp" in sys.modules}),
      file=sys.stderr)
"""


def test_the_light_clients_run_never_imports_aiohttp(
    chat: Callable[..., ChatServer], tmp_path: Path, http_client: str
) -> None:
    """aiohttp costs the orchestrator ~10 MB of heap and 0.12 s to import: a run through the
    plain-HTTP client, no proxy named, never imports it (not to read the proxy either);
    through aiohttp's, it does."""
    server = chat()
    probe = tmp_path / "probe.py"
    probe.write_text(LOADS_PROBE)
    seen = probe_report([str(probe), server.base_url], tmp_path)
    assert seen == {"answered": True, "aiohttp": http_client == "aiohttp"}
