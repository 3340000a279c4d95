"""Issue 28 item 1: a simulated user. The conversation alternates agent turns (with tool calls)
and user turns until the user ends it or a limit does; a model user (a real OpenAI-compatible
server on loopback here) is recorded by `rlenv record` like a tool, keyed by the conversation so
far, and replayed by `rlenv run`; a reply never recorded is a fixture_miss naming the turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import EnvBuilder, cli, read_jsonl

CODE = """
def policy(messages, tools, ctx):
    said = [m["content"] for m in messages if m["role"] == "user"]
    return "heard " + str(len(said)) + ": " + said[-1]

def other(messages, tools, ctx):
    return "something else entirely"

def user(messages, input, ctx):
    heard = [m for m in messages if m["role"] == "assistant"]
    if len(heard) >= 3:
        return None
    return "more please " + input["id"]

def polite_user(messages, input, ctx):
    return "thanks ###STOP###"
""" + (
    ASKER := """
def asker(messages, input, ctx):
    asked = sum(1 for m in messages if m["role"] == "user")
    said = ["where is it?", "ok ###STOP###"][asked - 1]
    return said + (" (seed ok)" if isinstance(ctx.seed, int) and asked == 1 else "")

def lookup(arguments, ctx):
    return "found: " + arguments.get("query", "")
"""
)
"""A user that asks twice and a tool that finds what it is asked: shared with the served
episodes' tests (tests/test_serve_user.py)."""

LOOKUP = {
    "name": "lookup",
    "function": "MOD:lookup",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}

INPUTS = [
    {"id": "a", "prompt": "hello", "answer": "x", "user_instructions": "You want a refund."},
    {"id": "b", "prompt": "hi", "answer": "x", "user_instructions": "You lost a parcel."},
]


def _model_user_env(env_builder: EnvBuilder, base_url: str) -> Path:
    """An env whose user is a model on a chat server at `base_url`, recorded in user.yaml."""
    user = {
        "model": "openai:usersim",
        "base_url": f"{base_url}/v1",
        "cassette": {"path": "user.yaml"},
        "max_turns": 2,
    }
    return env_builder.write(CODE, inputs=INPUTS, user=user, rollouts=2)


def _run(spec: Path, out: Path, *extra: str) -> dict[str, Any]:
    done = cli("run", str(spec), "--out", str(out), "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_scripted_turns_alternate_with_the_agent(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(
        CODE,
        inputs=INPUTS,
        user={"turns": ["where is it?", "ok ###STOP###"]},
        rollouts=1,
    )
    _run(spec, tmp_path / "run")
    record = read_jsonl(tmp_path / "run" / "results.jsonl")[0]
    roles = [m["role"] for m in record["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert record["answer"] == "heard 2: where is it?"
    assert record["extra"]["user_turns"] == [
        {"user_turn": 1, "after_turn": 0, "content": "where is it?"},
        {"user_turn": 2, "after_turn": 1, "content": "ok", "ended": True},
    ]


def test_a_python_user_ends_the_conversation(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(
        CODE, inputs=INPUTS, user={"function": "MOD:user", "max_turns": 5}, rollouts=1
    )
    spec_text = spec.read_text().replace("MOD:user", f"{env_builder.module}:user")
    spec.write_text(spec_text)
    _run(spec, tmp_path / "run")
    # records are written as rollouts finish: pick input b by its id, not by its line
    (record,) = [r for r in read_jsonl(tmp_path / "run" / "results.jsonl") if r["input_id"] == "b"]
    assert record["answer"] == "heard 3: more please b"
    assert [turn["content"] for turn in record["extra"]["user_turns"]] == [
        "more please b",
        "more please b",
        "",  # the function's None ends the conversation
    ]
    assert record["extra"]["user_turns"][-1]["ended"] is True
    limited = env_builder.write(
        CODE, inputs=INPUTS, user={"turns": ["1", "2", "3"], "max_turns": 1}, rollouts=1
    )
    _run(limited, tmp_path / "limited")
    record = read_jsonl(tmp_path / "limited" / "results.jsonl")[0]
    assert [m["role"] for m in record["messages"]].count("assistant") == 2  # one user turn


def test_a_model_user_is_recorded_then_replayed(
    env_builder: EnvBuilder, chat: Any, tmp_path: Path
) -> None:
    server = chat()
    spec = _model_user_env(env_builder, server.base_url)
    recorded = cli("record", str(spec))
    assert recorded.returncode == 0, recorded.stderr
    asked = len(server.received)
    assert asked == 4  # 2 inputs x 2 user turns (both rollouts say the same: recorded once)
    first = server.received[0]["messages"]
    assert first[0] == {"role": "system", "content": "You want a refund."}
    assert first[1] == {"role": "assistant", "content": "hello"}  # the user's own words
    assert cli("validate", str(spec)).returncode == 0  # record pinned the user cassette
    one = _run(spec, tmp_path / "one")
    two = _run(spec, tmp_path / "two")
    assert len(server.received) == asked, "replay never calls the user model"
    assert one["digest"] == two["digest"]
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    assert all(record["status"] == "ok" for record in records)
    assert records[0]["extra"]["user_turns"][0]["content"] == "echo: heard 1: hello"
    # another policy says something the user model never heard: a miss naming the turn
    model = f"python:{env_builder.module}:other"
    missed = cli("run", str(spec), "--model", model, "--out", str(tmp_path / "miss"), "--json")
    records = read_jsonl(tmp_path / "miss" / "results.jsonl")
    assert {record["status"] for record in records} == {"fixture_miss"}, missed.stderr
    assert records[0]["error"].startswith("user turn 1: the simulated user's reply")
    assert len(server.received) == asked


def test_a_bad_user_block_is_one_line(env_builder: EnvBuilder) -> None:
    spec = env_builder.write(CODE, user={"turns": ["a"], "function": "m:f"})
    done = cli("validate", str(spec))
    assert done.returncode == 2
    assert "exactly one of turns, function, model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_browser_shows_the_turns(env_builder: EnvBuilder, tmp_path: Path) -> None:
    from rlenv.report.browser import SampleTable

    spec = env_builder.write(CODE, inputs=INPUTS, user={"turns": ["where?", "bye ###STOP###"]})
    _run(spec, tmp_path / "run")
    report = cli("report", str(tmp_path / "run"))
    assert report.returncode == 0, report.stderr
    html = next((tmp_path / "run").glob("*.html")).read_text()
    assert "sb-user-turns" in html and "simulated, turn" in html
    table = SampleTable({})
    table.add_run("run", read_jsonl(tmp_path / "run" / "results.jsonl"))
    row = table.rows[0]
    assert row["u"] == [[1, 0, "where?", None], [2, 1, "bye", True]]
    assert [m["role"] for m in row["m"]] == ["assistant", "user"]  # the last reply is "a"
    assert row["fa"] == 1


def test_an_outside_policy_talks_with_the_user(
    env_builder: EnvBuilder, chat: Any, tmp_path: Path
) -> None:
    """An `openai:` policy (a real chat server on loopback, outside the frozen world): its turns
    (with tool calls, run in a worker) alternate with the user's, the user's replies made in a
    worker (a python user here; scripted turns are made the same way; a model user recorded
    then replayed); two runs are equal."""
    policy = chat()
    outside = ("--model", "openai:policy", "--base-url", f"{policy.base_url}/v1")
    python = env_builder.write(
        CODE,
        inputs=INPUTS,
        tools=[dict(LOOKUP)],
        user={"function": f"{env_builder.module}:asker"},
        rollouts=1,
    )
    _run(python, tmp_path / "python", *outside)
    (record,) = [
        r for r in read_jsonl(tmp_path / "python" / "results.jsonl") if r["input_id"] == "a"
    ]
    assert record["status"] == "ok", record["error"]
    roles = [m["role"] for m in record["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant"] * 2
    assert record["answer"] == "found: where is it? (seed ok)"
    assert [(c["turn"], c["arguments"]) for c in record["tool_calls"]] == [
        (0, {"query": "hello"}),
        (2, {"query": "where is it? (seed ok)"}),
    ]
    assert record["extra"]["user_turns"] == [
        {"user_turn": 1, "after_turn": 1, "content": "where is it? (seed ok)"},
        {"user_turn": 2, "after_turn": 3, "content": "ok", "ended": True},
    ]
    user_model = chat()
    modelled = _model_user_env(env_builder, user_model.base_url)
    recorded = cli("record", str(modelled), *outside)
    assert recorded.returncode == 0, recorded.stderr
    asked = len(user_model.received)
    assert asked == 4  # 2 inputs x 2 user turns, the policy deterministic: recorded once
    one = _run(modelled, tmp_path / "one", *outside)
    two = _run(modelled, tmp_path / "two", *outside)
    assert len(user_model.received) == asked, "replay never calls the user model"
    assert one["digest"] == two["digest"] and one["counts"] == {"ok": 4}
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    record = next(r for r in records if r["input_id"] == "a")
    assert record["extra"]["user_turns"][0]["content"] == "echo: echo: hello"
    assert record["answer"] == "echo: " * 5 + "hello"  # agent, user, agent, user, agent


def test_an_hf_policy_talks_with_the_user(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """A local transformers policy (`hf:`, generated in the orchestrator) with scripted user
    turns: the user's turns come from the worker between the model's."""
    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import tiny_models

    checkpoint = tiny_models.build_checkpoint(tmp_path / "ckpt", seed=0)
    spec = env_builder.write(
        "",
        inputs=INPUTS[:1],
        model=f"hf:{checkpoint}",
        decoding={"temperature": 1.0, "max_tokens": 6},
        user={"turns": ["where is it?", "thanks ###STOP###"]},
        verifiers=[{"type": "regex", "pattern": "."}],
        rollouts=1,
    )
    _run(spec, tmp_path / "run")
    (record,) = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert record["status"] == "ok", record["error"]
    roles = [m["role"] for m in record["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant"] * 2
    assert record["messages"][-2] == {"role": "user", "content": "where is it?"}
    assert record["extra"]["user_turns"][-1] == {
        "user_turn": 2,
        "after_turn": 1,
        "content": "thanks",
        "ended": True,
    }


def test_a_user_turns_reply_from_a_worker_is_checked() -> None:
    """What a worker sends back for a user turn is a bounded str or None, or an exception the
    conversation loop classifies; anything else is the rollout's error (the worker replaced)."""
    from rlenv.bounds import MAX_REPLY_BYTES
    from rlenv.errors import FixtureMiss
    from rlenv.executors.base import CALLS
    from rlenv.executors.replies import reply_problem
    from rlenv.worker.protocol import HANDLERS

    assert "user" in HANDLERS and CALLS["user"] == ("tool_error", "user turn")
    assert reply_problem("user", ("ok", "It is A101."), None) is None
    assert reply_problem("user", ("ok", None), None) is None
    assert reply_problem("user", ("raise", FixtureMiss("user turn 1: ...")), None) is None
    assert reply_problem("user", ("ok", {"content": "hi"}), None) == "a dict, not a user's message"
    too_long = reply_problem("user", ("ok", "x" * (MAX_REPLY_BYTES + 1)), None)
    assert too_long is not None and too_long.startswith("a user's message that")
    raised = reply_problem("user", ("raise", ValueError("forged")), None)
    assert raised == "it raised ValueError: forged"
