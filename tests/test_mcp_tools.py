"""MCP tools (issue 29 item 5): a tool served by an MCP server, written with the `mcp` SDK and
reached over stdio or streamable HTTP on loopback, is listed by `validate`, recorded (scrubbed)
by `record` and replayed by `run` with the server absent: strict misses, equal digests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, EnvBuilder, cli, read_jsonl

pytest.importorskip("mcp")

SERVER = ROOT / "tests" / "mcp_server.py"
SECRET = "sk-live-4b3a2918f7e6d5c4b3a2"

POLICY = """
import json

def policy(messages, tools, ctx):
    last = messages[-1]
    if last["role"] == "tool":
        return last["content"]
    words = last["content"].split()
    if words[0] == "add":
        arguments = {"a": int(words[1]), "b": int(words[2])}
    else:
        arguments = {"token": words[1]}
    call = {"id": "c1", "function": {"name": words[0], "arguments": json.dumps(arguments)}}
    return {"tool_calls": [call]}
"""

INPUTS = [
    {"id": "one", "prompt": "add 2 3"},
    {"id": "two", "prompt": f"whoami {SECRET}"},
    {"id": "three", "prompt": "add 40 2"},  # left out of the recording: a miss at replay
]


def _spec(builder: EnvBuilder, server: dict[str, Any]) -> Path:
    spec = builder.write(POLICY, inputs=INPUTS, verifiers=[{"type": "regex", "pattern": "."}])
    document = yaml.safe_load(spec.read_text())
    document["rollouts"] = 1
    document["limits"] = {"max_turns": 4, "timeout_s": 600}  # a live call starts two interpreters
    document["tools"] = [
        {"name": "add", "mcp": server, "cassette": {"path": "add.jsonl"}},
        {"name": "whoami", "mcp": server, "cassette": {"path": "whoami.jsonl"}},
    ]
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The test MCP server over streamable HTTP on loopback; its URL once it accepts."""
    port = _free_port()
    log = tmp_path / "http-calls.log"
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={"PATH": "/usr/bin:/bin", "MCP_CALL_LOG": str(log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # wait until it listens (a connect, not a sleep, tells)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the MCP server exited"
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def _record_and_replay(spec: Path, tmp_path: Path, calls: Path, runs: int) -> None:
    """`record` (scrubbed), then `runs` replays with the server's call log unchanged: strict
    misses, and (two runs) equal digests."""
    recorded = cli(
        "record", str(spec), "--limit", "2", env={"MCP_CALL_LOG": str(calls)}, timeout=240
    )
    assert recorded.returncode == 0, recorded.stderr
    assert "add: 1 interactions (1 new)" in recorded.stdout, recorded.stdout
    assert "whoami: 1 interactions (1 new)" in recorded.stdout
    cassette = (spec.parent / "whoami.jsonl").read_text()
    assert SECRET not in cassette and "REDACTED" in cassette, cassette
    assert '"text":"5"' in (spec.parent / "add.jsonl").read_text()
    served = calls.read_text() if calls.exists() else ""
    digests = []
    for attempt in "ab"[:runs]:
        out = tmp_path / f"run-{attempt}"
        run = cli("run", str(spec), "--out", str(out), "--json", env={"MCP_CALL_LOG": str(calls)})
        assert run.returncode == 0, run.stderr
        digests.append(json.loads(run.stdout)["digest"])
        records = {record["input_id"]: record for record in read_jsonl(out / "results.jsonl")}
        assert records["one"]["status"] == "ok" and records["one"]["answer"] == "5"
        assert records["two"]["status"] == "ok"
        assert records["two"]["answer"] == "user for REDACTED"
        missed = records["three"]
        assert missed["status"] == "fixture_miss", missed
        assert "'add'" in missed["error"] and '{"a":40,"b":2}' in missed["error"], missed["error"]
    assert len(set(digests)) == 1
    after = calls.read_text() if calls.exists() else ""
    assert after == served, "run started or reached the MCP server"


def test_stdio_server_listed_recorded_and_replayed_without_it(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    command = ["python", str(SERVER), "stdio"]  # `python`: the interpreter rlenv runs under
    spec = _spec(env_builder, {"command": command})
    calls = tmp_path / "stdio-calls.log"
    _record_and_replay(spec, tmp_path, calls, runs=2)
    assert calls.read_text().splitlines() == ["add 2 3", "whoami"]
    validated = cli("validate", str(spec))
    assert validated.returncode == 0, validated.stderr
    assert "tools add, whoami" in validated.stdout


def test_streamable_http_server_listed_recorded_and_replayed(
    env_builder: EnvBuilder, tmp_path: Path, http_server: str
) -> None:
    spec = _spec(env_builder, {"url": http_server})
    # one replay: the stdio test holds two replays to equal digests (replay is the same code
    # whichever transport recorded the cassette)
    _record_and_replay(spec, tmp_path, tmp_path / "http-calls.log", runs=1)
    validated = cli("validate", str(spec))
    assert validated.returncode == 0, validated.stderr
    assert f"MCP server {http_server}: tools add, whoami" in validated.stdout


@pytest.mark.parametrize(
    "server",
    [
        {"command": ["/nonexistent/mcp-server"]},
        {"command": [sys.executable, "-c", "import sys; sys.exit(3)"]},
        {"url": "http://127.0.0.1:9/mcp"},
    ],
    ids=["missing", "exits", "refused"],
)
def test_bad_server_is_one_line_exit_2(env_builder: EnvBuilder, server: dict[str, Any]) -> None:
    spec = _spec(env_builder, server)
    for name in ("add", "whoami"):  # empty cassettes: validate gets as far as the server
        (spec.parent / f"{name}.jsonl").write_text("")
    for command in ("record", "validate"):
        result = cli(command, str(spec), timeout=120)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "MCP server" in lines[0], result.stderr
        assert "Traceback" not in result.stderr


def test_a_secret_left_in_an_mcp_cassette_is_found(tmp_path: Path) -> None:
    """`validate` scans an MCP cassette with detect-secrets as it scans an HTTP one."""
    from rlenv.world.mcp import cassette_findings
    from rlenv.world.scrub import Scrubber

    leaked = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    entry = {
        "key": "k",
        "request": {"tool": "t", "arguments": {"q": "x"}},
        "result": {"content": [{"type": "text", "text": f"aws_secret_access_key={leaked}"}]},
    }
    cassette = tmp_path / "t.jsonl"
    cassette.write_text(json.dumps(entry) + "\n")
    found = cassette_findings(cassette, Scrubber(known=[]))
    assert found and "interaction 0 response body" in found[0], found
    entry["result"] = {"content": [{"type": "text", "text": "aws_secret_access_key=REDACTED"}]}
    cassette.write_text(json.dumps(entry) + "\n")
    assert cassette_findings(cassette, Scrubber(known=[])) == []


def test_a_drifted_tool_schema_is_one_line_at_validate_and_record(
    env_builder: EnvBuilder,
) -> None:
    """Issue 29: an MCP tool's `parameters` (what the model is shown, and what the cassette's
    calls were made with) are compared with the server's inputSchema at validate and record;
    a server whose tool changed is one line naming the first difference, exit 2."""
    from rlenv.spec import McpServer
    from rlenv.world.mcp import list_server_tools

    server = {"command": ["python", str(SERVER), "stdio"]}
    listed = list_server_tools(McpServer.model_validate(server), ROOT)
    schema = next(tool["inputSchema"] for tool in listed if tool["name"] == "add")
    assert schema["properties"]["b"]["type"] == "integer"
    spec = _spec(env_builder, server)
    for name in ("add", "whoami"):
        (spec.parent / f"{name}.jsonl").write_text("")
    document = yaml.safe_load(spec.read_text())
    # as a README reader writes it: the server's schema without the SDK's generated titles
    written = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    document["tools"][0]["parameters"] = {**written, "required": ["a", "b"]}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    validated = cli("validate", str(spec), timeout=120)
    assert validated.returncode == 0, validated.stderr
    drifted = json.loads(json.dumps(schema))
    drifted["properties"]["b"]["type"] = "string"  # the spec as written for an older server
    document["tools"][0]["parameters"] = drifted
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    for command in ("validate", "record"):
        result = cli(command, str(spec), timeout=120)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "tools[0].parameters" in lines[0] and "properties.b.type" in lines[0], lines[0]
        assert "'string'" in lines[0] and "'integer'" in lines[0], lines[0]
