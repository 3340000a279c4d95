"""Every route out of the frozen world is refused: HTTP clients, raw sockets, subprocesses."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EnvBuilder, cli, read_jsonl

ROUTES_CODE = """
import json, os, socket, subprocess, sys, urllib.request

def route(args, ctx):
    port = int(args["port"])
    url = f"http://127.0.0.1:{port}/x"
    name = args["route"]
    if name == "httpx":
        import httpx
        httpx.get(url, timeout=3)
    elif name == "requests":
        import requests
        requests.get(url, timeout=3)
    elif name == "urllib":
        urllib.request.urlopen(url, timeout=3)
    elif name == "aiohttp":
        import asyncio, aiohttp
        async def go():
            async with aiohttp.ClientSession() as session:
                async with session.get(url) as response:
                    return await response.text()
        asyncio.run(go())
    elif name == "socket":
        socket.create_connection(("127.0.0.1", port), timeout=3)
    elif name == "dns":
        socket.getaddrinfo("example.com", 80)
    elif name == "subprocess":
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
        command = [sys.executable, "-c", code]
        result = subprocess.run(command, capture_output=True, text=True, env={})
        if result.returncode != 0:
            raise ConnectionError(result.stderr.strip().splitlines()[-1])
    return "CONNECTED"

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        call = {"name": "route", "arguments": messages[-1]["content"]}
        return {"tool_calls": [{"id": "c", "function": call}]}
    return messages[-1]["content"]
"""

ROUTES = ["httpx", "requests", "urllib", "aiohttp", "socket", "dns", "subprocess"]


def _routes_and_listener() -> tuple[list[str], socket.socket, int, list[dict[str, str]]]:
    """The routes installed here, a listening socket they all aim at, its port, one input per
    route."""
    routes = [
        route
        for route in ROUTES
        if route not in ("requests", "aiohttp") or importlib.util.find_spec(route) is not None
    ]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    inputs = [
        {"id": route, "prompt": f'{{"route": "{route}", "port": {port}}}', "answer": "x"}
        for route in routes
    ]
    return routes, server, port, inputs


def _run_unreached(spec: Path, out: Path, server: socket.socket) -> Any:
    """`rlenv run` of the routes env; no connection may have reached `server` (closed after)."""
    try:
        result = cli("run", str(spec), "--out", str(out), "--json")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # no route reached the listening server
    finally:
        server.close()
    return result


def test_every_route_out_is_refused(env_builder: EnvBuilder, tmp_path: Path) -> None:
    routes, server, port, inputs = _routes_and_listener()
    spec = env_builder.write(
        ROUTES_CODE,
        inputs=inputs,
        tools=[{"name": "route", "function": "MOD:route"}],
        verifiers=[{"type": "regex", "pattern": "CONNECTED"}],
        rollouts=1,
    )
    result = _run_unreached(spec, tmp_path / "run", server)
    # every route refused: fixture misses on most rollouts fail the run (exit 1), honestly
    assert result.returncode in (0, 1), result.stderr
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    refused = {route: _refused_by(records[route], port) for route in routes}
    expected = {route: EXPECTED_LAYER.get(route, "replay") for route in routes}
    assert refused == expected, "each route refused, and by the layer meant to refuse it"
    print(f"routes refused / tried: {len(refused)}/{len(routes)}: {refused}")


# which layer refuses which route: HTTP clients hit the replay layer (an unrecorded request),
# raw sockets and name lookups the in-process guard, a subprocess the network namespace
EXPECTED_LAYER = {"socket": "guard", "dns": "guard", "subprocess": "netns"}


def _refused_by(record: dict, port: int) -> str | None:
    """The layer whose refusal the record shows, or None if the route was not refused."""
    assert record["passed"] is False, record
    error = record["error"] or ""
    if record["status"] == "fixture_miss":
        unrecorded = f"unrecorded request for tool 'route': GET http://127.0.0.1:{port}/x"
        return "replay" if unrecorded in error else None
    content = record["messages"][2]["content"] if len(record["messages"]) > 2 else ""
    if not content.startswith("error:") or "CONNECTED" in content:
        return None
    if "NetworkRefused: rlenv frozen world:" in content:
        return "guard"
    if "Network is unreachable" in content or "Temporary failure in name resolution" in content:
        return "netns"  # no route out of the namespace (or no resolver in it)
    return None


NO_TOOL_POLICY = """
def policy(messages, tools, ctx):
    try:
        return route(json.loads(messages[-1]["content"]), ctx)
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {exc}"
"""


def test_every_route_out_is_refused_from_a_policy_without_tools(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """An env with no tool (and no judge) has no recorded HTTP: its workers start without
    vcrpy's patches, and the same routes taken by the policy itself meet the network guard."""
    routes, server, port, inputs = _routes_and_listener()
    spec = env_builder.write(
        ROUTES_CODE.replace("def policy(", "def _unused(") + NO_TOOL_POLICY,
        inputs=inputs,
        verifiers=[{"type": "regex", "pattern": "CONNECTED"}],
        rollouts=1,
    )
    result = _run_unreached(spec, tmp_path / "run", server)
    assert result.returncode in (0, 1), result.stderr
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    answers = {route: records[route]["answer"] or "" for route in routes}
    assert all(answer.startswith("refused: ") for answer in answers.values()), answers
    # aiohttp words the guard's refusal as its own connector error; a subprocess meets the
    # network namespace
    named = [route for route in routes if route not in ("aiohttp", "subprocess")]
    assert all("rlenv frozen world" in answers[route] for route in named), answers
