"""Tool HTTP replay: hits, misses (error or declared fallback), POST bodies, refused network."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from tests.conftest import EnvBuilder, cli, read_jsonl

TOOL_CODE = """
import json, socket, urllib.request
import httpx

URL = "http://api.example.test/v1/lookup"

def lookup(args, ctx):
    response = httpx.post(URL, json={"term": args["term"], "lang": "en"}, timeout=5)
    return response.json()

def lookup_urllib(args, ctx):
    request = urllib.request.Request(URL + "?term=" + args["term"])
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())

def raw_socket(args, ctx):
    connection = socket.create_connection(("127.0.0.1", int(args["port"])), timeout=5)
    connection.sendall(b"hello")
    return "sent"

def policy(messages, tools, ctx):
    prompt = messages[-1]["content"] if messages[-1]["role"] == "user" else None
    if messages[-1]["role"] != "tool":
        tool, arguments = prompt.split(" ", 1)
        return {"tool_calls": [{"id": "c0", "function": {"name": tool, "arguments": arguments}}]}
    return messages[-1]["content"]
"""


def _interaction(
    method: str, uri: str, body: str | None, response: dict, content_type: str = "application/json"
) -> dict:
    return {
        "request": {
            "method": method,
            "uri": uri,
            "body": body,
            "headers": {"Content-Type": [content_type]} if body else {},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": json.dumps(response)},
        },
    }


def _cassette(path: Path) -> Path:
    document = {
        "version": 1,
        "interactions": [
            # recorded with other key order and spacing: must still match on content
            _interaction(
                "POST",
                "http://api.example.test/v1/lookup",
                '{"lang": "en", "term": "apple"}',
                {"term": "apple", "kind": "fruit"},
            ),
            _interaction(
                "POST",
                "http://api.example.test/v1/lookup",
                '{"lang":"en","term":"kale"}',
                {"term": "kale", "kind": "vegetable"},
            ),
            _interaction(
                "GET",
                "http://api.example.test/v1/lookup?term=apple",
                None,
                {"term": "apple", "via": "get"},
            ),
        ],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _spec(builder: EnvBuilder, inputs: list[dict], on_miss="error") -> Path:
    builder.root.mkdir(parents=True, exist_ok=True)
    cassette = _cassette(builder.root / "lookup.yaml")
    params = {"type": "object", "properties": {"term": {"type": "string"}}, "required": ["term"]}
    return builder.write(
        TOOL_CODE,
        inputs=inputs,
        tools=[
            {
                "name": "lookup",
                "function": "MOD:lookup",
                "parameters": params,
                "cassette": {"path": cassette.name},
                "on_miss": on_miss,
            },
            {
                "name": "lookup_urllib",
                "function": "MOD:lookup_urllib",
                "parameters": params,
                "cassette": {"path": cassette.name},
            },
            {"name": "raw_socket", "function": "MOD:raw_socket"},
        ],
        verifiers=[{"type": "contains", "expected_field": "answer", "normalize": ["lower"]}],
        rollouts=1,
    )


def _run(spec: Path, out: Path) -> tuple[dict, list[dict]]:
    result = cli("run", str(spec), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), read_jsonl(out / "results.jsonl")


def test_hits_match_on_method_url_and_body(env_builder: EnvBuilder, tmp_path: Path) -> None:
    inputs = [
        {"id": "1", "prompt": 'lookup {"term": "apple"}', "answer": "fruit"},
        {"id": "2", "prompt": 'lookup {"term": "kale"}', "answer": "vegetable"},
        {"id": "3", "prompt": 'lookup_urllib {"term": "apple"}', "answer": "get"},
    ]
    summary, records = _run(_spec(env_builder, inputs), tmp_path / "hit")
    assert summary["pass_rate"]["value"] == 1.0
    assert summary["fixtures"] == {"hit": 3}
    assert all(record["tool_calls"][0]["fixture"] == "hit" for record in records)


def test_miss_is_an_error_and_counted(env_builder: EnvBuilder, tmp_path: Path) -> None:
    inputs = [
        {"id": "1", "prompt": 'lookup {"term": "apple"}', "answer": "fruit"},
        {"id": "2", "prompt": 'lookup {"term": "durian"}', "answer": "fruit"},
    ]
    summary, records = _run(_spec(env_builder, inputs), tmp_path / "miss")
    assert summary["counts"] == {"fixture_miss": 1, "ok": 1}
    missed = next(record for record in records if record["input_id"] == "2")
    assert missed["status"] == "fixture_miss" and missed["passed"] is False
    assert (
        "unrecorded request for tool 'lookup': POST http://api.example.test/v1/lookup"
        in missed["error"]
    )


def test_declared_fallback_is_used_and_counted(env_builder: EnvBuilder, tmp_path: Path) -> None:
    inputs = [{"id": "1", "prompt": 'lookup {"term": "durian"}', "answer": "unknown"}]
    spec = _spec(env_builder, inputs, on_miss={"status": 200, "body": {"kind": "unknown"}})
    summary, records = _run(spec, tmp_path / "fallback")
    assert summary["counts"] == {"ok": 1} and summary["pass_rate"]["value"] == 1.0
    assert records[0]["tool_calls"][0]["fixture"] == "fallback"
    assert summary["fixtures"] == {"fallback": 1}


def test_raw_network_is_refused_inside_a_tool(env_builder: EnvBuilder, tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    inputs = [{"id": "1", "prompt": f'raw_socket {{"port": {port}}}', "answer": "sent"}]
    try:
        summary, records = _run(_spec(env_builder, inputs), tmp_path / "net")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected
    finally:
        server.close()
    content = records[0]["messages"][2]["content"]
    assert content.startswith(
        "error: NetworkRefused: rlenv frozen world: outbound connection to 127.0.0.1"
    )
    assert records[0]["tool_calls"][0]["ok"] is False
    assert summary["pass_rate"]["value"] == 0.0


def test_corrupt_cassette_is_a_user_error(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = _spec(env_builder, [{"id": "1", "prompt": 'lookup {"term": "apple"}', "answer": "x"}])
    (spec.parent / "lookup.yaml").write_text("interactions: [ {request: ")
    result = cli("validate", str(spec))
    assert result.returncode == 2
    assert "lookup.yaml: cassette cannot be read" in result.stderr


JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
API = "http://api.example.test"
# (method, uri, body, content type): what a cassette holds ...
RECORDED = [
    ("GET", f"{API}/v1/items?b=2&a=1", None, JSON),
    ("POST", f"{API}/v1/lookup", '{"term": "apple", "lang": "en"}', JSON),
    ("POST", f"{API}/v1/lookup", '{"term": "pear", "lang": "en"}', JSON),
    ("POST", "http://api.example.test:8080/v1/lookup", '{"term": "apple", "lang": "en"}', JSON),
    ("POST", "https://api.example.test/v1/form", "term=apple&lang=en", FORM),
    ("PUT", f"{API}/v1/lookup", '{"term": "apple", "lang": "en"}', JSON),
    ("POST", f"{API}/v1/list", '{"y": [1, 2], "x": 1}', JSON),
    ("GET", API, None, JSON),
]
# ... and requests a tool makes: equal to a recorded one up to normalisation, or not
PROBES = [
    ("GET", "http://API.example.test:80/v1/items?a=1&b=2", None, JSON),
    ("GET", f"{API}/v1/items?a=1", None, JSON),
    ("GET", f"{API}/v1/items?a=1&b=3", None, JSON),
    ("GET", f"{API}/v1/Items?a=1&b=2", None, JSON),
    ("POST", f"{API}/v1/lookup", '{"lang":"en","term":"apple"}', JSON),
    ("POST", f"{API}/v1/lookup", '{"term": "pear", "lang": "en"}', JSON),
    ("POST", f"{API}/v1/lookup", '{"term": "plum", "lang": "en"}', JSON),
    ("POST", f"{API}/v1/lookup", '{"term": "apple"}', JSON),
    ("POST", "http://api.example.test:8080/v1/lookup", '{"lang": "en", "term": "apple"}', JSON),
    ("POST", "http://api.example.test:8081/v1/lookup", '{"term": "apple", "lang": "en"}', JSON),
    ("POST", "https://api.example.test:443/v1/form", "lang=en&term=apple", FORM),
    ("POST", f"{API}/v1/form", "term=apple&lang=en", FORM),
    ("POST", "https://api.example.test/v1/form", "term=apple&lang=fr", FORM),
    ("PUT", f"{API}/v1/lookup", '{"lang": "en", "term": "apple"}', JSON),
    ("DELETE", f"{API}/v1/lookup", '{"term": "apple", "lang": "en"}', JSON),
    ("POST", f"{API}/v1/list", '{"x":1,"y":[1,2]}', JSON),
    ("POST", f"{API}/v1/list", '{"x": 1, "y": [2, 1]}', JSON),
    ("GET", f"{API}/", None, JSON),
    ("GET", "https://api.example.test/", None, JSON),
]
# vcrpy's default matchers plus its body matcher (parses JSON and form bodies by content type)
VCR_MATCH_ON = ("method", "scheme", "host", "port", "path", "query", "body")


def test_index_lookup_matches_vcrpy_semantics(tmp_path: Path) -> None:
    from vcr.config import VCR
    from vcr.matchers import requests_match
    from vcr.request import Request

    from rlenv.world.replay import ToolIndex, load_interactions, request_key
    from rlenv.world.scrub import Scrubber

    a = request_key("POST", "http://Host.test:80/a?b=2&a=1", '{"x": 1, "y": [1, 2]}')
    b = request_key("post", "http://host.test/a?a=1&b=2", '{"y":[1,2],"x":1}')
    assert a == b
    assert a != request_key("POST", "http://host.test/a?a=1&b=2", '{"y":[2,1],"x":1}')
    assert a != request_key("PUT", "http://host.test/a?a=1&b=2", '{"y":[1,2],"x":1}')

    cassette = tmp_path / "cassette.yaml"
    interactions = [
        _interaction(method, uri, body, {"recorded": number}, kind)
        for number, (method, uri, body, kind) in enumerate(RECORDED)
    ]
    cassette.write_text(yaml.safe_dump({"version": 1, "interactions": interactions}))
    index = ToolIndex("lookup", cassette, Scrubber()).load()
    recorded = [request for request, _ in load_interactions(cassette)]
    matchers = [VCR().matchers[name] for name in VCR_MATCH_ON]

    def by_index(request: Request) -> int | None:
        response = index.response(index.key_for(request))
        return None if response is None else json.loads(response["body"]["string"])["recorded"]

    def by_vcrpy(request: Request) -> int | None:
        matching = (
            n for n, other in enumerate(recorded) if requests_match(request, other, matchers)
        )
        return next(matching, None)

    probes = [
        Request(method, uri, body, {"Content-Type": kind} if body else {})
        for method, uri, body, kind in PROBES
    ]
    ours = [(probe, by_index(request)) for probe, request in zip(PROBES, probes, strict=True)]
    vcrpys = [(probe, by_vcrpy(request)) for probe, request in zip(PROBES, probes, strict=True)]
    assert ours == vcrpys, "the index hits and misses exactly where vcrpy's matchers do"
    # not vacuous: every recorded interaction is hit by some probe, and some probes miss
    assert {hit for _, hit in vcrpys} == {*range(len(RECORDED)), None}
    # each serve is a fresh copy (vcrpy edits the response it plays: the next serve of the
    # same recording must not see that)
    key = index.key_for(probes[0])
    served = index.response(key)
    assert served is not None and served == index.response(key)
    served["headers"].clear()
    served["body"]["string"] = b"changed"
    assert index.response(key) != served


def test_requests_that_differ_only_in_scrubbed_fields_are_refused(env_builder: EnvBuilder) -> None:
    env_builder.root.mkdir(parents=True, exist_ok=True)
    document = {
        "version": 1,
        "interactions": [
            _interaction(
                "POST",
                "http://api.example.test/v1/lookup",
                '{"term": "a", "password": "REDACTED"}',
                {"answer": 1},
            ),
            _interaction(
                "POST",
                "http://api.example.test/v1/lookup",
                '{"term": "a", "password": "other-value"}',
                {"answer": 2},
            ),
        ],
    }
    (env_builder.root / "lookup.yaml").write_text(yaml.safe_dump(document))
    spec = env_builder.write(
        TOOL_CODE,
        tools=[{"name": "lookup", "function": "MOD:lookup", "cassette": {"path": "lookup.yaml"}}],
    )
    result = cli("validate", str(spec))
    assert result.returncode == 2
    assert "differ only in scrubbed (secret-named) fields" in result.stderr


def test_ordinary_fields_named_key_are_not_scrubbed() -> None:
    from rlenv.world.scrub import Scrubber

    scrubber = Scrubber()
    assert not scrubber.is_secret_name("key") and not scrubber.is_secret_name("session")
    assert scrubber.is_secret_name("api_key") and scrubber.is_secret_name("access_token")
