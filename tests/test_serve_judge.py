"""Issue 28: a served episode whose env has a judge in record_missing or live mode is graded as
`rlenv run` grades it: the judgment is made (a real loopback OpenAI-compatible judge), the
record is complete (never left `pending`), and the served run directory says how many
judgments were live, as a run's does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EnvBuilder, cli, in_process, read_jsonl

pytest.importorskip("openenv", reason="the serve extra (openenv-core)")

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""
RUBRIC = "Rate {{ answer }}. score: {{ 8 if answer == gold else 2 }}"


def test_a_served_episode_is_judged_as_run_judges_it(
    env_builder: EnvBuilder, tmp_path: Path, chat: Any
) -> None:
    from rlenv.serve.episodes import ServedWorld, model_reply

    server = chat()
    judge = {
        "model": "openai:judge-1",
        "rubric": RUBRIC,
        "mode": "record_missing",
        "cassette": {"path": "judge.jsonl"},
        "scale": [0, 10],
        "threshold": 0.6,
        "base_url": server.base_url,
    }
    spec = env_builder.write(
        POLICY,
        inputs=[
            {"id": "a", "prompt": "say apple", "gold": "apple"},
            {"id": "b", "prompt": "say pear", "gold": "plum"},
        ],
        rollouts=1,
        verifiers=[{"name": "judged", "type": "judge", "judge": judge}],
    )
    world = ServedWorld(spec, out=tmp_path / "served", model="python:MOD:policy")

    async def episode(input_id: str, answer: str) -> dict[str, Any]:
        opened = world.open(f"e-{input_id}", input_id, None)
        await opened.start()
        step = await opened.step(model_reply({"content": answer}))
        assert step.record is not None
        return step.record

    async def both() -> list[dict[str, Any]]:
        return [await episode("a", "apple"), await episode("b", "pear")]

    try:
        served = asyncio.run(both())
        summary = world.summarise()
    finally:
        world.close()
    assert [r["verifiers"][0]["detail"] for r in served] == [
        "judge score 8 (of 0-10): echo: Rate apple. score: 8",
        "judge score 2 (of 0-10): echo: Rate pear. score: 2",
    ]
    assert [r["passed"] for r in served] == [True, False]
    assert summary["judges"] == {"judged": {"mode": "record_missing", "live_judgments": 2}}
    assert read_jsonl(tmp_path / "served" / "results.jsonl") == served  # as the client saw them
    assert in_process("check", str(tmp_path / "served")).exit_code == 0
    # `rlenv run` of the same answers (now replayed from the grown cassette) grades alike
    done = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["judges"]["judged"]["live_judgments"] == 0
    ran = {r["input_id"]: r["verifiers"] for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    assert ran == {r["input_id"]: r["verifiers"] for r in served}
    assert len(server.received) == 2
