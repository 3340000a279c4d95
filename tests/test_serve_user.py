"""Issue 28 items 1 and 4: a served episode of an env with a simulated user plays the user. After
an action that is the agent's reply (not a tool call) the observation is the user's next turn
(made in a worker, as `rlenv run` makes it); the episode ends when the user ends it or max_turns
does, and its record is the one `rlenv run` writes for the same agent replies (digest and all)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EnvBuilder, cli, read_jsonl
from tests.test_simulated_user import ASKER, LOOKUP

pytest.importorskip("openenv.core", reason="the serve extra (openenv-core)")

CODE = (
    """
import json

def policy(messages, tools, ctx):
    last = messages[-1]
    if last["role"] == "tool":
        return last["content"]
    call = {"name": "lookup", "arguments": json.dumps({"query": last["content"]})}
    return {"content": None, "tool_calls": [{"id": "c" + str(len(messages)), "type": "function",
                                             "function": call}]}

def chatty(messages, input, ctx):
    return "tell me more"
"""
    + ASKER
)

INPUTS = [{"id": "a", "prompt": "hello", "answer": "found: ok"}]


def _policy(module: str) -> Any:
    import importlib

    return importlib.import_module(module).policy


async def _play(world: Any, policy: Any, input_id: str) -> tuple[list[list[str]], dict[str, Any]]:
    """Drive one episode with the python policy client-side: the observations' roles per step
    and the final record."""
    from rlenv.serve.episodes import model_reply

    episode = world.open(f"e-{input_id}", input_id, None)
    step = await episode.start()
    seen = [[m["role"] for m in step.messages]]
    history = list(step.messages)
    while not step.done:
        reply = policy(history, world.tools, None)
        action = {"content": reply} if isinstance(reply, str) else reply
        history.append({"role": "assistant", **{k: v for k, v in action.items() if v is not None}})
        step = await episode.step(model_reply(action))
        seen.append([m["role"] for m in step.messages])
        history += step.messages
    assert step.record is not None
    return seen, dict(step.record)


def test_a_served_episode_plays_the_simulated_user(
    env_builder: EnvBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlenv.serve.episodes import ServedWorld

    spec = env_builder.write(
        CODE,
        inputs=INPUTS,
        tools=[dict(LOOKUP)],
        user={"function": f"{env_builder.module}:asker"},
        verifiers=[{"type": "exact_match", "expected_field": "answer"}],
        rollouts=1,
    )
    model = f"python:{env_builder.module}:policy"
    world = ServedWorld(spec, out=tmp_path / "served", model=model)
    try:
        monkeypatch.syspath_prepend(str(env_builder.root))
        seen, record = asyncio.run(_play(world, _policy(env_builder.module), "a"))
        world.summarise()
    finally:
        world.close()
    # reset: the prompt; a tool call: its result; a reply: the user's turn; the last: nothing
    assert seen == [["user"], ["tool"], ["user"], ["tool"], []]
    assert record["status"] == "ok", record["error"]
    assert record["answer"] == "found: where is it? (seed ok)"
    assert record["extra"]["user_turns"] == [
        {"user_turn": 1, "after_turn": 1, "content": "where is it? (seed ok)"},
        {"user_turn": 2, "after_turn": 3, "content": "ok", "ended": True},
    ]
    # `rlenv run` of the same policy gives the same record, digest and all
    done = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, done.stderr
    (ran,) = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert ran["messages"] == record["messages"]
    assert ran["digest"] == record["digest"]
    assert read_jsonl(tmp_path / "served" / "results.jsonl") == [record]
    assert cli("check", str(tmp_path / "served")).returncode == 0


def test_a_user_that_never_ends_stops_at_max_turns(env_builder: EnvBuilder, tmp_path: Path) -> None:
    from rlenv.serve.episodes import ServedWorld, model_reply

    spec = env_builder.write(
        CODE,
        inputs=INPUTS,
        user={"function": f"{env_builder.module}:chatty", "max_turns": 10},
        limits={"max_turns": 3},
        rollouts=1,
    )
    world = ServedWorld(spec, out=tmp_path / "served", model="trainer")

    async def go() -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
        episode = world.open("e", "a", None)
        steps = [await episode.start()]
        while not steps[-1].done:
            steps.append(await episode.step(model_reply({"content": "hm"})))
        return [s.messages for s in steps], dict(steps[-1].record or {})

    try:
        observed, record = asyncio.run(go())
    finally:
        world.close()
    # each reply is answered by the user; the third user turn comes with done (as in `rlenv
    # run`, the user speaks after the agent's last turn, and the limit then ends the episode)
    assert observed[1:] == [[{"role": "user", "content": "tell me more"}]] * 3
    assert record["status"] == "max_turns"
    assert [m["role"] for m in record["messages"]].count("assistant") == 3
    assert [turn["user_turn"] for turn in record["extra"]["user_turns"]] == [1, 2, 3]


def test_rlenv_trl_says_once_that_user_turns_are_not_played(env_builder: EnvBuilder) -> None:
    """TRL's environment_factory has tool turns only: building it (and the reward functions)
    for an env with a simulated user warns in one line naming the env and what the reward is
    computed on; an env without a user builds with no warning."""
    import warnings

    import yaml

    import rlenv.trl as rt
    from tests.conftest import sha256

    spec = env_builder.write(
        CODE,
        inputs=INPUTS,
        tools=[dict(LOOKUP)],
        user={"function": f"{env_builder.module}:asker"},
        rollouts=1,
    )
    train = env_builder.root / "train.jsonl"
    train.write_text('{"id": "t", "prompt": "hi there", "answer": "found: ok"}\n')
    document = yaml.safe_load(spec.read_text())
    document["train_inputs"] = {"path": "train.jsonl", "sha256": sha256(train)}
    spec.write_text(yaml.safe_dump(document))
    with pytest.warns(rt.UserTurnsNotPlayed) as caught:
        environment = rt.environment_factory(spec)
        (score,) = rt.reward_funcs(spec)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "\n" not in message
    assert message.startswith("env 'test-env' has a simulated user")
    assert "user turns are not played in training" in message
    assert "the reward is computed on the prompt and the model's completion alone" in message
    assert caught[0].filename == __file__  # it points at the caller's line
    # and the reward is what the line says: the completion graded with no user turn
    env = environment()
    env.reset(rlenv_id="t")
    completion = [{"role": "assistant", "content": "found: ok"}]
    assert score(["hi there"], [completion], ["t"], environments=[env]) == [1.0]
    plain = env_builder.root / "plain.yaml"
    del document["user"]
    plain.write_text(yaml.safe_dump(document))
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.UserTurnsNotPlayed)
        rt.environment_factory(plain)


def test_the_served_user_over_openenv_and_the_trl_client_refuses_it(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Through the real server and openenv-core's client: the agent's reply is answered with
    the user's turn, the state says the env has a simulated user, and `rlenv.serve.client`
    (TRL's environment_factory, which has no user turns) refuses the env in one line instead of
    training on episodes that never end; a class made by hand fails on its first final reply."""
    from openenv.core.generic_client import GenericEnvClient

    from rlenv.serve.client import ServedEnvironment, environment_factory
    from tests.serving import served

    spec = env_builder.write(
        CODE, inputs=INPUTS, user={"turns": ["where is it?", "ok ###STOP###"]}, rollouts=1
    )
    with served(spec, tmp_path / "served", "--workers", "1", "--model", "trainer") as (url, _):

        async def play() -> tuple[list[Any], Any, dict[str, Any]]:
            async with GenericEnvClient(base_url=url, message_timeout_s=120) as env:
                await env.reset(input_id="a")
                first = await env.step({"content": "hello to you"})
                state = await env.state()
                last = await env.step({"content": "found: ok"})
                return first.observation["messages"], first.done, {"state": state, "last": last}

        messages, done, rest = asyncio.run(play())
        assert (messages, done) == ([{"role": "user", "content": "where is it?"}], False)
        assert rest["state"]["simulated_user"] is True
        assert rest["last"].done and rest["last"].observation["record"]["passed"] is True
        with pytest.raises(ValueError, match="simulated user") as refused:
            environment_factory(url)
        assert "\n" not in str(refused.value)
        by_hand = type("ByHand", (ServedEnvironment,), {"base_url": url})()
        try:
            by_hand.reset(rlenv_id="a")
            with pytest.raises(RuntimeError, match="never ends on the model's final reply"):
                by_hand._finish("found: ok")
        finally:
            by_hand._close()
