"""Every route out of the frozen world is refused: HTTP clients, raw sockets, subprocesses."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

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


def test_every_route_out_is_refused(env_builder: EnvBuilder, tmp_path: Path) -> None:
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
    spec = env_builder.write(
        ROUTES_CODE,
        inputs=inputs,
        tools=[{"name": "route", "function": "MOD:route"}],
        verifiers=[{"type": "regex", "pattern": "CONNECTED"}],
        rollouts=1,
    )
    try:
        result = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # no route reached the listening server
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    refused = 0
    for route in routes:
        record = records[route]
        assert record["passed"] is False
        if record["status"] == "fixture_miss":  # HTTP clients: intercepted as unrecorded requests
            assert "unrecorded request for tool 'route': GET http://127.0.0.1" in record["error"]
        else:  # raw sockets, DNS, subprocesses: refused by the guard / the network namespace
            content = record["messages"][2]["content"]
            assert content.startswith("error:") and "CONNECTED" not in content, (route, content)
        refused += 1
    assert refused == len(routes)
    print(f"routes refused / tried: {refused}/{len(routes)}: {', '.join(routes)}")
