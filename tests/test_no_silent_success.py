"""No silent success: env code that exits, is interrupted or kills its worker gives the rollout
an error status, and the run still completes with its summary (through the real CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, EnvBuilder, read_jsonl, sha256

CODE = """
import os, sys

def misbehave(how):
    if how == "exit0":
        sys.exit(0)
    if how == "exit3":
        sys.exit(3)
    if how == "kbi":
        raise KeyboardInterrupt
    if how == "base":
        raise GeneratorExit("not an Exception")
    if how == "osexit":
        os._exit(0)
    if how == "raise":
        raise ValueError("an ordinary error")

def split(mode):
    part, _, how = mode.partition("-")
    return part, how

def policy(messages, tools, ctx):
    mode = messages[0]["content"].split()[-1]
    part, how = split(mode)
    if part == "policy":
        misbehave(how)
    if messages[-1]["role"] != "tool":
        call = {"id": "c0", "function": {"name": "t", "arguments": "{}"}}
        return {"content": None, "tool_calls": [call]}
    return mode

def tool(arguments, ctx):
    part, how = split(ctx.input_id)
    if part == "tool":
        misbehave(how)
    return "fine"

def verifier(answer, data, ctx):
    part, how = split(data["id"])
    if part == "verifier":
        misbehave(how)
    return answer == data["id"]

def reward(prompt, answer, ctx):
    part, how = split(ctx.input["id"])
    if part == "reward":
        misbehave(how)
    return 1.0
"""

HOWS = ("exit0", "exit3", "kbi", "base")
PARTS = {
    "policy": "policy_error",
    "tool": "tool_error",
    "verifier": "verifier_error",
    "reward": "reward_error",
}


def _env(builder: EnvBuilder, modes: list[str]) -> Path:
    builder.root.mkdir(parents=True, exist_ok=True)
    prompts = builder.root / "prompts.jsonl"
    prompts.write_text('{"id": "p", "prompt": "unrelated"}\n')
    return builder.write(
        CODE,
        inputs=[{"id": mode, "prompt": f"mode {mode}"} for mode in modes],
        rollouts=1,
        tools=[{"name": "t", "function": "MOD:tool", "parameters": {"type": "object"}}],
        verifiers=[{"type": "python", "function": "MOD:verifier"}],
        reward_model={
            "function": f"{builder.module}:reward",
            "training_prompts": {"path": "prompts.jsonl", "sha256": sha256(prompts)},
        },
    )


def _run(spec: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = subprocess.run(
        [sys.executable, "-m", "rlenv", "run", str(spec), "--out", str(out), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    # exit 1 is the honest end of a run whose env part failed on most of its rollouts (issue 18);
    # either way the run finished: a summary on stdout and in summary.json
    honest = result.returncode == 1 and "could not produce the scores" in result.stderr
    assert result.returncode == 0 or honest, (
        result.returncode,
        result.stdout[-500:],
        result.stderr[-2000:],
    )
    summary = json.loads(result.stdout)
    assert json.loads((out / "summary.json").read_text())["digest"] == summary["digest"]
    return result, summary


def test_env_code_that_exits_or_is_interrupted_is_an_error_status(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    modes = ["ok-none"] + [f"{part}-{how}" for part in PARTS for how in HOWS]
    _, summary = _run(_env(env_builder, modes), tmp_path / "run")
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    assert records["ok-none"]["status"] == "ok" and records["ok-none"]["passed"] is True
    for part, status in PARTS.items():
        for how in HOWS:
            record = records[f"{part}-{how}"]
            assert record["status"] == status, (part, how, record["status"], record["error"])
            if part == "reward":  # the verifiers' verdict stands; the reward is missing
                assert record["reward"] is None and record["reward_error"], (how, record)
            else:
                assert record["passed"] is not True, (part, how)
            assert record["error"], (part, how)
    assert summary["counts"] == {"ok": 1, **{status: len(HOWS) for status in PARTS.values()}}
    assert summary["rollouts"] == len(modes)


def test_ordinary_exceptions_keep_their_documented_outcomes(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A tool's Exception goes back to the model; a verifier's fails that verifier; a reward
    model's sets reward_error; a policy's is policy_error."""
    modes = [f"{part}-raise" for part in PARTS]
    _, summary = _run(_env(env_builder, modes), tmp_path / "run")
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    assert records["policy-raise"]["status"] == "policy_error"
    tool = records["tool-raise"]
    assert tool["status"] == "ok" and tool["tool_calls"][0]["ok"] is False
    assert "ValueError" in tool["messages"][-2]["content"]
    verifier = records["verifier-raise"]
    assert verifier["status"] == "ok" and verifier["passed"] is False
    assert verifier["verifiers"][0]["detail"].startswith("verifier error: ValueError")
    reward = records["reward-raise"]
    assert reward["status"] == "ok" and reward["reward"] is None and reward["reward_error"]


@pytest.mark.parametrize("part", sorted(PARTS))
def test_env_code_that_kills_its_worker_is_an_error_status(
    env_builder: EnvBuilder, tmp_path: Path, part: str
) -> None:
    """os._exit in env code kills the worker process; that rollout gets its part's error
    status (the worker is replaced) and the other rollouts are unaffected."""
    modes = ["ok-none", f"{part}-osexit", "ok-again"]
    _, summary = _run(_env(env_builder, modes), tmp_path / "run")
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    dead = records[f"{part}-osexit"]
    assert dead["status"] == PARTS[part], dead
    assert dead["error"] == f"the worker process died in the {part} (exit code 0)"
    assert dead["passed"] is False and dead["reward"] is None
    assert records["ok-none"]["status"] == records["ok-again"]["status"] == "ok"
    assert records["ok-again"]["passed"] is True
    assert summary["rollouts"] == 3
