"""Tool replay patches only the HTTP client libraries loaded when it begins (issue 30: vcrpy
imported every client it can patch, ~1 s of a worker's start), and still catches every other.

The attack: a tool imports a client library only inside its function, after replay began, and
calls a live server on loopback that the cassette never recorded. The call must be a counted
miss (FixtureMiss), the server must never see a connection, and a recorded request through
that library must still be a hit. Each case runs in a fresh interpreter, so the library is
really first imported after the cassette opened.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EnvBuilder, cli, lookup_cassette, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
API = "http://api.example.test"

LATE = """
import json, socket, sys
from pathlib import Path

library = sys.argv[2]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
server.setblocking(False)
live = f"http://127.0.0.1:{server.getsockname()[1]}/v1/live"

from rlenv.errors import FixtureMiss
from rlenv.world.replay import ToolIndex, replay_cassette
from rlenv.world.scrub import Scrubber

cassette = Path(sys.argv[1])
indexes = {"lookup": ToolIndex("lookup", cassette, Scrubber()).load()}
if library == "warm":  # the index cached: building it loads requests (detect-secrets's scan)
    sys.exit(0)
top = library.split(".")[0]
assert top not in sys.modules or top == "http", f"{top} loaded before replay began"


def get(url):
    if library == "urllib3":
        import urllib3

        return urllib3.PoolManager().request("GET", url, retries=False).data
    if library == "requests":
        import requests

        return requests.get(url, timeout=5).content
    if library == "http.client":
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=5)
        connection.request("GET", parts.path)
        return connection.getresponse().read()
    if library == "aiohttp":
        import asyncio
        import aiohttp

        async def fetch():
            async with aiohttp.ClientSession() as session:
                async with session.get(url) as response:
                    return await response.read()

        return asyncio.run(fetch())
    if library == "httpx2":
        import httpx2

        return httpx2.get(url, timeout=5).content
    raise AssertionError(library)


def miss_of(error):
    while error is not None:
        if isinstance(error, FixtureMiss):
            return str(error)
        error = error.__cause__ or error.__context__
    return None


outcome = {}
with replay_cassette(indexes, cassette.parent / "none.yaml") as replaying:
    type(replaying).current = "lookup"
    outcome["hit"] = json.loads(get(API + "/v1/lookup"))
    try:
        outcome["live"] = get(live).decode()
    except BaseException as error:
        outcome["miss"] = miss_of(error) or f"not a miss: {type(error).__name__}: {error}"
    outcome["events"] = [event.outcome for event in type(replaying).events]
try:
    server.accept()
    outcome["connected"] = True
except BlockingIOError:
    outcome["connected"] = False
print("OUTCOME " + json.dumps(outcome))
""".replace("API + ", repr(API) + " + ")


def _cassette(path: Path) -> Path:
    return lookup_cassette(path, API)


def _late(cassette: Path, library: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LATE, str(cassette), library],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cassette.parent,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cassette.parent)},
    )


@pytest.fixture(scope="module")
def warm_cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cassette whose index is cached in its directory's $HOME, as a worker finds it."""
    cassette = _cassette(tmp_path_factory.mktemp("late") / "lookup.yaml")
    result = _late(cassette, "warm")
    assert result.returncode == 0, result.stderr[-3000:]
    return cassette


@pytest.mark.parametrize("library", ["urllib3", "requests", "http.client", "aiohttp", "httpx2"])
def test_a_library_first_imported_during_replay_is_replayed_and_its_misses_caught(
    library: str, warm_cassette: Path
) -> None:
    pytest.importorskip(library)
    result = _late(warm_cassette, library)
    lines = [line for line in result.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert lines, result.stderr[-3000:]
    outcome = json.loads(lines[0][len("OUTCOME ") :])
    assert outcome["connected"] is False, f"{library} reached the live server"
    assert "live" not in outcome, f"{library} got a live answer: {outcome['live']!r}"
    assert outcome["miss"].startswith("unrecorded request for tool 'lookup': GET http://127.0.0.1")
    assert outcome["hit"] == {"kind": "fruit"}
    assert outcome["events"] == ["hit", "miss"]


WORKER = """
import json, sys, tempfile
from rlenv.worker import protocol
from rlenv.worker.config import WorkerConfig

protocol.init_worker(WorkerConfig(spec_path=sys.argv[1], work_root=tempfile.mkdtemp()))
print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)  # stdout: the protocol's
"""

HTTPX_TOOL = """
import httpx

URL = "http://api.example.test/v1/lookup"


def lookup(args, ctx):
    return httpx.get(URL).json()


def policy(messages, tools, ctx):
    return "a"
"""


def test_a_worker_with_an_httpx_tool_loads_no_other_client_library(
    env_builder: EnvBuilder,
) -> None:
    """vcrpy's import of every client it can patch was most of a worker's start with a tool."""
    env_builder.root.mkdir(parents=True, exist_ok=True)
    cassette = _cassette(env_builder.root / "lookup.yaml")
    spec = env_builder.write(
        HTTPX_TOOL,
        tools=[{"name": "lookup", "function": "MOD:lookup", "cassette": {"path": cassette.name}}],
        rollouts=1,
    )
    result = subprocess.run(
        [sys.executable, "-c", WORKER, str(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=spec.parent,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("MODULES ")]
    assert lines, result.stderr[-3000:]
    tops = {name.split(".")[0] for name in json.loads(lines[0][len("MODULES ") :])}
    assert {"vcr", "httpx"} <= tops, "the worker did not enter replay"
    for other in ("aiohttp", "httpx2", "tornado", "httplib2", "botocore"):
        assert other not in tops, f"a worker with an httpx tool imported {other}"
    # its cassette, never closed, is closed as the interpreter exits: quietly
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, (
        result.stderr[-3000:]
    )


LATE_TOOL = """
import json


def lookup(args, ctx):
    import aiohttp  # first imported here, in the worker, after replay began
    import asyncio

    async def fetch():
        async with aiohttp.ClientSession() as session:
            url = "http://api.example.test/v1/" + args["term"]
            async with session.get(url) as response:
                return await response.read()

    return json.loads(asyncio.run(fetch()))


def policy(messages, tools, ctx):
    if messages[-1]["role"] == "tool":
        return messages[-1]["content"]
    term = messages[-1]["content"]
    call = {"name": "lookup", "arguments": json.dumps({"term": term})}
    return {"tool_calls": [{"id": "c0", "function": call}]}
"""


def test_a_run_whose_tool_imports_its_client_late_hits_and_misses(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Through `rlenv run`: the worker's replay began before the tool imported aiohttp."""
    pytest.importorskip("aiohttp")
    env_builder.root.mkdir(parents=True, exist_ok=True)
    cassette = _cassette(env_builder.root / "lookup.yaml")
    params = {"type": "object", "properties": {"term": {"type": "string"}}, "required": ["term"]}
    spec = env_builder.write(
        LATE_TOOL,
        inputs=[
            {"id": "recorded", "prompt": "lookup", "answer": "fruit"},
            {"id": "unrecorded", "prompt": "durian", "answer": "fruit"},
        ],
        tools=[
            {
                "name": "lookup",
                "function": "MOD:lookup",
                "parameters": params,
                "cassette": {"path": cassette.name},
            }
        ],
        verifiers=[{"type": "contains", "expected_field": "answer"}],
        rollouts=1,
    )
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    records = {record["input_id"]: record for record in read_jsonl(out / "results.jsonl")}
    assert records["recorded"]["status"] == "ok" and records["recorded"]["passed"] is True
    assert records["recorded"]["tool_calls"][0]["fixture"] == "hit"
    missed = records["unrecorded"]
    assert missed["status"] == "fixture_miss", missed
    assert (
        "unrecorded request for tool 'lookup': GET http://api.example.test/v1/durian"
        in (missed["error"])
    )
