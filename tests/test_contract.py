"""Issue 18 items 4, 5 and 8: pinning in one step, every problem listed, JSON errors under
--json, the spec's JSON Schema from the code, and an env fingerprint that is the env's (the
default policy's source is the model's identity)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from rlenv.env import load_environment, policy_sources
from tests.conftest import ROOT, EnvBuilder, cli, sha256

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""


def _env_with_comments(tmp_path: Path) -> Path:
    """A spec in block and flow style with comments, missing and stale hashes."""
    root = tmp_path / "env"
    (root / "snap").mkdir(parents=True)
    (root / "snap" / "a.txt").write_text("a\n")
    (root / "inputs.jsonl").write_text('{"id": "a", "prompt": "say a", "answer": "a"}\n')
    (root / "tape.yaml").write_text("interactions: []\nversion: 1\n")
    (root / "pinmod.py").write_text(POLICY + "\ndef tool(args, ctx):\n    return 'x'\n")
    spec = root / "env.yaml"
    spec.write_text(
        "# my env: keep this comment\n"
        "name: pin-me\n"
        "seed: 3\n"
        "time: '2024-03-01T12:00:00+00:00'\n"
        "model: python:pinmod:policy\n"
        "inputs:\n"
        "  path: inputs.jsonl   # held out\n"
        "snapshot: {path: snap, sha256: " + "0" * 64 + "}  # stale\n"
        "tools:\n"
        "  - name: t\n"
        "    function: pinmod:tool\n"
        "    cassette:\n"
        "      # recorded by hand\n"
        "      path: tape.yaml\n"
        "      sha256: '" + "1" * 64 + "'\n"
        "verifiers: [{type: exact_match, expected_field: answer}]\n"
    )
    return spec


def test_pin_writes_every_hash_at_once_and_keeps_the_rest_of_the_file(tmp_path: Path) -> None:
    spec = _env_with_comments(tmp_path)
    before = spec.read_text()
    problems = cli("validate", str(spec))
    assert problems.returncode == 2 and "inputs.sha256" in problems.stderr

    check = cli("pin", str(spec), "--check")
    assert check.returncode == 1, check.stderr
    assert spec.read_text() == before  # --check changes nothing

    pinned = cli("pin", str(spec))
    assert pinned.returncode == 0, pinned.stderr
    assert "3 hash(es)" in pinned.stdout
    after = spec.read_text()
    assert "# my env: keep this comment" in after and "# held out" in after
    assert "# recorded by hand" in after and "# stale" in after
    document = yaml.safe_load(after)
    root = spec.parent
    assert document["inputs"]["sha256"] == sha256(root / "inputs.jsonl")
    assert document["tools"][0]["cassette"]["sha256"] == sha256(root / "tape.yaml")
    assert document["snapshot"]["sha256"] != "0" * 64
    # only hash values changed: the same lines, save the one added under inputs.path
    assert len(after.splitlines()) == len(before.splitlines()) + 1

    valid = cli("validate", str(spec))
    assert valid.returncode == 0, valid.stderr
    again = cli("pin", str(spec), "--check")
    assert again.returncode == 0 and "every hash is pinned" in again.stdout
    assert spec.read_text() == after


def test_pin_lists_every_missing_file_and_writes_nothing(tmp_path: Path) -> None:
    spec = _env_with_comments(tmp_path)
    (spec.parent / "inputs.jsonl").unlink()
    shutil.rmtree(spec.parent / "snap")
    before = spec.read_text()
    result = cli("pin", str(spec))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert "inputs.path: file not found" in lines[0] and "env.yaml:7" in lines[0]
    assert "snapshot.path: directory not found" in lines[1]
    assert "Traceback" not in result.stderr
    assert spec.read_text() == before


def test_validate_lists_all_problems_and_json_errors_are_json(
    env_builder: EnvBuilder,
) -> None:
    spec = env_builder.write(POLICY, rollouts=0, seed="x")
    result = cli("validate", str(spec))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "(and" not in result.stderr, result.stderr
    assert any("rollouts" in line for line in lines) and any("seed" in line for line in lines)

    as_json = cli("validate", str(spec), "--json")
    assert as_json.returncode == 2
    error = json.loads(as_json.stdout)["error"]
    assert error["exit_code"] == 2 and len(error["problems"]) == 2


def test_validate_goes_on_after_a_failed_check(env_builder: EnvBuilder) -> None:
    """A stale inputs hash and a tool that does not import are both reported, in check order;
    checks that need the failed inputs (leakage, seeds) are skipped, not reported twice."""
    spec = env_builder.write(POLICY, tools=[{"name": "t", "function": "MOD:missing_tool"}])
    document = yaml.safe_load(spec.read_text())
    document["inputs"]["sha256"] = "2" * 64
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    result = cli("validate", str(spec))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert "inputs.sha256: hash mismatch" in lines[0]
    assert "missing_tool" in lines[1]


def test_schema_is_generated_from_the_code_and_accepts_the_bundled_specs(tmp_path: Path) -> None:
    result = cli("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for spec in sorted((ROOT / "envs").glob("*.yaml")):
        document = yaml.safe_load(spec.read_text())
        assert not list(validator.iter_errors(json.loads(json.dumps(document, default=str))))
    bad = {"name": "x", "seed": 1, "time": "2024-01-01T00:00:00Z", "rollouts": 0}
    assert list(validator.iter_errors(bad))  # no inputs, rollouts < 1
    out = tmp_path / "schema.json"
    assert cli("schema", "--out", str(out)).returncode == 0
    assert json.loads(out.read_text()) == schema


def test_default_policy_is_the_models_identity_not_the_envs(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Editing the default policy (even a comment) keeps the env fingerprint, changes the
    model's recorded sources, and --resume refuses it naming the model; editing what a tool
    imports changes the fingerprint."""
    spec = env_builder.write(
        POLICY + "\nimport helper_tool\n\ndef tool(args, ctx):\n    return helper_tool.X\n",
        tools=[{"name": "t", "function": "MOD:tool"}],
    )
    root = env_builder.root
    policy_module = root / "policy_only.py"
    policy_module.write_text("import policy_helper\n" + POLICY + "\nother = policy\n")
    (root / "policy_helper.py").write_text("Y = 1\n")
    (root / "helper_tool.py").write_text("X = 'x'\n")
    document = yaml.safe_load(spec.read_text())
    document["model"] = "python:policy_only:policy"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))

    loaded = load_environment(spec, purpose="run")
    original = loaded.fingerprint
    sources = policy_sources(loaded.loaded, "python:policy_only:policy")
    assert set(sources) == {"policy_only", "policy_helper"}

    out = tmp_path / "run"
    first = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1")
    assert first.returncode == 0, first.stderr
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["model"]["sources"] == sources

    for edited in (policy_module, root / "policy_helper.py"):
        edited.write_text(edited.read_text() + "\n# a comment\n")
        assert load_environment(spec, purpose="run").fingerprint == original, edited.name
    resumed = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", "--resume")
    assert resumed.returncode == 2
    assert "model" in resumed.stderr and "fingerprint" not in resumed.stderr

    # the spec's model/reference fields are the policy's too
    document["model"] = "python:policy_only:other"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    assert load_environment(spec, purpose="validate").fingerprint == original

    (root / "helper_tool.py").write_text("X = 'y'\n")
    assert load_environment(spec, purpose="validate").fingerprint != original


@pytest.mark.parametrize("name", ["file_edit", "search"])
def test_bundled_specs_are_pinned(name: str) -> None:
    result = cli("pin", str(ROOT / "envs" / f"{name}.yaml"), "--check")
    assert result.returncode == 0, result.stdout + result.stderr
