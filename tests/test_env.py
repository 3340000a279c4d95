"""`rlenv.env`: the ordered, named checks that turn a spec path into a checked environment.

Each check has a spec broken in exactly the way it looks for; `test_every_check_is_needed`
shows that the spec gets through `load_environment` once that one check is taken out of the
list, so none of these tests could pass with its check removed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import rlenv.env
from rlenv.env import ENV_CHECKS, Environment, checks_for, load_environment
from rlenv.errors import UserError
from tests.conftest import EnvBuilder, sha256

POLICY = "def policy(messages, tools, ctx):\n    return 'a'\n"
TOOL = "def lookup(args, ctx):\n    return 'x'\n"
WORDS = "def words(prompt, answer, ctx):\n    return float(len(answer.split()))\n"


def _rewrite(spec: Path, change: Callable[[dict[str, Any]], None]) -> None:
    document = yaml.safe_load(spec.read_text())
    change(document)
    spec.write_text(yaml.safe_dump(document, sort_keys=False))


# --------------------------------------------------------------------- one broken spec per check


def _inputs_file(env: EnvBuilder) -> Path:
    spec = env.write(POLICY)
    (spec.parent / "inputs.jsonl").write_text('{"id": "a", "prompt": "changed", "answer": "a"}\n')
    return spec


def _snapshot(env: EnvBuilder) -> Path:
    spec = env.write(POLICY)
    (spec.parent / "world").mkdir()
    (spec.parent / "world" / "a.txt").write_text("a\n")
    _rewrite(spec, lambda d: d.update(snapshot={"path": "world", "sha256": "0" * 64}))
    return spec


def _cassette_files(env: EnvBuilder) -> Path:
    tool = {"name": "lookup", "function": "MOD:lookup", "cassette": {"path": "gone.yaml"}}
    return env.write(POLICY + TOOL, tools=[tool])


def _reward_model_files(env: EnvBuilder) -> Path:
    env.root.mkdir(parents=True, exist_ok=True)
    (env.root / "prompts.jsonl").write_text('{"id": "p", "prompt": "hello"}\n')
    prompts = {"path": "prompts.jsonl", "sha256": "0" * 64}
    reward = {"function": f"{env.module}:words", "training_prompts": prompts}
    return env.write(POLICY + WORDS, reward_model=reward)


def _inputs(env: EnvBuilder) -> Path:
    spec = env.write(POLICY)
    inputs = spec.parent / "inputs.jsonl"
    inputs.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    _rewrite(spec, lambda d: d["inputs"].update(sha256=sha256(inputs)))
    return spec


def _importable(env: EnvBuilder) -> Path:
    return env.write(POLICY, tools=[{"name": "t", "function": "no_such_module_h2:f"}])


def _policy_importable(env: EnvBuilder) -> Path:
    return env.write("")  # the spec's model is python:MOD:policy, and MOD has no policy


def _signatures(env: EnvBuilder) -> Path:
    """The issue's reward model: importable, but called with one argument too many."""
    reward = {"function": f"{env.module}:words"}
    return env.write(POLICY + "def words(prompt, answer):\n    return 1.0\n", reward_model=reward)


def _cassette_secrets(env: EnvBuilder) -> Path:
    env.root.mkdir(parents=True, exist_ok=True)
    interaction = {
        "request": {
            "method": "GET",
            "uri": "http://api.test/a",
            "body": None,
            "headers": {"Authorization": ["Bearer abcdefgh12345678"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {},
            "body": {"string": '{"ok": true}'},
        },
    }
    document = {"version": 1, "interactions": [interaction]}
    (env.root / "leaky.yaml").write_text(yaml.safe_dump(document))
    tool = {"name": "lookup", "function": "MOD:lookup", "cassette": {"path": "leaky.yaml"}}
    return env.write(POLICY + TOOL, tools=[tool])


QUESTION = "Which river flows through the ancient city of Budapest in central Europe?"


def _leakage(env: EnvBuilder) -> Path:
    env.root.mkdir(parents=True, exist_ok=True)
    pair = {"prompt": QUESTION, "chosen": "The Danube.", "rejected": "The Thames."}
    (env.root / "pairs.jsonl").write_text(json.dumps(pair) + "\n")
    reward = {"function": f"{env.module}:words", "train_data": {"path": "pairs.jsonl"}}
    inputs = [{"id": "q", "prompt": QUESTION, "answer": "Danube"}]
    return env.write(POLICY + WORDS, inputs=inputs, reward_model=reward)


def _deferrable(env: EnvBuilder) -> Path:
    verifier = {"type": "file_state", "path": "out.txt", "exists": True, "cost": "expensive"}
    return env.write(POLICY, verifiers=[verifier])


def _verifiers_apply(env: EnvBuilder) -> Path:
    when = {"field": "kind", "equals": "date"}
    verifier = {"type": "exact_match", "expected_field": "answer", "when": when}
    return env.write(POLICY, verifiers=[verifier])


def _gold(env: EnvBuilder) -> Path:
    inputs = [{"id": "a", "prompt": "say a", "answer": "a"}, {"id": "b", "prompt": "say b"}]
    return env.write(POLICY, inputs=inputs)


def _reward_endpoints(env: EnvBuilder) -> Path:
    return env.write(POLICY, reward_model={"uri": "http:///score"})


BROKEN: dict[str, tuple[Callable[[EnvBuilder], Path], str]] = {
    "inputs_file": (_inputs_file, "inputs.sha256: hash mismatch for inputs.jsonl"),
    "snapshot": (_snapshot, "snapshot.sha256: manifest hash mismatch for world"),
    "cassette_files": (_cassette_files, "fixtures not recorded yet (tools[0].cassette"),
    "reward_model_files": (
        _reward_model_files,
        "reward_model.training_prompts.sha256: hash mismatch for prompts.jsonl",
    ),
    "inputs": (_inputs, "duplicate input id 'a' (first on line 1)"),
    "verifiers_apply": (_verifiers_apply, "input 'a': no verifier applies to it"),
    "gold": (_gold, "input 'b': has no field 'answer' (verifier 'exact_match')"),
    "importable": (_importable, "tools[0].function: cannot import module 'no_such_module_h2'"),
    "policy_importable": (_policy_importable, "has no 'policy'"),
    "signatures": (
        _signatures,
        "reward_model.function: {module}:words cannot be called as (prompt, answer, ctx):"
        " words(prompt, answer): too many positional arguments; expected def score(prompt:"
        " list[message], answer: str | None, ctx, **options) -> float",
    ),
    "cassette_secrets": (_cassette_secrets, "leaky.yaml holds a secret-looking value"),
    "leakage": (_leakage, "held-out leakage"),
    "deferrable": (_deferrable, "a file_state verifier cannot be deferred"),
    "reward_endpoints": (_reward_endpoints, "reward_model.uri: no host in 'http:///score'"),
}


def _load(spec: Path, name: str) -> Environment:
    return load_environment(spec, purpose="run", defer_expensive=name == "deferrable")


def test_the_checks_run_in_order_and_each_purpose_says_which() -> None:
    assert [check.name for check in ENV_CHECKS] == [
        "extras",
        "inputs_file",
        "snapshot",
        "cassette_files",
        "reward_model_files",
        "inputs",
        "verifiers_apply",
        "gold",
        "train_inputs",
        "importable",
        "policy_importable",
        "signatures",
        "cassette_secrets",
        "leakage",
        "deferrable",
        "reward_endpoints",
        "system_packages",
        "seeds_matter",
    ]
    assert all(check.description for check in ENV_CHECKS)
    names = {purpose: [c.name for c in checks_for(purpose)] for purpose in rlenv.env.PURPOSES}
    assert "cassette_files" not in names["record"] and "cassette_secrets" not in names["record"]
    assert "cassette_files" not in names["probe"] and "cassette_secrets" not in names["probe"]
    # the probe used to skip these two
    assert "importable" in names["probe"] and "leakage" in names["probe"]
    # what `record` needs of the machine: validate says it too, run (replay) does not need it
    assert names["record"][-2:] == ["system_packages", "seeds_matter"]
    validated = [name for name in names["validate"] if name != "system_packages"]
    assert validated == [name for name in names["run"] if name != "deferrable"]
    assert names["grade"] == [name for name in validated if name != "policy_importable"]
    with pytest.raises(ValueError):
        checks_for("train")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_check_refuses_its_broken_spec(env_builder: EnvBuilder, name: str) -> None:
    build, fragment = BROKEN[name]
    with pytest.raises(UserError) as error:
        _load(build(env_builder), name)
    assert fragment.format(module=env_builder.module) in str(error.value)


@pytest.mark.parametrize("name", list(BROKEN))
def test_every_check_is_needed(
    env_builder: EnvBuilder, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Without the check, its broken spec is not refused for that reason."""
    build, fragment = BROKEN[name]
    fragment = fragment.format(module=env_builder.module)
    spec = build(env_builder)
    monkeypatch.setattr(rlenv.env, "ENV_CHECKS", tuple(c for c in ENV_CHECKS if c.name != name))
    try:
        _load(spec, name)
    except Exception as error:  # a later step may still trip over the problem, but not this way
        assert fragment not in str(error)


def test_errors_name_the_line_of_the_field(env_builder: EnvBuilder) -> None:
    with pytest.raises(UserError) as error:
        _load(_inputs_file(env_builder), "inputs_file")
    assert error.value.where is not None
    path, line = error.value.where.rsplit(":", 1)
    spec_lines = Path(path).read_text().splitlines()
    assert spec_lines[int(line) - 1].strip().startswith("path: inputs.jsonl")


def test_a_good_spec_passes_every_purpose(env_builder: EnvBuilder) -> None:
    spec = env_builder.write(POLICY + TOOL, tools=[{"name": "lookup", "function": "MOD:lookup"}])
    prints = {
        purpose: load_environment(spec, purpose=purpose).fingerprint
        for purpose in rlenv.env.PURPOSES
    }
    env = load_environment(spec)
    assert [record.id for record in env.inputs] == ["a", "b"]
    assert set(env.file_hashes) == {"inputs"}
    assert set(prints.values()) == {env.fingerprint} and len(env.fingerprint) == 64


def test_the_specs_policy_is_checked_only_when_the_run_calls_it(env_builder: EnvBuilder) -> None:
    spec = env_builder.write("")  # the spec's own python:MOD:policy does not exist
    with pytest.raises(UserError) as error:
        load_environment(spec, purpose="run")
    assert error.value.where is not None and error.value.where.endswith(":4")  # model: line
    load_environment(spec, purpose="run", model="openai:some-model")
    load_environment(spec, purpose="grade")  # grading calls no policy
    load_environment(spec, purpose="probe")  # nor does the probe


def test_cassettes_are_not_needed_to_record_or_probe(env_builder: EnvBuilder) -> None:
    spec = _cassette_files(env_builder)
    load_environment(spec, purpose="record")
    with pytest.raises(UserError, match="fixtures not recorded yet"):
        load_environment(spec, purpose="validate")
    # a pinned cassette that is gone was recorded once: not found, not "record it first"
    _rewrite(spec, lambda d: d["tools"][0]["cassette"].update(sha256="0" * 64))
    with pytest.raises(UserError, match="tools.0..cassette.path: cassette not found"):
        load_environment(spec, purpose="validate")


def test_leakage_on_warn_is_a_warning(env_builder: EnvBuilder) -> None:
    spec = _leakage(env_builder)
    _rewrite(spec, lambda d: d["reward_model"].update(on_leak="warn"))
    env = load_environment(spec, purpose="probe")
    assert env.warnings and env.warnings[0].startswith("warning: held-out leakage")
    assert set(env.file_hashes) == {"inputs", "reward_model.train_data"}


def test_an_http_reward_model_lets_its_host_through(env_builder: EnvBuilder) -> None:
    spec = env_builder.write(POLICY, reward_model={"uri": "https://rm.example:8443/score"})
    assert load_environment(spec).reward_endpoints == [("rm.example", 8443)]
    spec = env_builder.write(POLICY, reward_model={"uri": "http://rm.example/score"})
    assert load_environment(spec).reward_endpoints == [("rm.example", 80)]


def test_deferring_is_checked_only_when_asked(env_builder: EnvBuilder) -> None:
    spec = _deferrable(env_builder)
    load_environment(spec, purpose="run")
    with pytest.raises(UserError, match="cannot be deferred"):
        load_environment(spec, purpose="run", defer_expensive=True)


# ------------------------------------------------------------------------------- seeds matter


def test_seeds_matter_passes_and_leaves_the_global_rngs_alone(env_builder: EnvBuilder) -> None:
    import random

    import numpy

    spec = env_builder.write(POLICY)
    random.seed(123)
    numpy.random.seed(123)
    expected = random.random(), numpy.random.random()
    random.seed(123)
    numpy.random.seed(123)
    load_environment(spec)
    assert (random.random(), numpy.random.random()) == expected


def test_seeds_matter_refuses_rollouts_that_share_a_seed(
    env_builder: EnvBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = env_builder.write(POLICY)
    monkeypatch.setattr(rlenv.env, "derive_seed", lambda env_seed, *parts: env_seed)
    with pytest.raises(UserError, match="rollouts 0 and 1 of input 'a' got the same random state"):
        load_environment(spec)
    monkeypatch.setattr(
        rlenv.env, "ENV_CHECKS", tuple(c for c in ENV_CHECKS if c.name != "seeds_matter")
    )
    load_environment(spec)


def test_seeds_matter_refuses_seeding_that_does_not_take(
    env_builder: EnvBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = env_builder.write(POLICY)
    monkeypatch.setattr(rlenv.env, "seed_everything", lambda seed: None)
    with pytest.raises(UserError, match="the same rollout seed gave different random draws"):
        load_environment(spec)
