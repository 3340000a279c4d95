"""`rlenv record` against real loopback services, then replay with the service stopped."""

from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, EnvBuilder, cli, read_jsonl, require_tool

SECRET = "sk-live-9f8e7d6c5b4a39281706"


def _copy_search_env(tmp_path: Path) -> Path:
    """The bundled search env, pointed at a cassette in tmp_path (the committed one stays)."""
    env_dir = tmp_path / "envs"
    shutil.copytree(ROOT / "envs" / "search_env", env_dir / "search_env")
    document = yaml.safe_load((ROOT / "envs/search.yaml").read_text())
    document["inputs"]["path"] = str(ROOT / "fixtures/search/questions.jsonl")
    document["tools"][0]["cassette"] = {"path": "cassettes/search.yaml"}
    command = document["services"][0]["command"]
    command[command.index("--corpus") + 1] = str(ROOT / "fixtures/search/corpus.jsonl")
    document.pop("reward_model")  # recording is about the tool; keep the copy light
    document.pop("train_inputs")  # the held-out split is enough here (and records faster)
    spec = env_dir / "search.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


def test_record_starts_the_service_and_replay_needs_no_host_variable(tmp_path: Path) -> None:
    """`rlenv record` starts the spec's service itself, records its logical URL and stops it;
    a host variable pointing at a dead port changes nothing at replay (issue 18)."""
    require_tool("faketime")
    spec = _copy_search_env(tmp_path)
    env = {"SEARCH_API_KEY": SECRET, "RLENV_SEARCH_URL": "http://127.0.0.1:9"}
    recorded = cli("record", str(spec), "--limit", "6", "--rollouts", "1", env=env)
    assert recorded.returncode == 0, recorded.stderr
    assert "search: 6 interactions (6 new)" in recorded.stdout
    assert "recorded as http://search.rlenv.internal" in recorded.stdout
    again = cli("record", str(spec), "--limit", "6", "--rollouts", "1", env=env)
    assert "search: 6 interactions (0 new)" in again.stdout, "only new interactions are added"
    cassette = (spec.parent / "cassettes" / "search.yaml").read_text()
    assert SECRET not in cassette and "REDACTED" in cassette
    assert "uri: http://search.rlenv.internal/search" in cassette and "127.0.0.1" not in cassette
    replayed = cli(
        "run",
        str(spec),
        "--limit",
        "6",
        "--out",
        str(tmp_path / "replayed"),
        "--json",
        env={"RLENV_SEARCH_URL": "http://127.0.0.1:9"},
    )
    assert replayed.returncode == 0, replayed.stderr
    summary = json.loads(replayed.stdout)
    assert summary["fixtures"] == {"hit": 12}
    verify = cli("verify", str(spec), "--limit", "3")
    assert verify.returncode == 0 and verify.stdout.startswith("identical")


class _Echo(BaseHTTPRequestHandler):
    status = 200

    def _reply(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        status = 500 if self.path.startswith("/fail") else 200
        payload = json.dumps({"path": self.path, "bytes": len(body), "ok": status == 200}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", f"session={SECRET}; HttpOnly")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _reply

    def log_message(self, *args: object) -> None:
        return None


SECRET_TOOLS = """
import httpx, os
BASE = os.environ["RLENV_TEST_ECHO_URL"]
S = os.environ.get("THE_SECRET", "absent-in-replay")  # in-world code never sees a secret

def call(args, ctx):
    form = args["form"]
    host = BASE.split("://", 1)[1]
    if form == "bearer":
        r = httpx.get(BASE + "/a", headers={"Authorization": "Bearer " + S})
    elif form == "api_key_header":
        r = httpx.get(BASE + "/b", headers={"X-Api-Key": S, "X-Custom-Token": S})
    elif form == "cookie":
        r = httpx.get(BASE + "/c", headers={"Cookie": "sid=" + S})
    elif form == "query":
        r = httpx.get(BASE + "/d", params={"q": "x", "api_key": S, "access_token": S})
    elif form == "json_body":
        r = httpx.post(BASE + "/e", json={"q": "x", "auth": {"password": S, "client_secret": S}})
    elif form == "form_body":
        r = httpx.post(BASE + "/f", data={"q": "x", "token": S})
    elif form == "url_credentials":
        r = httpx.get("http://user:" + S + "@" + host + "/g")
    elif form == "error":
        r = httpx.get(BASE + "/fail")
    return r.json()

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "call",
                "arguments": '{"form": "%s"}' % messages[-1]["content"]}}]}
    return "done"
"""

FORMS = ["bearer", "api_key_header", "cookie", "query", "json_body", "form_body", "url_credentials"]


@pytest.mark.parametrize("record_errors", [True, False], ids=["default", "record_errors_false"])
def test_record_scrubs_every_secret_form_and_keeps_errors(
    env_builder: EnvBuilder, tmp_path: Path, record_errors: bool
) -> None:
    """Error responses are recorded by default (scrubbed like the rest), and `record` says so;
    `scrub: {record_errors: false}` drops them (that request then replays as a miss)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    inputs = [{"id": form, "prompt": form, "answer": "done"} for form in [*FORMS, "error"]]
    spec = env_builder.write(
        SECRET_TOOLS,
        inputs=inputs,
        tools=[{"name": "call", "function": "MOD:call", "cassette": {"path": "call.yaml"}}],
        verifiers=[{"type": "regex", "pattern": "done"}],
        rollouts=1,
        **({} if record_errors else {"scrub": {"record_errors": False}}),
    )
    env = {"RLENV_TEST_ECHO_URL": url, "THE_SECRET": SECRET}
    try:
        result = cli("record", str(spec), env=env)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    cassette_text = (spec.parent / "call.yaml").read_text()
    assert SECRET not in cassette_text
    assert "9f8e7d6c" not in cassette_text
    interactions = yaml.safe_load(cassette_text)["interactions"]
    codes = sorted(i["response"]["status"]["code"] for i in interactions)
    if record_errors:
        assert codes == [200] * len(FORMS) + [500], "the 500 response is recorded, scrubbed"
        assert "error responses (HTTP >= 400, empty bodies) are recorded, scrubbed: call 1" in (
            result.stdout
        )
    else:
        assert codes == [200] * len(FORMS), "the 500 response is not recorded"
        assert "error responses" not in result.stdout
    # replay with the echo server gone: every recorded form hits, the error one misses
    run = cli("run", str(spec), "--out", str(tmp_path / "replay"), "--json", env=env)
    assert run.returncode == 0, run.stderr
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "replay" / "results.jsonl")}
    for form in FORMS:
        assert records[form]["tool_calls"][0]["fixture"] == "hit", (form, records[form]["error"])
    if record_errors:  # the model's request is answered as it was when recorded
        assert records["error"]["status"] == "ok"
        assert records["error"]["tool_calls"][0]["fixture"] == "hit"
    else:
        assert records["error"]["status"] == "fixture_miss"
    assert os.environ.get("THE_SECRET") is None


def test_record_refuses_when_the_service_is_down(tmp_path: Path) -> None:
    """The issue's `record` with the service down: `"counts": {"ok": 4}`, "nothing written",
    exit 0. Now: exit 1, the first connection error named, nothing written."""
    spec = _copy_search_env(tmp_path)
    # the env reaches the service through RLENV_SEARCH_URL, not a `services:` block record
    # would start itself: the service is simply not there
    document = yaml.safe_load(spec.read_text())
    document.pop("services", None)
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    port = _free_port()
    result = cli(
        "record", str(spec), "--limit", "2", "--rollouts", "1",
        env={"RLENV_SEARCH_URL": f"http://127.0.0.1:{port}"},
    )  # fmt: skip
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "2 of 2 tool requests could not connect (is the service running?)" in result.stderr
    assert "first: tool 'search' (input " in result.stderr and "ConnectError" in result.stderr
    assert "nothing written" in result.stderr
    assert not (spec.parent / "cassettes").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CRASHING_POLICY = """
import httpx, os

def call(args, ctx):
    return httpx.get(os.environ["ECHO_URL"] + "/a").json()

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "call", "arguments": "{}"}}]}
    return answer(messages[0]["content"])

def answer(prompt):
    return {"x": "done"}[prompt]
"""


def test_record_refuses_a_policy_crash(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """A policy crash during recording was only found at run time."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    spec = env_builder.write(
        CRASHING_POLICY,
        inputs=[{"id": "x", "prompt": "x"}, {"id": "y", "prompt": "y"}],
        tools=[{"name": "call", "function": "MOD:call", "cassette": {"path": "call.yaml"}}],
        verifiers=[{"type": "regex", "pattern": "done"}],
        rollouts=1,
    )
    try:
        result = cli(
            "record", str(spec), env={"ECHO_URL": f"http://127.0.0.1:{server.server_address[1]}"}
        )
    finally:
        server.shutdown()
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "record: 1 of 2 rollouts failed; first: policy_error (input y, rollout 0):" in (
        result.stderr
    )
    assert "KeyError: 'y'" in result.stderr
    assert f"at {env_builder.module}.py:13 in answer: return" in result.stderr
    assert not (spec.parent / "call.yaml").exists(), "nothing written"


LEAKS = {
    "bearer": ("GET", "http://api.test/a", {"Authorization": ["Bearer abcdefgh12345678"]}, None),
    "api_key_header": ("GET", "http://api.test/b", {"X-Api-Key": ["k-1234567890"]}, None),
    "cookie": ("GET", "http://api.test/c", {"Cookie": ["sid=abcdef123456"]}, None),
    "query": ("GET", "http://api.test/d?q=x&api_key=abcdef123456", {}, None),
    "json_body": ("POST", "http://api.test/e", {}, '{"q": "x", "password": "hunter2hunter2"}'),
    "form_body": ("POST", "http://api.test/f", {}, "q=x&token=abcdef123456"),
    "url_credentials": ("GET", "http://user:pw123456@api.test/g", {}, None),
    "token_in_response": ("GET", "http://api.test/h", {}, None),
}


def test_validate_refuses_cassettes_with_secrets(env_builder: EnvBuilder) -> None:
    refused = 0
    for form, (method, uri, headers, body) in LEAKS.items():
        response_body = (
            '{"ok": true}'
            if form != "token_in_response"
            else '{"note": "sk-abcdefghijklmnopqrstuv"}'
        )
        document = {
            "version": 1,
            "interactions": [
                {
                    "request": {"method": method, "uri": uri, "body": body, "headers": headers},
                    "response": {
                        "status": {"code": 200, "message": "OK"},
                        "headers": {},
                        "body": {"string": response_body},
                    },
                }
            ],
        }
        env_builder.root.mkdir(parents=True, exist_ok=True)
        (env_builder.root / "leaky.yaml").write_text(yaml.safe_dump(document))
        spec = env_builder.write(
            "def t(args, ctx):\n    return 1\ndef policy(m, t, c):\n    return 'x'\n",
            tools=[{"name": "t", "function": "MOD:t", "cassette": {"path": "leaky.yaml"}}],
        )
        result = cli("validate", str(spec))
        assert result.returncode == 2, (form, result.stdout)
        assert "leaky.yaml holds a secret-looking value: interaction 0" in result.stderr, (
            form,
            result.stderr,
        )
        refused += 1
    print(f"secret forms refused by validate: {refused}/{len(LEAKS)}")
