"""Issue 28 item 4: a reward component that cannot score a completion is never silent. With a
judge in the spec (replayed from its cassette, so a new completion is a miss), the judge's
component raises one clear line, the components that do not use the judge still score, and a
component with a declared `fallback` returns it and logs ``rewards/<name>/errors``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import EnvBuilder, cli, sha256

CODE = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]

def shout(prompt, answer, ctx):
    return float((answer or "").isupper())
"""

RUBRIC = "Grade {{ answer }} for '{{ prompt }}'. score: {{ 8 if answer == gold else 2 }}"


def judged_spec(env_builder: EnvBuilder, chat: Any, **component: Any) -> Path:
    """Held-out inputs judged (recorded and pinned), two training inputs, three components:
    one per verifier and a python function."""
    judge = {
        "model": "openai:judge-1",
        "rubric": RUBRIC,
        "cassette": {"path": "judge.jsonl"},
        "scale": [0, 10],
        "threshold": 0.6,
    }
    spec = env_builder.write(
        CODE,
        inputs=[
            {"id": "a", "prompt": "say apple", "answer": "apple", "gold": "apple"},
            {"id": "b", "prompt": "say pear", "answer": "pear", "gold": "plum"},
        ],
        rollouts=1,
        verifiers=[
            {"name": "exact", "type": "exact_match", "expected_field": "answer"},
            {"name": "judged", "type": "judge", "judge": judge},
        ],
    )
    document = yaml.safe_load(spec.read_text())
    train = env_builder.root / "train.jsonl"
    rows = [
        {"id": "t1", "prompt": "repeat cherry", "answer": "cherry", "gold": "cherry"},
        {"id": "t2", "prompt": "repeat DATE", "answer": "DATE", "gold": "DATE"},
    ]
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    document["train_inputs"] = {"path": "train.jsonl", "sha256": sha256(train)}
    document["reward"] = {
        "components": {
            "correct": {"verifier": "exact"},
            "quality": {"verifier": "judged", "use": "score", **component},
            "loud": {"function": f"{env_builder.module}:shout", "weight": 0.5},
        }
    }
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    server = chat()
    recorded = cli("record", str(spec), env={"OPENAI_BASE_URL": server.base_url})
    assert recorded.returncode == 0, recorded.stderr
    assert cli("pin", str(spec)).returncode == 0
    server.stop()
    return spec


COMPLETIONS = [
    [{"role": "assistant", "content": "cherry"}],
    [{"role": "assistant", "content": "DATE"}],
]
PROMPTS = [
    [{"role": "user", "content": "repeat cherry"}],
    [{"role": "user", "content": "repeat DATE"}],
]


def test_a_component_that_cannot_score_raises_and_the_others_still_score(
    env_builder: EnvBuilder, chat: Any
) -> None:
    import rlenv.trl as rt

    spec = judged_spec(env_builder, chat)
    correct, quality, loud = rt.reward_funcs(spec)
    kwargs = {"prompts": PROMPTS, "completions": COMPLETIONS, "rlenv_id": ["t1", "t2"]}
    assert correct(**kwargs) == [1.0, 1.0]  # the judge's miss does not block the verifier
    assert loud(**kwargs) == [0.0, 1.0]
    with pytest.raises(rt.RewardError) as caught:
        quality(**kwargs)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("reward component 'quality' cannot score input t1")
    assert "judge judged" in message and "never recorded" in message


def test_a_declared_fallback_is_returned_and_counted(env_builder: EnvBuilder, chat: Any) -> None:
    import rlenv.trl as rt

    spec = judged_spec(env_builder, chat, fallback=0.25)
    correct, quality, _ = rt.reward_funcs(spec)
    logged: list[tuple[str, float]] = []
    kwargs = {
        "prompts": PROMPTS,
        "completions": COMPLETIONS,
        "rlenv_id": ["t1", "t2"],
        "log_metric": lambda name, value: logged.append((name, value)),
    }
    assert quality(**kwargs) == [0.25, 0.25]
    assert correct(**kwargs) == [1.0, 1.0]
    assert ("rewards/quality/errors", 2.0) in logged
    assert ("rewards/correct/errors", 0.0) in logged


def test_a_live_judge_grades_new_completions_in_training(
    env_builder: EnvBuilder, chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Judge mode `live`: the completions of a new checkpoint are judged (outside the frozen
    world) instead of missing."""
    import rlenv.trl as rt

    spec = judged_spec(env_builder, chat)
    document = yaml.safe_load(spec.read_text())
    document["verifiers"][1]["judge"]["mode"] = "live"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    server = chat()
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    _, quality, _ = rt.reward_funcs(spec)
    kwargs = {"prompts": PROMPTS, "completions": COMPLETIONS, "rlenv_id": ["t1", "t2"]}
    assert quality(**kwargs) == [0.8, 0.8]
    assert len(server.received) == 2


def test_in_a_run_a_judge_miss_keeps_the_other_verdicts_and_no_partial_total(
    env_builder: EnvBuilder, chat: Any, tmp_path: Path
) -> None:
    from tests.conftest import read_jsonl

    spec = judged_spec(env_builder, chat)
    document = yaml.safe_load(spec.read_text())
    document["verifiers"][1]["judge"]["rubric"] += " Be strict."
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    done = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert done.returncode == 1  # no verdict for the judge: the run says so
    record = read_jsonl(tmp_path / "run" / "results.jsonl")[0]
    assert record["status"] == "verifier_error" and record["passed"] is False
    exact, judged = record["verifiers"]
    assert exact["passed"] is True  # kept, not dropped with the judge's miss
    assert judged["passed"] is None and "was never recorded" in judged["detail"]
    assert record["rewards"]["correct"] == 1.0 and record["rewards"]["quality"] is None
    assert record["rewards"]["total"] is None  # never a partial total
