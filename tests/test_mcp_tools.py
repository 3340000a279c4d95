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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, EnvBuilder, cli, in_process, read_jsonl

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


# what a README reader writes for `add`: the server's inputSchema without the SDK's generated
# titles (`title: Add Arguments`, `title: A`...), which validate and record must not call a drift
ADD_PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def _spec(root: Path, server: dict[str, Any]) -> Path:
    """The env over `server`: `add` with its parameters written by hand (compared with the
    server's schema), `whoami` without (nothing to compare)."""
    builder = EnvBuilder(root)
    builder.module = "mcp_policy"  # one name for both transports: their records are alike
    spec = builder.write(POLICY, inputs=INPUTS, verifiers=[{"type": "regex", "pattern": "."}])
    document = yaml.safe_load(spec.read_text())
    document["rollouts"] = 1
    document["limits"] = {"max_turns": 4, "timeout_s": 600}  # a live call starts two interpreters
    document["tools"] = [
        {
            "name": "add",
            "mcp": server,
            "parameters": ADD_PARAMETERS,
            "cassette": {"path": "add.jsonl"},
        },
        {"name": "whoami", "mcp": server, "cassette": {"path": "whoami.jsonl"}},
    ]
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Frozen:
    """An MCP env recorded with its server up, run with the server's call log watched, then
    validated (the server listed again)."""

    spec: Path
    calls: Path
    recorded: subprocess.CompletedProcess[str]
    served_before_run: str
    served_after_run: str
    summary: dict[str, Any]
    records: dict[str, dict[str, Any]]
    validated: Any  # `in_process`'s result: exit_code, stdout, stderr


def _freeze(root: Path, server: dict[str, Any], calls: Path) -> Frozen:
    """`record` (two inputs: the third is left out, a miss at replay), one `run`, `validate`:
    each through the real entry point. `calls`: the log of the calls the server served (a
    stdio server started by rlenv writes where $MCP_CALL_LOG says)."""
    spec = _spec(root / "env", server)
    env = {"MCP_CALL_LOG": str(calls)}
    recorded = cli("record", str(spec), "--limit", "2", env=env, timeout=240)
    assert recorded.returncode == 0, recorded.stderr
    before = calls.read_text() if calls.exists() else ""
    out = root / "run"
    run = cli("run", str(spec), "--out", str(out), "--json", "--workers", "1", env=env)
    assert run.returncode == 0, run.stderr
    after = calls.read_text() if calls.exists() else ""
    records = {record["input_id"]: record for record in read_jsonl(out / "results.jsonl")}
    # validate lists the server's tools again: called in this process (the SDK's import is
    # the most of a process's CPU; record and run above go through the entry point)
    validated = in_process("validate", str(spec))
    return Frozen(spec, calls, recorded, before, after, json.loads(run.stdout), records, validated)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The test MCP server over streamable HTTP on loopback: its URL once it accepts, and the
    log of the calls it served."""
    port = _free_port()
    log = tmp_path_factory.mktemp("mcp-http") / "http-calls.log"
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
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def over_stdio(tmp_path_factory: pytest.TempPathFactory) -> Frozen:
    command = ["python", str(SERVER), "stdio"]  # `python`: the interpreter rlenv runs under
    root = tmp_path_factory.mktemp("mcp-stdio")
    return _freeze(root, {"command": command}, root / "calls.log")


@pytest.fixture(scope="module")
def over_http(tmp_path_factory: pytest.TempPathFactory, http_server: tuple[str, Path]) -> Frozen:
    url, log = http_server
    return _freeze(tmp_path_factory.mktemp("mcp-http-env"), {"url": url}, log)


def _recorded_and_replayed(frozen: Frozen) -> None:
    """Recorded scrubbed, one line per call; replayed with the server's call log unchanged;
    the input left out of the recording is a strict miss naming the tool and its arguments."""
    recorded = frozen.recorded
    assert "add: 1 interactions (1 new)" in recorded.stdout, recorded.stdout
    assert "whoami: 1 interactions (1 new)" in recorded.stdout
    cassette = (frozen.spec.parent / "whoami.jsonl").read_text()
    assert SECRET not in cassette and "REDACTED" in cassette, cassette
    assert '"text":"5"' in (frozen.spec.parent / "add.jsonl").read_text()
    records = frozen.records
    assert records["one"]["status"] == "ok" and records["one"]["answer"] == "5"
    assert records["one"]["tool_calls"][0]["fixture"] == "hit"
    assert records["two"]["status"] == "ok"
    assert records["two"]["answer"] == "user for REDACTED"
    missed = records["three"]
    assert missed["status"] == "fixture_miss", missed
    assert "'add'" in missed["error"] and '{"a":40,"b":2}' in missed["error"], missed["error"]
    assert frozen.served_after_run == frozen.served_before_run, "run reached the MCP server"
    # validate reached the server again: its tools listed, `add`'s hand-written parameters
    # (no titles) found equal to the server's schema, as record found them
    assert frozen.validated.exit_code == 0, frozen.validated.stderr


def test_stdio_server_listed_recorded_and_replayed_without_it(over_stdio: Frozen) -> None:
    _recorded_and_replayed(over_stdio)
    # each recorded call reached the server once; listing its tools called none
    assert over_stdio.calls.read_text().splitlines() == ["add 2 3", "whoami"]
    assert "tools add, whoami" in over_stdio.validated.stdout


def test_streamable_http_server_listed_recorded_and_replayed(
    over_http: Frozen, http_server: tuple[str, Path]
) -> None:
    _recorded_and_replayed(over_http)
    url, _ = http_server
    served = over_http.calls.read_text().splitlines()
    assert sorted(served) == ["add 2 3", "whoami"], served
    assert f"MCP server {url}: tools add, whoami" in over_http.validated.stdout


def test_both_transports_record_the_same_cassettes_and_replay_to_one_digest(
    over_stdio: Frozen, over_http: Frozen
) -> None:
    """The same calls recorded over stdio and over HTTP are the same cassette lines, and their
    replays (two runs of one env's records) have one digest: replay is the same code whichever
    transport recorded, and it is deterministic."""
    for name in ("add.jsonl", "whoami.jsonl"):
        stdio = (over_stdio.spec.parent / name).read_bytes()
        assert stdio == (over_http.spec.parent / name).read_bytes(), name
    assert over_stdio.summary["digest"] == over_http.summary["digest"]
    assert over_stdio.summary["outcome_digest"] == over_http.summary["outcome_digest"]


@pytest.mark.parametrize(
    "server",
    [
        {"command": ["/nonexistent/mcp-server"]},
        {"command": [sys.executable, "-c", "import sys; sys.exit(3)"]},
        {"url": "http://127.0.0.1:9/mcp"},
    ],
    ids=["missing", "exits", "refused"],
)
def test_bad_server_is_one_line_exit_2(tmp_path: Path, server: dict[str, Any]) -> None:
    spec = _spec(tmp_path / "env", server)
    for name in ("add", "whoami"):  # empty cassettes: validate gets as far as the server
        (spec.parent / f"{name}.jsonl").write_text("")
    for command in ("record", "validate"):
        result = in_process(command, str(spec))
        assert result.exit_code == 2, (command, result.stdout, result.stderr)
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
    tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    """Issue 29: an MCP tool's `parameters` (what the model is shown, and what the cassette's
    calls were made with) are compared with the server's inputSchema at validate and record;
    a server whose tool changed is one line naming the first difference, exit 2. (The same
    comparison passing on a hand-written schema is in the stdio and HTTP tests; the server
    here is the module's HTTP one, already up: listing calls no tool.)"""
    url, _ = http_server
    spec = _spec(tmp_path / "env", {"url": url})
    for name in ("add", "whoami"):
        (spec.parent / f"{name}.jsonl").write_text("")
    document = yaml.safe_load(spec.read_text())
    drifted = json.loads(json.dumps(ADD_PARAMETERS))
    drifted["properties"]["b"]["type"] = "string"  # the spec as written for an older server
    document["tools"][0]["parameters"] = drifted
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    for command in ("validate", "record"):
        result = in_process(command, str(spec))
        assert result.exit_code == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "tools[0].parameters" in lines[0] and "properties.b.type" in lines[0], lines[0]
        assert "'string'" in lines[0] and "'integer'" in lines[0], lines[0]


def _cassette_entry(key: str, result: dict[str, Any]) -> bytes:
    from rlenv.canonical import canonical_bytes

    request = {"tool": "add", "arguments": {"a": 1, "b": 2}}
    return canonical_bytes({"key": key, "request": request, "result": result}) + b"\n"


def test_a_recorded_double_past_2_53_folds_and_replays_as_that_double(tmp_path: Path) -> None:
    """RFC 8785 writes 1e20 as 100000000000000000000: rlenv's own cassette is read back as the
    double it wrote (folded again to the same bytes, replayed as 1e20), not as an integer
    canonical JSON cannot hold (the fold raised IntegerDomainError, after the recording)."""
    from rlenv.world.mcp import load_cassette, merge_recording
    from rlenv.world.scrub import Scrubber

    result = {"content": [], "structuredContent": {"result": 1e20, "small": 0.5}}
    recorded, target = tmp_path / "recorded.jsonl", tmp_path / "add.jsonl"
    recorded.write_bytes(_cassette_entry("k1", result))
    assert b"100000000000000000000" in recorded.read_bytes()
    assert merge_recording(recorded, target, Scrubber()) == (1, 1)
    assert target.read_bytes() == recorded.read_bytes()
    replayed = load_cassette(target)["k1"]["structuredContent"]["result"]
    assert replayed == 1e20 and type(replayed) is float
    assert merge_recording(recorded, target, Scrubber()) == (1, 0)  # kept and folded again
    assert target.read_bytes() == recorded.read_bytes()


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "12345678901234567890"])
def test_a_cassette_number_canonical_json_cannot_hold_is_one_line(tmp_path: Path, bad: str) -> None:
    from rlenv.errors import UserError
    from rlenv.world.mcp import load_cassette

    target = tmp_path / "add.jsonl"
    good = _cassette_entry("k1", {"content": [{"type": "text", "text": "3"}]})
    target.write_bytes(good + good.replace(b'"k1"', b'"k2"').replace(b'"3"', bad.encode()))
    with pytest.raises(UserError) as raised:
        load_cassette(target)
    assert "MCP cassette line 2" in str(raised.value), raised.value
