"""Issue 15: composite rewards in the spec, training inputs beside held-out ones, and the TRL
pieces (dataset, reward functions, environment factory) scoring in the frozen world, with a
real GRPOTrainer run on a tiny model built here."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rlenv.errors import UserError
from tests.conftest import EnvBuilder, cli, read_jsonl, sha256
from tests.serving import LOOKUP

CODE = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]

def shout(prompt, answer, ctx):
    return float((answer or "").isupper())

def lookup(args, ctx):
    return {"word": args["word"], "length": len(args["word"])}
"""

HELD_OUT = [
    {"id": "a", "prompt": "say apple", "answer": "apple"},
    {"id": "b", "prompt": "say BANANA", "answer": "BANANA"},
]
TRAIN = [
    {"id": "t1", "prompt": "repeat cherry", "answer": "cherry"},
    {"id": "t2", "prompt": "repeat DATE", "answer": "DATE"},
]
LOOKUP_TOOLS = [LOOKUP]  # write() fills in MOD
REWARD = {
    "components": {
        "correct": {"verifier": "exact", "weight": 1.0},
        "short": {"verifier": "short", "weight": 0.2},
        "loud": {"function": "MOD:shout", "weight": 0.5},
    }
}


def _spec(env_builder: EnvBuilder, train: list[dict] = TRAIN, **extra: object) -> Path:
    spec = env_builder.write(
        CODE,
        inputs=HELD_OUT,
        verifiers=[
            {"name": "exact", "type": "exact_match", "expected_field": "answer"},
            {"name": "short", "type": "regex", "pattern": "^.{1,5}$"},
        ],
        rollouts=1,
        **extra,
    )
    document = json.loads(json.dumps(__import__("yaml").safe_load(spec.read_text())))
    table = env_builder.root / "train.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in train))
    document["train_inputs"] = {"path": "train.jsonl", "sha256": sha256(table)}
    document["reward"] = json.loads(json.dumps(REWARD).replace("MOD", env_builder.module))
    spec.write_text(json.dumps(document))
    return spec


def test_composite_reward_in_records_and_summary(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = _spec(env_builder)
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    assert records["a"]["rewards"] == {"correct": 1.0, "short": 1.0, "loud": 0.0, "total": 1.2}
    assert records["b"]["rewards"] == {"correct": 1.0, "short": 0.0, "loud": 1.0, "total": 1.5}
    summary = json.loads(done.stdout)
    components = summary["reward_components"]
    assert components["total"]["mean"] == pytest.approx(1.35)
    # no reward model: the diagnostics read the composite total as the proxy (it was null)
    assert records["a"]["reward"] is None
    assert summary["reward"]["count"] == 2 and summary["reward"]["mean"] == pytest.approx(1.35)
    assert components["loud"]["n"] == 2 and components["correct"]["mean"] == 1.0
    text = cli("run", str(spec), "--out", str(tmp_path / "text"))
    assert "loud       mean 0.500" in text.stdout, text.stdout


def test_spec_refuses_bad_components_and_leaked_training_inputs(env_builder: EnvBuilder) -> None:
    spec = _spec(env_builder, train=[*TRAIN, {"id": "x", "prompt": "say apple", "answer": "a"}])
    done = cli("validate", str(spec))
    assert done.returncode == 2
    assert "train_inputs: 1 held-out input(s) also appear in the training inputs: a" in done.stderr

    document = json.loads(spec.read_text())
    document["train_inputs"]["sha256"] = sha256(env_builder.root / "train.jsonl")
    document["reward"] = {"components": {"c": {"verifier": "nope"}, "d": {"weight": 1}}}
    spec.write_text(json.dumps(document))
    bad = cli("validate", str(spec))
    assert bad.returncode == 2
    assert "no verifier named 'nope'" in bad.stderr or "exactly one of" in bad.stderr


def test_dataset_reward_funcs_and_weights(env_builder: EnvBuilder) -> None:
    import rlenv.trl as rt

    spec = _spec(env_builder)
    data = rt.dataset(spec)
    assert data["rlenv_id"] == ["t1", "t2"]
    assert data["prompt"][0] == [{"role": "user", "content": "repeat cherry"}]
    with pytest.raises(UserError, match="only the 'train' split"):
        rt.dataset(spec, split="test")

    funcs = rt.reward_funcs(spec)
    assert [f.__name__ for f in funcs] == ["correct", "short", "loud"]
    assert rt.reward_weights(spec) == [1.0, 0.2, 0.5]
    prompts = data["prompt"]
    completions = [
        [{"role": "assistant", "content": "cherry"}],
        [{"role": "assistant", "content": "nope"}],
    ]
    values = [f(prompts=prompts, completions=completions, rlenv_id=data["rlenv_id"]) for f in funcs]
    assert values == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    # the same trajectory scored again (a new rollout index, same verdict)
    again = funcs[0](
        prompts=prompts, completions=completions[::-1], rlenv_id=data["rlenv_id"][::-1]
    )
    assert again == [0.0, 1.0]


def test_environment_factory_replays_tools(env_builder: EnvBuilder) -> None:
    import rlenv.trl as rt

    spec = _spec(env_builder, tools=copy.deepcopy(LOOKUP_TOOLS))  # write() fills in MOD
    Env = rt.environment_factory(spec)
    from transformers.utils import get_json_schema

    schema = get_json_schema(Env.lookup)
    assert schema["function"]["name"] == "lookup"
    assert schema["function"]["parameters"]["properties"]["word"]["type"] == "string"
    env = Env()
    assert env.reset(rlenv_id="t1", prompt=[]) is None
    assert json.loads(env.lookup(word="cherry")) == {"length": 6, "word": "cherry"}
    funcs = rt.reward_funcs(spec)
    completion = [{"role": "assistant", "content": "cherry"}]
    values = funcs[0](
        prompts=[[{"role": "user", "content": "repeat cherry"}]],
        completions=[completion],
        rlenv_id=["t1"],
        environments=[env],
    )
    assert values == [1.0]


def test_a_real_grpo_trainer_with_the_envs_tools_as_an_environment(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """GRPO with environment_factory: one frozen-world environment per rollout, the spec's
    tool as its method (rendered into the prompt by a tool-calling chat template), graded by
    the env's reward functions with the environment's state."""
    from trl import GRPOTrainer

    import rlenv.trl as rt
    from tests.tiny_models import grpo_config, tool_calling_model

    spec = _spec(env_builder, tools=copy.deepcopy(LOOKUP_TOOLS))  # write() fills in MOD
    # the tool schema goes into the prompt: room for it, and a template that renders tool calls
    model, processing_class = tool_calling_model(tmp_path / "tiny")
    trainer = GRPOTrainer(
        model=model,
        processing_class=processing_class,
        reward_funcs=rt.reward_funcs(spec),
        train_dataset=rt.dataset(spec),
        environment_factory=rt.environment_factory(spec),
        args=grpo_config(tmp_path / "out", reward_weights=rt.reward_weights(spec)),
    )
    trainer.train()
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert "rewards/correct/mean" in logged and "tools/call_frequency" in logged
    assert sum(rt.world(spec).rollouts.values()) >= 4  # every rollout entered the frozen world


def _tags(directory: Path) -> set[str]:
    from tests.test_report import read_events

    return {
        value.tag
        for path in directory.rglob("events.out.tfevents.*")
        for event in read_events(path)
        for value in event.summary.value
    }


def test_callback_evaluates_each_checkpoint_and_watch_does_it_from_outside(
    env_builder: EnvBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real GRPO run of a tiny GPT-2 built here, rewarded by the env's components, saving two
    checkpoints: the callback writes a run directory per step
    (compare accepts them) and TensorBoard gets rlenv/ scalars; `rlenv watch --once` scores
    the same checkpoints from outside the trainer, into its own directories."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    import rlenv.trl as rt
    from tests.tiny_models import build_checkpoint, grpo_config

    spec = _spec(env_builder, decoding={"temperature": 1.0, "max_tokens": 4, "seed": 0})
    checkpoint = build_checkpoint(tmp_path / "tiny", seed=0)
    output = tmp_path / "out"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(output / "tb"))  # transformers' logger
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(checkpoint),
        processing_class=AutoTokenizer.from_pretrained(checkpoint),
        reward_funcs=rt.reward_funcs(spec),
        train_dataset=rt.dataset(spec),
        args=grpo_config(
            output,
            reward_weights=rt.reward_weights(spec),
            save_strategy="steps",
            save_steps=1,
            report_to=["tensorboard"],
        ),
    )
    callback = rt.RlenvCallback(spec, limit=2, rollouts=1).attach(trainer)
    trainer.train()
    # GRPO was rewarded by the env's components, each logged under its name
    history = {key for entry in trainer.state.log_history for key in entry}
    for name in ("correct", "short", "loud"):
        assert f"rewards/{name}/mean" in history, sorted(history)
    assert trainer.state.global_step == 2
    # the starting model first (step-0), then each checkpoint, evaluated in the background
    steps = [e.step for e in callback.evaluations]
    assert steps == [0, 1, 2]
    assert callback.reference == str(checkpoint)  # KL against the model training began from
    verdicts = [e.verdict for e in callback.evaluations]
    assert verdicts[0]["is_reference"] and all(v["reference"] == "step-0" for v in verdicts[1:])
    runs = [output / "rlenv" / f"step-{step}" for step in steps]
    assert all((run / "summary.json").is_file() for run in runs)
    # given in the shell's order (step-0, step-1, step-2 sort alike here): compare reads steps
    compared = cli("compare", *map(str, runs[::-1]), "--json", "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    result = json.loads(compared.stdout)
    assert [c["step"] for c in result["checkpoints"]] == [0, 1, 2]
    assert result["verdict"]["status"] in ("healthy", "inconclusive", "regressed", "reward_hacking")
    logged = {tag.removeprefix("train/") for tag in _tags(output / "tb")}  # transformers' prefix
    assert {"rlenv/pass_rate", "rlenv/flags", "rlenv/verdict", "rlenv/verdict_run"} <= logged
    # 2 inputs are too few to judge: inconclusive, and it says so
    assert callback.evaluations[-1].verdict["status"] == "inconclusive"
    assert "inputs scored in both runs" in callback.evaluations[-1].verdict["reason"]

    watched = cli(
        "watch",
        str(output),
        "--env",
        str(spec),
        "--once",
        "--settle",
        "0",
        "--out",
        str(tmp_path / "watched"),
        "--limit",
        "2",
        "--rollouts",
        "1",
        "--json",
        "--reference",
        str(checkpoint),
    )
    assert watched.returncode == 0, watched.stderr
    rows = json.loads(watched.stdout)
    assert [row["step"] for row in rows] == [0, 1, 2]  # the starting model first
    assert rows[0]["verdict"]["is_reference"] and "rlenv/verdict" in rows[1]
    assert {"rlenv/pass_rate", "rlenv/verdict"} <= _tags(tmp_path / "watched" / "tensorboard")
    # the same checkpoint, the same env: the same records
    for step in steps:
        inside = json.loads((output / "rlenv" / f"step-{step}" / "summary.json").read_text())
        outside = json.loads((tmp_path / "watched" / f"step-{step}" / "summary.json").read_text())
        assert inside["digest"] == outside["digest"]
