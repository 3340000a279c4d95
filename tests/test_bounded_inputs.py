"""Issue 26 item 1: what the model, a tool or in-world code sends is data, bounded.

Each attack is one rollout between two ok ones through the real `rlenv run` (one run holds the
catalog of attacks; the two that forge a record for input index 1 have a run of three of their
own): the run ends (exit 0, summary.json written), each attacked rollout's status says what was
wrong, the others pass, and every results line is strict JSON. Before this was built, the first
attack (arguments nested 200,000 deep) ended the run with a RecursionError traceback, exit 1,
no summary.json; `bench/attacks` lists what each attack did then.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EnvBuilder, cli

DEEP = 200_000

IN_WORLD = """
import gc, json, os, pickle, multiprocessing.connection

DEEP = {deep}

def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value

def _call(arguments):
    return {{"tool_calls": [{{"function": {{"name": "t", "arguments": arguments}}}}]}}

def _forge(message, raw=False):
    for pipe in gc.get_objects():
        if isinstance(pipe, multiprocessing.connection.Connection):
            try:
                pipe.send_bytes(message) if raw else pipe.send(message)
            except Exception:
                pass

def policy(messages, tools, ctx):
    last = messages[-1]["content"]
    if messages[-1]["role"] == "tool":
        return "done"
    if not last.startswith("attack "):
        return last.split()[-1]
    kind = last.split()[1]
    if kind == "deep_arguments":
        return _call("[" * DEEP + "]" * DEEP)
    if kind == "deep_argument_object":
        return _call({{"x": _nested(DEEP)}})
    if kind == "long_integer_argument":
        return _call('{{"x": ' + "9" * 5000 + "}}")
    if kind == "big_integer_argument":
        return _call('{{"x": 1' + "0" * 30 + "}}")
    if kind == "nan_argument":
        return _call('{{"x": NaN}}')
    if kind == "surrogate_argument":
        return _call('{{"x": "\\\\ud800"}}')
    if kind == "surrogate_answer":
        return "a\\udc80"
    if kind == "control_answer":
        return "\\x00\\x1b[2J\\r\\u2028\\x7f"
    if kind == "huge_answer":
        return "x" * (9 << 20)
    if kind == "many_tool_calls":
        return {{"tool_calls": [{{"function": {{"name": "t", "arguments": "{{}}"}}}}] * 5000}}
    if kind.startswith("tool_"):
        return _call(json.dumps({{"mode": kind}}))
    if kind == "print_bytes":
        os.write(1, b"\\xff\\xfe\\xed\\xa0\\x80\\x00\\x1b[31m")
        os.write(2, "\\udc80".encode("utf-8", "surrogateescape"))
        return "print_bytes"
    if kind == "forge_deep_record":  # pickled by hand: pickle.dumps cannot nest so deep
        record = {{"input_index": 1, "rollout": 0, "status": "ok", "deep": 123456789}}
        data = pickle.dumps(("ok", record), protocol=2)
        deep = b"]" * DEEP + b"a" * (DEEP - 1)
        _forge(data.replace(pickle.dumps(123456789, protocol=2)[2:-1], deep), raw=True)
        return "x"
    if kind == "raise_surrogate":
        raise ValueError("bad \\udc80 text")
    if kind == "forge_raise":
        _forge(("raise", RecursionError("forged")))
        return "x"
    raise AssertionError(kind)

def tool(args, ctx):
    mode = args.get("mode")
    if mode == "tool_deep":
        return {{"x": _nested(DEEP)}}
    if mode == "tool_surrogate":
        return "b\\udc80"
    if mode == "tool_huge":
        return "y" * (9 << 20)
    if mode == "tool_big_integer":
        return {{"x": 10 ** 30}}
    if mode == "tool_nan":
        return {{"x": float("nan")}}
    return "ok"
"""

# attack -> (status of the attacked rollout, a fragment of its error); status "ok": the
# rollout goes on (the value is within bounds, or the model is told its call was refused)
ATTACKS: dict[str, tuple[str, str]] = {
    "deep_arguments": ("policy_error", "nested more than"),
    "deep_argument_object": ("policy_error", "nested more than"),
    "long_integer_argument": ("ok", ""),
    "big_integer_argument": ("ok", ""),
    "nan_argument": ("ok", ""),
    "surrogate_argument": ("ok", ""),  # escaped: the model is told its arguments are refused
    "surrogate_answer": ("policy_error", "surrogate"),
    "control_answer": ("ok", ""),
    "huge_answer": ("policy_error", "larger than"),
    "many_tool_calls": ("policy_error", "tool calls"),
    "tool_deep": ("tool_error", "nested more than"),
    "tool_surrogate": ("tool_error", "surrogate"),
    "tool_huge": ("tool_error", "larger than"),
    "tool_big_integer": ("tool_error", "integer"),
    "tool_nan": ("ok", ""),
    "print_bytes": ("ok", ""),
    # env code runs in a child holding no pipe to the orchestrator (issue 26): a forged
    # message goes nowhere, and the rollout is graded on its answer
    "forge_deep_record": ("ok", ""),
    "forge_raise": ("ok", ""),
    "raise_surrogate": ("policy_error", ""),
}


def _strict(text: str) -> list[dict[str, Any]]:
    def refuse(name: str) -> Any:
        raise AssertionError(f"results line holds {name}")

    return [json.loads(line, parse_constant=refuse) for line in text.split("\n") if line]


# attacks that forge a record for input index 1 (the attacked one of ok0, bad, ok1): a run each
FORGED = ("forge_deep_record", "forge_raise")


def _inputs(kinds: list[str]) -> list[dict[str, Any]]:
    """ok0, then each attack followed by an ok input: one attack is `bad` (input index 1),
    several are `bad_KIND`, so one run holds a catalog of attacks, each between two ok ones."""
    rows = [{"id": "ok0", "prompt": "say ok0", "answer": "ok0"}]
    for number, kind in enumerate(kinds, start=1):
        name = "bad" if len(kinds) == 1 else f"bad_{kind}"
        rows.append({"id": name, "prompt": f"attack {kind}", "answer": "never"})
        rows.append({"id": f"ok{number}", "prompt": f"say ok{number}", "answer": f"ok{number}"})
    return rows


def _attacked(records: dict[str, dict[str, Any]], kinds: list[str]) -> Iterator[tuple[str, Any]]:
    for kind in kinds:
        yield kind, records["bad" if len(kinds) == 1 else f"bad_{kind}"]


def _run_survives(
    spec: Path, out: Path, inputs: list[dict[str, Any]], *extra: str
) -> dict[str, dict[str, Any]]:
    result = cli("run", str(spec), "--out", str(out), "--json", "--concurrency", "1", *extra)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "summary.json").is_file(), "no summary.json"
    records = {r["input_id"]: r for r in _strict((out / "results.jsonl").read_text())}
    assert sorted(records) == sorted(row["id"] for row in inputs), records.keys()
    survivors = [name for name in records if name.startswith("ok")]
    assert all(records[name]["passed"] for name in survivors), survivors
    check = cli("check", str(out))
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    return records


WORLD_RUNS = [[kind for kind in sorted(ATTACKS) if kind not in FORGED], *([k] for k in FORGED)]


@pytest.mark.parametrize("kinds", WORLD_RUNS, ids=["catalog", *FORGED])
def test_an_attack_from_the_world_is_one_rollout_status(
    env_builder: EnvBuilder, tmp_path: Path, kinds: list[str]
) -> None:
    inputs = _inputs(kinds)
    spec = env_builder.write(
        IN_WORLD.format(deep=DEEP),
        inputs=inputs,
        rollouts=1,
        tools=[{"name": "t", "function": "MOD:tool", "parameters": {"type": "object"}}],
    )
    records = _run_survives(spec, tmp_path / "run", inputs)
    for kind, bad in _attacked(records, kinds):
        status, fragment = ATTACKS[kind]
        assert bad["status"] == status, (kind, bad["status"], bad["error"])
        assert fragment in (bad["error"] or ""), (kind, bad["error"])
        assert len(json.dumps(bad)) < 2 << 20, f"{kind}: the refused value reached the record"


# -- an API model over real HTTP ---------------------------------------------------------


def _reply(content: str | None = None, calls: str | None = None, extra: str = "") -> bytes:
    message = '{"role":"assistant","content":' + (content or "null")
    if calls is not None:
        message += ',"tool_calls":[{"id":"c1","type":"function","function":{"name":"t",'
        message += '"arguments":' + calls + "}}]"
    return ('{"choices":[{"message":' + message + "}" + extra + "}]}").encode()


HTTP_ATTACKS: dict[str, tuple[bytes, str, str]] = {
    # first user message -> (raw body, status, error fragment)
    "deep_arguments": (
        _reply(calls=json.dumps("[" * DEEP + "]" * DEEP)),
        "model_error",
        "nested more than",
    ),
    "deep_body": (b'{"choices":' + b"[" * DEEP + b"]" * DEEP + b"}", "infra_error", "nested"),
    "surrogate_content": (_reply(content='"a\\ud800"'), "model_error", "surrogate"),
    "infinite_usage": (
        _reply(content='"x"').replace(b"]}", b'],"usage":{"prompt_tokens":1e999}}'),
        "model_error",
        "usage",
    ),
    "huge_usage": (
        _reply(content='"x"').replace(b"]}", b'],"usage":{"prompt_tokens":1' + b"0" * 40 + b"}}"),
        "model_error",
        "usage",
    ),
    "deep_logprobs": (
        _reply(
            content='"x"',
            extra=',"logprobs":{"content":[{"token":' + "[" * 99 + "]" * 99 + "}]}",
        ),
        "model_error",
        "nested more than",
    ),
    "control_content": (_reply(content='"\\u0000\\u001b[2J"'), "ok", ""),
}


@contextlib.contextmanager
def _raw_server(bodies: dict[str, bytes]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            users = [m for m in request["messages"] if m["role"] == "user"]
            prompt = users[0]["content"]
            last = request["messages"][-1]
            if last["role"] == "tool":
                body = _reply(content='"done"')
            elif prompt in bodies:
                body = bodies[prompt]
            else:
                body = _reply(content=json.dumps(prompt.split()[-1]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_each_attack_from_an_api_model_is_one_rollout_status(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Every HTTP attack in one run (the server answers by the first user message), each
    attacked rollout between two that pass."""
    kinds = sorted(HTTP_ATTACKS)
    inputs = _inputs(kinds)
    spec = env_builder.write(
        "def tool(args, ctx):\n    return 'ok'\n",
        inputs=inputs,
        rollouts=1,
        model="openai:m",
        tools=[{"name": "t", "function": "MOD:tool", "parameters": {"type": "object"}}],
    )
    bodies = {f"attack {kind}": HTTP_ATTACKS[kind][0] for kind in kinds}
    with _raw_server(bodies) as base_url:
        records = _run_survives(
            spec, tmp_path / "run", inputs, "--base-url", base_url, "--retries", "0"
        )
    for kind, bad in _attacked(records, kinds):
        _, status, fragment = HTTP_ATTACKS[kind]
        assert bad["status"] == status, (kind, bad["status"], bad["error"])
        assert fragment in (bad["error"] or ""), (kind, bad["error"])
