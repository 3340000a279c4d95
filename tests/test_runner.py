"""The runner end to end through the real CLI: run directory, digests, concurrency, resume."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, EnvBuilder, cli, read_jsonl, require

FILE_EDIT = ROOT / "envs" / "file_edit.yaml"

ECHO_POLICY = """
import random
def policy(messages, tools, ctx):
    # answer is the last word of the prompt; the draw shows the seeded RNG reaching the policy
    return messages[-1]["content"].split()[-1]
"""


def _run(spec: Path, out: Path, *extra: str) -> dict:
    result = cli("run", str(spec), "--out", str(out), "--json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_bundled_env_twice_same_digest_and_contract(tmp_path: Path) -> None:
    first = _run(FILE_EDIT, tmp_path / "one")
    second = _run(FILE_EDIT, tmp_path / "two")
    assert first["digest"] == second["digest"]
    assert first["pass_rate"]["value"] == 1.0  # the baseline solves it
    assert first["counts"] == {"ok": 12}
    for key in (
        "env",
        "model",
        "decoding",
        "counts",
        "pass_rate",
        "pass_at_k",
        "pass_hat_k",
        "reward",
        "flags",
        "digest",
    ):
        assert key in first
    assert first["env"]["fingerprint"] and first["pass_rate"]["wilson_ci"]
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["digest"] == first["digest"]
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    assert len(records) == 12
    record = records[0]
    for key in (
        "input_id",
        "rollout",
        "seed",
        "messages",
        "tool_calls",
        "answer",
        "verifiers",
        "reward",
        "status",
        "usage",
    ):
        assert key in record
    assert record["tool_calls"][0]["fixture"] == "none"
    assert record["world"]["modified"], "the edit shows up as a changed file"


def test_null_policy_scores_zero(tmp_path: Path) -> None:
    summary = _run(FILE_EDIT, tmp_path / "null", "--model", "python:file_edit_env.policies:null")
    assert summary["pass_rate"]["value"] == 0.0
    assert summary["counts"] == {"ok": 12}


def test_concurrency_does_not_change_digest(tmp_path: Path) -> None:
    one = _run(FILE_EDIT, tmp_path / "c1", "--concurrency", "1")
    eight = _run(FILE_EDIT, tmp_path / "c8", "--concurrency", "8")
    assert one["digest"] == eight["digest"]


def test_limit_and_rollouts(tmp_path: Path) -> None:
    summary = _run(FILE_EDIT, tmp_path / "lim", "--limit", "2", "--rollouts", "3")
    assert summary["rollouts"] == 6 and summary["inputs"] == 2
    assert set(summary["pass_at_k"]) == {"1", "2", "3"}


def test_frozen_time_and_seeds_inside_tools_and_policy(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    code = """
import datetime, json, os, random, subprocess, time
from datetime import datetime as BoundDatetime, timezone
from time import time as bound_time
import numpy

_LOADED = []


def __getattr__(name):  # a lazy module, as transformers' exports are: loading one costs
    if name.startswith("lazy_"):
        _LOADED.append(name)
        return name
    raise AttributeError(name)


def __dir__():
    return [*globals(), "lazy_model_a", "lazy_model_b"]


def clock(args, ctx):
    return {
        "time": time.time(),
        "bound_time": bound_time(),
        "bound_now": BoundDatetime.now(timezone.utc).isoformat(),
        "lazy_loaded": list(_LOADED),
        "now": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "tz": subprocess.run(["date", "+%Z"], capture_output=True, text=True).stdout.strip(),
        "draw": random.random(),
        "np": float(numpy.random.random()),
        "ctx_draw": ctx.rng.random(),
        "seed": ctx.seed,
        "cwd_is_workdir": os.getcwd() == str(ctx.workdir),
    }

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        call = {"id": "c0", "function": {"name": "clock", "arguments": "{}"}}
        return {"content": None, "tool_calls": [call]}
    seen = json.loads(messages[-1]["content"])
    mine = {"policy_time": time.time(), "policy_draw": random.random(), "seed": ctx.seed}
    return json.dumps({**seen, **mine}, sort_keys=True)
"""
    spec = env_builder.write(
        code,
        tools=[{"name": "clock", "function": "MOD:clock", "parameters": {"type": "object"}}],
        verifiers=[{"type": "regex", "pattern": "time"}],
    )
    # two independent runs (different concurrency): whole records must match, not only answers
    summary_one = _run(spec, tmp_path / "t1")
    summary_two = _run(spec, tmp_path / "t2", "--concurrency", "1")
    first, second = (
        {
            (r["input_id"], r["rollout"]): {k: v for k, v in r.items() if k != "timing"}
            for r in read_jsonl(tmp_path / name / "results.jsonl")
        }
        for name in ("t1", "t2")
    )
    again = {key: json.loads(r["answer"]) for key, r in second.items()}
    answers = {key: json.loads(r["answer"]) for key, r in first.items()}
    assert len(answers) == 4
    assert answers == again, "same seeds and clock on a second run"
    frozen = 1709294400.0  # 2024-03-01T12:00:00Z
    for answer in answers.values():
        assert answer["time"] == frozen and answer["policy_time"] == frozen
        # clock functions bound at import are frozen too; a lazy attribute is never loaded
        # by the freeze (freezegun's walk imported all of transformers' models that way)
        assert answer["bound_time"] == frozen
        assert answer["bound_now"].startswith("2024-03-01T12:00:00")
        assert answer["lazy_loaded"] == []
        assert answer["now"].startswith("2024-03-01T12:00:00")
        assert answer["tz"] == "UTC"
        assert answer["cwd_is_workdir"] is True
    draws = {key: answer["draw"] for key, answer in answers.items()}
    assert len(set(draws.values())) == len(draws), "each rollout gets its own derived seed"
    assert second == first, "records (wall time aside) identical across two runs"
    assert summary_one["digest"] == summary_two["digest"]


def test_verify_passes_on_bundled_env() -> None:
    result = cli("verify", str(FILE_EDIT), "--runs", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("identical: 2 runs")


def test_verify_catches_nondeterministic_tool(env_builder: EnvBuilder) -> None:
    code = """
import uuid
def token(args, ctx):
    return uuid.uuid4().hex  # os.urandom: not seeded, not frozen

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c0", "function": {"name": "token", "arguments": "{}"}}]}
    return "done"
"""
    spec = env_builder.write(
        code,
        tools=[{"name": "token", "function": "MOD:token"}],
        verifiers=[{"type": "regex", "pattern": "done"}],
    )
    result = cli("verify", str(spec))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "DIVERGED" in result.stdout
    assert "first divergence: input 'a' rollout 0 turn 0 field messages[2].content" in result.stdout


def test_never_overwrites_and_resume_completes(tmp_path: Path) -> None:
    full = _run(FILE_EDIT, tmp_path / "full")
    out = tmp_path / "partial"
    _run(FILE_EDIT, out)
    results = out / "results.jsonl"
    before = results.read_bytes()
    again = cli("run", str(FILE_EDIT), "--out", str(out))
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert results.read_bytes() == before
    # simulate a crash: keep 5 records and a torn sixth line
    lines = before.splitlines(keepends=True)
    results.write_bytes(b"".join(lines[:5]) + lines[5][:40])
    resumed = _run(FILE_EDIT, out, "--resume")
    assert resumed["digest"] == full["digest"]
    records = read_jsonl(results)
    assert len(records) == 12
    assert len({(r["input_id"], r["rollout"]) for r in records}) == 12


def test_resume_refuses_a_different_model(tmp_path: Path) -> None:
    out = tmp_path / "r"
    _run(FILE_EDIT, out, "--limit", "1")
    other = cli(
        "run",
        str(FILE_EDIT),
        "--out",
        str(out),
        "--resume",
        "--limit",
        "1",
        "--model",
        "python:file_edit_env.policies:null",
    )
    assert other.returncode == 2 and "different model" in other.stderr


def test_policy_crash_is_classified_not_fatal(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """Every rollout is classified and the run completes with its summary; a policy failing on
    every rollout then fails the run (exit 1, the flag policy_failed)."""
    spec = env_builder.write("def policy(messages, tools, ctx):\n    raise RuntimeError('boom')\n")
    result = cli("run", str(spec), "--out", str(tmp_path / "crash"), "--json")
    assert result.returncode == 1 and "policy_failed" in result.stderr, result.stderr
    summary = json.loads(result.stdout)
    assert summary["counts"] == {"policy_error": 4}
    record = read_jsonl(tmp_path / "crash" / "results.jsonl")[0]
    assert record["error"] == "RuntimeError: boom" and record["passed"] is False
    assert record["traceback"] == [
        f"{env_builder.module}.py:2 in policy: raise RuntimeError('boom')"
    ]


def test_max_turns_and_bad_tool_arguments(env_builder: EnvBuilder, tmp_path: Path) -> None:
    code = """
def echo(args, ctx):
    return args["text"]

def policy(messages, tools, ctx):
    return {"tool_calls": [{"id": "c", "function": {"name": "echo", "arguments": '{"txt": 1}'}}]}
"""
    spec = env_builder.write(
        code,
        tools=[
            {
                "name": "echo",
                "function": "MOD:echo",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            }
        ],
        limits={"max_turns": 3},
    )
    summary = _run(spec, tmp_path / "mt")
    assert summary["counts"] == {"max_turns": 4}
    record = read_jsonl(tmp_path / "mt" / "results.jsonl")[0]
    assert record["messages"][2]["content"].startswith(
        "error: invalid arguments: 'text' is a required property"
    )
    assert record["tool_calls"][0]["ok"] is False


def test_replay_provider_grades_answers_from_a_file(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(ECHO_POLICY)
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        '{"input_id": "a", "rollout": 0, "answer": "a"}\n'
        '{"input_id": "a", "rollout": 1, "answer": "wrong"}\n'
        '{"input_id": "b", "rollout": 0, "messages": [{"role": "user", "content": "say b"},'
        ' {"role": "assistant", "content": "b"}]}\n'
    )
    summary = _run(spec, tmp_path / "rp", "--model", f"replay:{answers}")
    assert summary["counts"] == {"model_error": 1, "ok": 3}
    assert summary["pass_rate"]["passed"] == 2
    bad = cli(
        "run",
        str(spec),
        "--model",
        f"replay:{tmp_path / 'missing.jsonl'}",
        "--out",
        str(tmp_path / "x"),
    )
    assert bad.returncode == 2 and "replay file not found" in bad.stderr


@pytest.mark.parametrize("uri", ["gpt4", "ftp:thing", "python:nomodule"])
def test_bad_model_uri(env_builder: EnvBuilder, tmp_path: Path, uri: str) -> None:
    spec = env_builder.write(ECHO_POLICY)
    result = cli("run", str(spec), "--model", uri, "--out", str(tmp_path / "x"))
    assert result.returncode == 2, result.stderr
    assert "bad model URI" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x").exists()


def test_help_and_no_progress_when_not_a_tty(tmp_path: Path) -> None:
    help_text = cli("--help")
    assert help_text.returncode == 0
    for command in ("run", "verify", "validate"):
        assert command in help_text.stdout
    plain = cli("run", str(FILE_EDIT), "--out", str(tmp_path / "p"), "--limit", "1")
    assert plain.returncode == 0 and plain.stderr == ""
    assert "pass" in plain.stdout and "digest" in plain.stdout


def test_init_scaffolds_a_working_env(tmp_path: Path) -> None:
    created = cli("init", "arith", "--root", str(tmp_path))
    assert created.returncode == 0, created.stderr
    spec = tmp_path / "envs" / "arith.yaml"
    assert cli("validate", str(spec)).returncode == 0
    solved = _run(spec, tmp_path / "runs" / "a")
    assert solved["pass_rate"]["value"] == 1.0
    null = _run(spec, tmp_path / "runs" / "b", "--model", "python:arith_env.policies:null")
    assert null["pass_rate"]["value"] == 0.0
    again = cli("init", "arith", "--root", str(tmp_path))
    assert again.returncode == 2 and "already exists; not overwriting it" in again.stderr


def test_tools_read_the_frozen_clock_when_the_model_is_outside(
    env_builder: EnvBuilder, tmp_path: Path, chat
) -> None:
    """Tool calls dispatched one by one to a worker (openai/hf policies) are frozen too."""
    code = """
import time
def probe(args, ctx):
    return {"time": time.time(), "monotonic": time.monotonic()}
"""
    spec = env_builder.write(
        code,
        inputs=[{"id": "a", "prompt": "probe", "answer": "x"}],
        tools=[{"name": "probe", "function": "MOD:probe", "parameters": {"type": "object"}}],
        rollouts=1,
    )
    base_url = chat().base_url
    result = cli(
        "run",
        str(spec),
        "--model",
        "openai:tiny",
        "--base-url",
        base_url,
        "--out",
        str(tmp_path / "o"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    (record,) = read_jsonl(tmp_path / "o" / "results.jsonl")
    probe = json.loads(record["messages"][2]["content"])
    assert probe["time"] == probe["monotonic"] == 1709294400.0


PANDAS_POLICY = """
def policy(messages, tools, ctx):
    import datetime

    import pandas  # first imported inside the frozen world: its C datetime code must load

    return str(pandas.Timestamp(datetime.datetime.now()).year)
"""


def test_env_code_may_import_pandas_under_the_frozen_clock(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """pandas' extensions check datetime's C layout as they load; with freezegun's classes in
    place the worker segfaulted (the search env's reward model reaches pandas via sklearn)."""
    require(importlib.util.find_spec("pandas") is not None, "pandas (the trl extra)")
    inputs = [{"id": "a", "prompt": "year?", "answer": "2024"}]
    spec = env_builder.write(PANDAS_POLICY, inputs=inputs, rollouts=1)
    done = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pass_rate"]["value"] == 1.0  # the frozen year, 2024
