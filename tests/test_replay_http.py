"""The light replay path (rlenv/world/replay_http.py): httpx (sync and async) and requests are
answered from the index without vcrpy's stubs, and must do exactly what vcrpy's path does.

Each client library sends the same sequence of requests through `replay_cassette` twice, once
with the light path and once through vcrpy alone; what the tool sees (responses or errors) and
the fixture events must be equal, and the hits and misses must be the ones expected here.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import yaml

from tests.conftest import EnvBuilder, cli, read_jsonl

API = "http://api.example.test"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


def _recorded(
    method: str,
    uri: str,
    body: str | None,
    content_type: str | None,
    reply: Any,
    *,
    status: int = 200,
    headers: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    text = reply if isinstance(reply, bytes) else json.dumps(reply)
    return {
        "request": {
            "method": method,
            "uri": uri,
            "body": body,
            "headers": {"Content-Type": [content_type]} if content_type else {},
        },
        "response": {
            "status": {"code": status, "message": "OK" if status < 300 else "Found"},
            "headers": {"Content-Type": [JSON], **(headers or {})},
            "body": {"string": text},
        },
    }


INTERACTIONS = [
    _recorded(
        "POST",
        f"{API}/v1/lookup",
        '{"lang": "en", "term": "apple"}',
        JSON,
        {"kind": "fruit"},
        headers={"Set-Cookie": ["REDACTED"], "X-Multi": ["1", "2"]},
    ),
    # recorded scrubbed: the tool sends the real password, the index keys the scrubbed form
    _recorded("POST", f"{API}/v1/form", "password=REDACTED&term=kale", FORM, {"kind": "veg"}),
    _recorded("GET", f"{API}/v1/items?a=1&b=2", None, None, {"items": [1, 2]}),
    _recorded(
        "GET",
        f"{API}/old",
        None,
        None,
        "",
        status=302,
        headers={"Location": [f"{API}/v1/items?b=2&a=1"]},
    ),
    _recorded(
        "GET",
        f"{API}/v1/zipped",
        None,
        None,
        gzip.compress(b'{"zipped": true}', mtime=0),
        headers={"Content-Encoding": ["gzip"], "Transfer-Encoding": ["chunked"]},
    ),
]

# (name, method, path, keyword arguments of the client call, whether it is a hit)
PROBES: list[tuple[str, str, str, dict[str, Any], bool]] = [
    (
        "json, other key order",
        "POST",
        "/v1/lookup",
        {"json": {"term": "apple", "lang": "en"}},
        True,
    ),
    ("same request again", "POST", "/v1/lookup", {"json": {"term": "apple", "lang": "en"}}, True),
    ("body differs", "POST", "/v1/lookup", {"json": {"term": "apple", "lang": "fr"}}, False),
    ("method differs", "PUT", "/v1/lookup", {"json": {"term": "apple", "lang": "en"}}, False),
    (
        "a form body with a space sent as text/plain: not scrubbed, a miss",
        "POST",
        "/v1/form",
        {"content": b"password=hunter2 x&term=kale", "headers": {"Content-Type": "text/plain"}},
        False,
    ),
    (
        "the same body as a form: scrubbed, a hit (after it, the password is known by value)",
        "POST",
        "/v1/form",
        {"content": b"password=hunter2 x&term=kale", "headers": {"Content-Type": FORM}},
        True,
    ),
    ("query in another order", "GET", "/v1/items?b=2&a=1", {}, True),
    ("query value differs", "GET", "/v1/items?a=1&b=3", {}, False),
    ("a redirect, followed", "GET", "/old", {}, True),
    ("gzip body, chunked", "GET", "/v1/zipped", {}, True),
]


def _cassette(path: Path) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "interactions": INTERACTIONS}))
    return path


def _indexes(cassette: Path) -> dict[str, Any]:
    from rlenv.world.replay import ToolIndex
    from rlenv.world.scrub import Scrubber

    fallback = {"status": 200, "body": {"kind": "unknown"}}
    return {
        "lookup": ToolIndex("lookup", cassette, Scrubber()).load(),
        "with_fallback": ToolIndex("with_fallback", cassette, Scrubber(), fallback).load(),
    }


def _cookies(jar: Any) -> list[tuple[str, str | None, str]]:
    return sorted((cookie.name, cookie.value, cookie.domain) for cookie in jar)


def _httpx_sync(method: str, url: str, options: dict[str, Any], client: Any) -> Any:
    response = client.request(method, url, **options)
    return (
        response.status_code,
        response.reason_phrase,
        response.headers.multi_items(),
        response.content,
        response.http_version,
        [r.status_code for r in response.history],
        _cookies(client.cookies.jar),
    )


def _requests(method: str, url: str, options: dict[str, Any], session: Any) -> Any:
    options = {("data" if name == "content" else name): value for name, value in options.items()}
    response = session.request(method, url, timeout=5, **options)
    return (
        response.status_code,
        response.reason,
        sorted(response.headers.items()),
        response.content,
        response.encoding,
        response.url,
        [r.status_code for r in response.history],
        _cookies(session.cookies),
    )


def _outcome(call: Callable[[], Any]) -> Any:
    from rlenv.errors import FixtureMiss

    try:
        return call()
    except FixtureMiss as exc:
        return ("FixtureMiss", str(exc))


def _replay(cassette: Path, library: str, tool: str | None, light: bool) -> tuple[list, list]:
    """Every probe through one library; what it saw and the fixture events."""
    from rlenv.world.replay import replay_cassette

    seen: list[Any] = []
    with replay_cassette(_indexes(cassette), cassette.parent / "none.yaml", light=light) as c:
        type(c).current = tool
        if library == "httpx":
            with httpx.Client(follow_redirects=True) as client:
                for _, method, path, options, _ in PROBES:
                    seen.append(_outcome(partial(_httpx_sync, method, API + path, options, client)))
        elif library == "requests":
            with requests.Session() as session:
                for _, method, path, options, _ in PROBES:
                    seen.append(_outcome(partial(_requests, method, API + path, options, session)))
        else:

            async def run() -> None:
                async with httpx.AsyncClient(follow_redirects=True) as client:
                    for _, method, path, options, _ in PROBES:
                        try:
                            response = await client.request(method, API + path, **options)
                            seen.append(
                                (
                                    response.status_code,
                                    response.headers.multi_items(),
                                    response.content,
                                    _cookies(client.cookies.jar),
                                )
                            )
                        except Exception as exc:
                            seen.append((type(exc).__name__, str(exc)))

            asyncio.run(run())
        events = list(type(c).events)
    return seen, events


@pytest.mark.parametrize("library", ["httpx", "httpx-async", "requests"])
def test_light_path_answers_exactly_as_vcrpy(library: str, tmp_path: Path) -> None:
    cassette = _cassette(tmp_path / "lookup.yaml")
    light, light_events = _replay(cassette, library, "lookup", light=True)
    vcrpy, vcrpy_events = _replay(cassette, library, "lookup", light=False)
    for probe, ours, theirs in zip(PROBES, light, vcrpy, strict=True):
        assert ours == theirs, probe[0]
    assert light_events == vcrpy_events
    # and they are the hits and misses matching promises, not just the same ones
    missed = [seen[0] == "FixtureMiss" for seen in light]
    assert missed == [not hit for *_, hit in PROBES]
    assert [event.outcome for event in light_events] == [
        "hit",
        "hit",
        "miss",
        "miss",
        "miss",
        "hit",
        "hit",
        "miss",
        "hit",
        "hit",
        "hit",
    ]
    body_miss = light[2][1]
    assert body_miss.startswith(
        "unrecorded request for tool 'lookup': POST http://api.example.test/v1/lookup body sha256:"
    )
    assert light[0][:4] == light[1][:4], "a repeated request gets the same recorded response"
    # the hit's recorded body, and the gzip body as each library hands it over
    assert json.loads(light[0][3 if library != "httpx-async" else 2]) == {"kind": "fruit"}


@pytest.mark.parametrize("library", ["httpx", "requests"])
def test_fallback_and_a_call_outside_any_tool(library: str, tmp_path: Path) -> None:
    cassette = _cassette(tmp_path / "lookup.yaml")
    for tool in ("with_fallback", None):
        light, light_events = _replay(cassette, library, tool, light=True)
        vcrpy, vcrpy_events = _replay(cassette, library, tool, light=False)
        assert light == vcrpy and light_events == vcrpy_events
    fallback, events = _replay(cassette, library, "with_fallback", light=True)
    assert {event.outcome for event in events} == {"hit", "fallback"}
    assert json.loads(fallback[2][3]) == {"kind": "unknown"}
    outside, events = _replay(cassette, library, None, light=True)
    assert all(seen[0] == "FixtureMiss" for seen in outside)
    assert outside[0][1].startswith("unrecorded request for tool None: POST")
    assert {event.outcome for event in events} == {"miss"}


def test_light_path_is_in_place_only_while_replaying(tmp_path: Path) -> None:
    from rlenv.world.replay import replay_cassette

    before = (httpx.HTTPTransport.handle_request, requests.adapters.HTTPAdapter.send)
    cassette = _cassette(tmp_path / "lookup.yaml")
    with replay_cassette(_indexes(cassette), tmp_path / "none.yaml"):
        for patched in (
            httpx.HTTPTransport.handle_request,
            httpx.AsyncHTTPTransport.handle_async_request,
            requests.adapters.HTTPAdapter.send,
        ):
            assert patched.__module__ == "rlenv.world.replay_http"
    assert (httpx.HTTPTransport.handle_request, requests.adapters.HTTPAdapter.send) == before


def test_requests_with_status_retries_goes_through_urllib3(tmp_path: Path) -> None:
    """urllib3 retries a 503 with Retry-After itself: the light path leaves such adapters to it."""
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    from rlenv.world.replay import replay_cassette

    cassette = tmp_path / "lookup.yaml"
    busy = _recorded("GET", f"{API}/busy", None, None, {"busy": True}, status=503)
    busy["response"]["headers"]["Retry-After"] = ["0"]
    cassette.write_text(yaml.safe_dump({"version": 1, "interactions": [busy]}))
    outcomes = []
    for light in (True, False):
        with replay_cassette(_indexes(cassette), tmp_path / "none.yaml", light=light) as c:
            type(c).current = "lookup"
            with requests.Session() as session:
                session.mount("http://", HTTPAdapter(max_retries=Retry(total=2)))
                outcomes.append(_outcome(lambda s=session: s.get(f"{API}/busy").status_code))
            outcomes.append([event.outcome for event in type(c).events])
    assert outcomes[0] == outcomes[2] and outcomes[1] == outcomes[3] == ["hit"] * 3


TOOLS = """
import asyncio
import httpx
import requests

URL = "http://api.example.test/v1/lookup"

def lookup_requests(args, ctx):
    response = requests.post(URL, json={"term": args["term"], "lang": "en"}, timeout=5)
    return response.json()

def lookup_async(args, ctx):
    async def call():
        async with httpx.AsyncClient() as client:
            response = await client.post(URL, json={"lang": "en", "term": args["term"]})
            return response.json()
    return asyncio.run(call())

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        tool, arguments = messages[-1]["content"].split(" ", 1)
        return {"tool_calls": [{"id": "c0", "function": {"name": tool, "arguments": arguments}}]}
    return messages[-1]["content"]
"""


def test_requests_and_async_httpx_tools_in_a_run(env_builder: EnvBuilder, tmp_path: Path) -> None:
    env_builder.root.mkdir(parents=True, exist_ok=True)
    _cassette(env_builder.root / "lookup.yaml")
    params = {"type": "object", "properties": {"term": {"type": "string"}}, "required": ["term"]}
    tools = [
        {
            "name": name,
            "function": f"MOD:{name}",
            "parameters": params,
            "cassette": {"path": "lookup.yaml"},
        }
        for name in ("lookup_requests", "lookup_async")
    ]
    inputs = [
        {"id": "1", "prompt": 'lookup_requests {"term": "apple"}', "answer": "fruit"},
        {"id": "2", "prompt": 'lookup_async {"term": "apple"}', "answer": "fruit"},
        {"id": "3", "prompt": 'lookup_requests {"term": "durian"}', "answer": "fruit"},
        {"id": "4", "prompt": 'lookup_async {"term": "durian"}', "answer": "fruit"},
    ]
    spec = env_builder.write(
        TOOLS,
        inputs=inputs,
        tools=tools,
        verifiers=[{"type": "contains", "expected_field": "answer"}],
        rollouts=1,
    )
    result = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    records = {
        record["input_id"]: record for record in read_jsonl(tmp_path / "run" / "results.jsonl")
    }
    assert summary["counts"] == {"fixture_miss": 2, "ok": 2}
    assert summary["fixtures"] == {"hit": 2}
    for number in ("1", "2"):
        assert records[number]["passed"] is True
        assert records[number]["tool_calls"][0]["fixture"] == "hit"
    for number, tool in (("3", "lookup_requests"), ("4", "lookup_async")):
        assert records[number]["status"] == "fixture_miss"
        assert records[number]["error"].startswith(
            f"unrecorded request for tool '{tool}': POST http://api.example.test/v1/lookup body"
        )
