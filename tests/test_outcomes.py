"""Honest outcomes (issue 18 items 2, 3 and 5's signature check), through the real CLI.

Each silent failure of the issue's "Why" has a test here showing its flag and exit code: a
reward model that fails on every rollout, an endpoint that fails on every rollout (HTTP 500,
garbage, a dead port), fixture misses (never suspects), a policy crash (traceback, trajectory
kept, errors on the console and in the report), `--resume` that retries infra errors and
timeouts on a new `--base-url`, and `validate` refusing a callable with the wrong signature.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chat_server import ChatServer
from tests.conftest import SEARCH_TOOL, EnvBuilder, cli, read_jsonl, sha256

FAST = {"RLENV_BACKOFF_BASE": "0.01"}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def _flags(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {flag["name"]: flag for flag in summary["flags"]}


# -- env parts that fail on every rollout ---------------------------------------------------

PARTS = """
def t(args, ctx):
    if ctx.input_id == "a" or MODE == "tool":
        raise ValueError("tool says no")
    return "fine"

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c0", "function": {"name": "t", "arguments": "{}"}}]}
    return messages[0]["content"].split()[-1]

def check(answer, data, ctx):
    if MODE == "verifier":
        return data["no_such_field"] == answer
    return answer == data["answer"]

def reward(prompt, answer, ctx):
    if MODE == "reward" or (MODE == "reward-once" and ctx.input["id"] == "a"):
        return lookup(ctx.input)
    return 1.0

def lookup(data):
    return data["score"]
"""


def _parts_env(builder: EnvBuilder, mode: str) -> Path:
    builder.root.mkdir(parents=True, exist_ok=True)
    prompts = builder.root / "prompts.jsonl"
    prompts.write_text('{"id": "p", "prompt": "unrelated"}\n')
    return builder.write(
        f"MODE = {mode!r}\n" + PARTS,
        tools=[{"name": "t", "function": "MOD:t", "parameters": {"type": "object"}}],
        verifiers=[{"name": "check", "type": "python", "function": "MOD:check"}],
        reward_model={
            "function": f"{builder.module}:reward",
            "training_prompts": {"path": "prompts.jsonl", "sha256": sha256(prompts)},
        },
    )


def test_reward_model_failing_on_every_rollout_is_a_flag_and_exit_1(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The issue's RM (40 of 40 failed: no reward line, no flag, exit 0)."""
    out = tmp_path / "run"
    result = cli("run", str(_parts_env(env_builder, "reward")), "--out", str(out))
    assert result.returncode == 1, result.stderr
    assert "could not produce the scores it promises: reward_model_failed" in result.stderr
    flag = _flags(_summary(out))["reward_model_failed"]
    assert flag["fails_run"] is True and flag["value"] == 1.0
    first = flag["first_error"]
    assert (first["input_id"], first["rollout"], first["error"]) == ("a", 0, "KeyError: 'score'")
    module = env_builder.module
    assert first["traceback"] == [
        f"{module}.py:{PARTS.splitlines().index('        return lookup(ctx.input)') + 2}"
        " in reward: return lookup(ctx.input)",
        f'{module}.py:{len(PARTS.splitlines()) + 1} in lookup: return data["score"]',
    ]
    assert "reward model: 4 of 4 rollouts; first (input a, rollout 0): KeyError" in result.stdout
    assert f"  at {module}.py:" in result.stdout
    record = read_jsonl(out / "results.jsonl")[0]
    assert record["reward_error"] == "KeyError: 'score'"
    assert record["reward_traceback"] == first["traceback"]


def test_a_reward_error_below_the_threshold_is_listed_not_fatal(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = cli("run", str(_parts_env(env_builder, "reward-once")), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert "reward_model_failed" not in _flags(summary)
    rows = {row["component"]: row for row in summary["errors"]}
    assert (rows["reward model"]["failed"], rows["reward model"]["of"]) == (2, 4)


def test_verifier_failing_on_every_rollout_is_a_flag_and_exit_1(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = cli("run", str(_parts_env(env_builder, "verifier")), "--out", str(out))
    assert result.returncode == 1, result.stderr
    flag = _flags(_summary(out))["verifier_failed"]
    assert flag["fails_run"] is True
    assert flag["message"].startswith("verifier check failed on 4 of 4 rollouts")
    assert flag["first_error"]["error"] == "verifier error: KeyError: 'no_such_field'"
    assert flag["first_error"]["traceback"][-1].endswith(
        'in check: return data["no_such_field"] == answer'
    )


def test_tool_failing_on_every_call_is_a_flag_but_not_fatal(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A tool raising is answered to the model (its way to say no): flagged, exit 0."""
    out = tmp_path / "run"
    result = cli("run", str(_parts_env(env_builder, "tool")), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    flag = _flags(json.loads(result.stdout))["tool_failed"]
    assert flag["fails_run"] is False
    assert flag["message"].startswith(
        "tool t failed on 4 of 4 calls; first (input a, rollout 0): ValueError: tool says no"
    )
    call = read_jsonl(out / "results.jsonl")[0]["tool_calls"][0]
    assert call["error"] == "ValueError: tool says no" and call["ok"] is False
    assert call["traceback"][-1].endswith('in t: raise ValueError("tool says no")')


def test_a_tool_failing_on_some_calls_is_not_flagged(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Input a's tool call fails, b's does not: listed under errors, no flag, exit 0."""
    out = tmp_path / "run"
    result = cli("run", str(_parts_env(env_builder, "none")), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert "tool_failed" not in _flags(summary)
    assert not any(flag["fails_run"] for flag in summary["flags"])
    assert [(r["component"], r["failed"], r["of"]) for r in summary["errors"]] == [("tool t", 2, 4)]


# -- a policy crash: traceback, trajectory kept, on the console and in the report ------------

CRASH = """
def t(args, ctx):
    return {"a": 1}

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c0", "function": {"name": "t", "arguments": "{}"}}]}
    return pick(json.loads(messages[-1]["content"]))

def pick(data):
    return data["b"]
"""


def test_policy_crash_keeps_its_trajectory_and_traceback_everywhere(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The issue's `KeyError: 'b'`: no traceback, the tool call before it lost, on neither the
    console nor the report."""
    spec = env_builder.write(
        "import json\n" + CRASH,
        tools=[{"name": "t", "function": "MOD:t", "parameters": {"type": "object"}}],
    )
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out))
    assert result.returncode == 1, result.stderr  # the policy failed on every rollout
    assert "policy_failed" in result.stderr
    module = env_builder.module
    source = ("import json\n" + CRASH).splitlines()
    call, crash = 'return pick(json.loads(messages[-1]["content"]))', 'return data["b"]'
    line = {text.strip(): number for number, text in enumerate(source, start=1)}
    frames = [
        f"{module}.py:{line[call]} in policy: {call}",
        f"{module}.py:{line[crash]} in pick: {crash}",
    ]
    assert "errors   policy: 4 of 4 rollouts; first (input a, rollout 0): KeyError: 'b'" in (
        result.stdout
    )
    for frame in frames:
        assert f"  at {frame}" in result.stdout
    record = read_jsonl(out / "results.jsonl")[0]
    assert record["status"] == "policy_error" and record["error"] == "KeyError: 'b'"
    assert record["traceback"] == frames
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "tool"]
    assert [call["name"] for call in record["tool_calls"]] == ["t"]
    report = cli("report", str(out), "--json")
    assert report.returncode == 0, report.stderr
    errors = json.loads(report.stdout)["errors"]
    assert errors[0]["component"] == "policy" and errors[0]["first"]["traceback"] == frames
    page = (out / "report.html").read_text()
    assert 'id="error-table"' in page and "KeyError: &#39;b&#39;" in page
    assert "in pick: return data[&#34;b&#34;]" in page
    text = cli("report", str(out))
    assert "errors   policy: 4 of 4 rollouts" in text.stdout


# -- the endpoint: HTTP 500, garbage, a dead port ---------------------------------------------

ECHO_TOOLS = """
def search(args, ctx):
    return "result for " + args["query"]
"""
INPUTS = [
    {"id": "a", "prompt": "say a", "answer": "result for say a"},
    {"id": "b", "prompt": "say b", "answer": "result for say b"},
]


def _api_env(builder: EnvBuilder) -> Path:
    return builder.write(ECHO_TOOLS, inputs=INPUTS, tools=[SEARCH_TOOL])


def _run_api(
    spec: Path, out: Path, base_url: str, *extra: str
) -> tuple[int, str, str, dict[str, Any] | None]:
    result = cli(
        "run", str(spec), "--model", "openai:tiny", "--base-url", base_url, "--out", str(out),
        *extra, env=FAST, timeout=120,
    )  # fmt: skip
    summary = _summary(out) if (out / "summary.json").is_file() else None
    return result.returncode, result.stdout, result.stderr, summary


@pytest.mark.parametrize("fault", ["500", "garbage", "dead port"])
def test_endpoint_failing_on_every_rollout_exits_1(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path, fault: str
) -> None:
    """The issue's runs whose endpoint failed everywhere (exit 0 after 61 s, the reason only
    in results.jsonl). `--retries 0`: each rollout's request is tried once."""
    if fault == "dead port":
        server, base_url = None, f"http://127.0.0.1:{_closed_port()}"
    else:
        server = chat(default_fault=fault)
        base_url = server.base_url
    out = tmp_path / "run"
    code, stdout, stderr, summary = _run_api(_api_env(env_builder), out, base_url, "--retries", "0")
    assert code == 1, stderr
    assert "could not produce the scores it promises: infra_errors" in stderr
    assert summary is not None and summary["counts"] == {"infra_error": 4}
    flag = _flags(summary)["infra_errors"]
    assert flag["fails_run"] is True
    assert "after 1 attempts" in flag["first_error"]["error"]
    assert "errors   endpoint: 4 of 4 rollouts; first (input a, rollout 0): openai:" in stdout
    if server is not None:
        assert len(server.received) == 4, "--retries 0: one attempt per rollout"


def test_request_timeout_is_a_flag(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    server = chat(default_fault="hang", hang_s=10)
    code, _, stderr, summary = _run_api(
        _api_env(env_builder), tmp_path / "run", server.base_url,
        "--retries", "0", "--request-timeout", "0.2",
    )  # fmt: skip
    assert code == 1, stderr
    assert summary is not None
    assert "timeout after 1 attempts" in _flags(summary)["infra_errors"]["first_error"]["error"]


def test_api_options_are_refused_for_other_models(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write("def policy(m, t, c):\n    return 'a'\n")
    result = cli("run", str(spec), "--out", str(tmp_path / "r"), "--retries", "2")
    assert result.returncode == 2 and "--retries is for API models (openai:)" in result.stderr
    assert not (tmp_path / "r").exists()


def test_resume_retries_infra_errors_on_a_new_base_url(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = _api_env(env_builder)
    healthy = chat()
    clean = tmp_path / "clean"
    code, _, stderr, clean_summary = _run_api(spec, clean, healthy.base_url)
    assert code == 0, stderr
    out = tmp_path / "run"
    dead = f"http://127.0.0.1:{_closed_port()}"
    code, _, _, summary = _run_api(spec, out, dead, "--retries", "0")
    assert code == 1 and summary is not None and summary["counts"] == {"infra_error": 4}
    # a new base URL is infrastructure, not a new model: --resume accepts it
    code, _, stderr, summary = _run_api(spec, out, healthy.base_url, "--resume")
    assert code == 1, stderr  # nothing retried without --retry-errors
    assert summary is not None and summary["counts"] == {"infra_error": 4}
    # credentials in the URL are used, never written
    host = healthy.base_url.split("://", 1)[1]
    with_credentials = f"http://user:s3cret-pw@{host}"
    code, _, stderr, summary = _run_api(spec, out, with_credentials, "--resume", "--retry-errors")
    assert code == 0, stderr
    assert summary is not None and clean_summary is not None
    assert summary["counts"] == {"ok": 4}
    assert summary["digest"] == clean_summary["digest"], "retried rollouts = a clean run's"
    assert len(read_jsonl(out / "results.jsonl")) == 4
    assert [r["status"] for r in read_jsonl(out / "retried.jsonl")] == ["infra_error"] * 4
    meta = json.loads((out / "run.json").read_text())
    assert "s3cret" not in (out / "run.json").read_text()
    assert meta["model"]["base_url"] == f"{healthy.base_url}/v1"
    assert meta["base_url_history"] == [f"{dead}/v1", f"{healthy.base_url}/v1"]


def test_retry_errors_needs_resume(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write("def policy(m, t, c):\n    return 'a'\n")
    result = cli("run", str(spec), "--out", str(tmp_path / "r"), "--retry-errors")
    assert result.returncode == 2 and "add --resume" in result.stderr


SLOW = """
import pathlib, time
GATE = pathlib.Path({gate!r})

def policy(messages, tools, ctx):
    if GATE.exists() and messages[0]["content"] == "say b":
        time.sleep(30)
    return messages[0]["content"].split()[-1]
"""


def test_resume_retries_timeouts_when_asked(env_builder: EnvBuilder, tmp_path: Path) -> None:
    gate = tmp_path / "slow"
    gate.touch()
    spec = env_builder.write(SLOW.format(gate=str(gate)), limits={"timeout_s": 0.5})
    out = tmp_path / "run"
    first = cli("run", str(spec), "--out", str(out), "--json")
    assert first.returncode == 0, first.stderr  # timeouts are the model's outcome
    assert json.loads(first.stdout)["counts"] == {"ok": 2, "timeout": 2}
    gate.unlink()
    again = cli("run", str(spec), "--out", str(out), "--json", "--resume", "--retry-errors")
    assert json.loads(again.stdout)["counts"] == {"ok": 2, "timeout": 2}, "infra only"
    retried = cli("run", str(spec), "--out", str(out), "--json", "--resume", "--retry-timeouts")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["counts"] == {"ok": 4}


# -- fixture misses: the first one named, never suspects --------------------------------------

MISS = """
import httpx

def search(args, ctx):
    return httpx.post("http://api.test/search", json={"q": args["query"]}).json()

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c0", "function": {"name": "search",
                "arguments": json.dumps({"query": messages[-1]["content"]})}}]}
    return "wrong answer with many words that a reward model likes"

def reward(prompt, answer, ctx):
    return 10.0 if answer else 0.0

def good(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""


def test_fixture_misses_fail_the_run_name_the_request_and_are_never_suspects(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The issue's stale cassette: fixture_miss on every rollout, pass 0.000, exit 0 and a
    bogus high_suspect_rate flag."""
    env_builder.root.mkdir(parents=True, exist_ok=True)
    interaction = {
        "request": {"method": "POST", "uri": "http://api.test/search", "headers": {},
                    "body": '{"q": "recorded"}'},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {},
                     "body": {"string": '{"hits": []}'}},
    }  # fmt: skip
    (env_builder.root / "search.yaml").write_text(
        yaml.safe_dump({"version": 1, "interactions": [interaction]})
    )
    prompts = env_builder.root / "prompts.jsonl"
    prompts.write_text('{"id": "p", "prompt": "unrelated"}\n')
    inputs = [{"id": f"i{n}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(4)]
    spec = env_builder.write(
        "import json\n" + MISS,
        inputs=inputs,
        tools=[{**SEARCH_TOOL, "function": "MOD:search", "cassette": {"path": "search.yaml"}}],
        reward_model={
            "function": f"{env_builder.module}:reward",
            "training_prompts": {"path": "prompts.jsonl", "sha256": sha256(prompts)},
        },
    )
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out))
    assert result.returncode == 1, result.stderr
    summary = _summary(out)
    assert summary["counts"] == {"fixture_miss": 8}
    flags = _flags(summary)
    assert "high_suspect_rate" not in flags
    assert summary["diagnostics"]["disagreements"]["high_reward_failed"] == []
    miss = flags["fixture_misses"]
    assert miss["fails_run"] is True
    error = miss["first_error"]["error"]
    assert error.startswith(
        "unrecorded request for tool 'search': POST http://api.test/search body sha256:"
    ), error
    assert "fixtures: 8 of 8 rollouts; first (input i0, rollout 0): unrecorded request" in (
        result.stdout
    )
    # a policy whose requests were recorded... here, one that calls no tool, has no miss
    ok = cli(
        "run", str(spec), "--out", str(tmp_path / "good"), "--json",
        "--model", f"python:{env_builder.module}:good",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["errors"] == []


# -- validate: each python callable's signature ----------------------------------------------

SIGNATURES = """
def tool_ok(args, ctx):
    return "x"

def tool_bad(args):
    return "x"

def policy_ok(messages, tools, ctx):
    return "a"

def policy_bad(messages):
    return "a"

def check_ok(answer, data, ctx, strict=False):
    return True

def check_bad(answer, data, ctx):
    return True

def reward_ok(prompt, answer, ctx):
    return 1.0

def reward_bad(prompt, answer):
    return 1.0
"""

WRONG = {
    "tools[0].function": ("tool", "def tool(arguments: dict, ctx)"),
    "verifiers[0].function": ("check", "def check(answer: str | None, input: dict, ctx, **opt"),
    "reward_model.function": ("reward", "def score(prompt: list[message], answer: str | None"),
    "model": ("policy", "def policy(messages: list[message], tools: list[tool schema], ctx)"),
}


@pytest.mark.parametrize("field", sorted(WRONG))
def test_validate_refuses_a_callable_with_the_wrong_signature(
    env_builder: EnvBuilder, tmp_path: Path, field: str
) -> None:
    """The issue's reward model: validate ok, then 40 of 40 rollouts failed silently."""
    env_builder.root.mkdir(parents=True, exist_ok=True)
    prompts = env_builder.root / "prompts.jsonl"
    prompts.write_text('{"id": "p", "prompt": "unrelated"}\n')
    part, expected = WRONG[field]
    choose = {name: "bad" if name == part else "ok" for name in ("tool", "check", "reward")}
    spec = env_builder.write(
        SIGNATURES,
        policy="policy_bad" if part == "policy" else "policy_ok",
        tools=[{"name": "t", "function": f"MOD:tool_{choose['tool']}",
                "parameters": {"type": "object"}}],
        verifiers=[{"type": "python", "function": f"MOD:check_{choose['check']}",
                    "options": {"strict": True}}],
        reward_model={
            "function": f"{env_builder.module}:reward_{choose['reward']}",
            "training_prompts": {"path": "prompts.jsonl", "sha256": sha256(prompts)},
        },
    )  # fmt: skip
    if field == "verifiers[0].function":  # check_ok takes the option; check_bad does not
        pass
    result = cli("validate", str(spec))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert f": {field}: {env_builder.module}:" in lines[0], lines[0]
    assert f"expected {expected}" in lines[0], lines[0]
    run = cli("run", str(spec), "--out", str(tmp_path / "run"))
    assert run.returncode == 2 and field in run.stderr
    assert not (tmp_path / "run").exists(), "refused before any rollout"


def test_validate_accepts_the_documented_signatures(env_builder: EnvBuilder) -> None:
    env_builder.root.mkdir(parents=True, exist_ok=True)
    prompts = env_builder.root / "prompts.jsonl"
    prompts.write_text('{"id": "p", "prompt": "unrelated"}\n')
    spec = env_builder.write(
        SIGNATURES,
        policy="policy_ok",
        tools=[{"name": "t", "function": "MOD:tool_ok", "parameters": {"type": "object"}}],
        verifiers=[{"type": "python", "function": "MOD:check_ok", "options": {"strict": True}}],
        reward_model={
            "function": f"{env_builder.module}:reward_ok",
            "training_prompts": {"path": "prompts.jsonl", "sha256": sha256(prompts)},
        },
    )
    result = cli("validate", str(spec))
    assert result.returncode == 0, result.stderr
