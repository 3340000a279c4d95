"""Issue 28 item 5: envs that compose. ``extends: base.yaml`` with overrides (mappings merged,
lists replaced) and ``--set key=value`` on run/validate/record/pin; a variant is a few lines and
shares its base's pinned files; pinning one variant leaves its siblings valid; a bad
``extends`` (missing file, cycle) is one line and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlenv.canonical import sha256_file
from rlenv.spec import load_spec
from rlenv.spec_compose import deep_merge, parse_sets
from tests.conftest import EnvBuilder, cli

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""


def _variant(env_dir: Path, filename: str, **fields: object) -> Path:
    path = env_dir / filename
    path.write_text(yaml.safe_dump({"extends": "env.yaml", **fields}, sort_keys=False))
    return path


def test_merge_mappings_deeply_and_replace_lists() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": [{"x": 1}]}
    assert deep_merge(base, {"a": {"c": [3]}, "d": []}) == {"a": {"b": 1, "c": [3]}, "d": []}
    assert parse_sets(["decoding.temperature=0.5", "name=x", "rollouts=3"]) == {
        "decoding": {"temperature": 0.5},
        "name": "x",
        "rollouts": 3,
    }


def test_a_variant_is_a_few_lines_and_shares_the_base_files(env_builder: EnvBuilder) -> None:
    base = env_builder.write(POLICY, decoding={"temperature": 0.0, "max_tokens": 64})
    variant = _variant(base.parent, "hot.yaml", name="test-env-hot", decoding={"temperature": 1})
    loaded = load_spec(variant)
    assert loaded.spec.name == "test-env-hot"
    assert loaded.spec.decoding.temperature == 1
    assert loaded.spec.decoding.max_tokens == 64  # merged, not replaced
    assert loaded.spec.inputs.sha256 == sha256_file(base.parent / "inputs.jsonl")
    base_fp = json.loads(cli("validate", str(base), "--json").stdout)["fingerprint"]
    done = cli("validate", str(variant), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fingerprint"] != base_fp
    run = cli("run", str(variant), "--out", str(base.parent / "run"), "--json")
    assert run.returncode == 0, run.stderr


def test_set_overrides_a_field_on_the_command_line(env_builder: EnvBuilder) -> None:
    spec = env_builder.write(POLICY)
    plain = json.loads(cli("validate", str(spec), "--json").stdout)["fingerprint"]
    once = cli("validate", str(spec), "--json", "--set", "decoding.temperature=0.7")
    again = cli("validate", str(spec), "--json", "--set", "decoding.temperature=0.7")
    assert once.returncode == 0, once.stderr
    assert json.loads(once.stdout)["fingerprint"] != plain
    assert json.loads(once.stdout)["fingerprint"] == json.loads(again.stdout)["fingerprint"]
    run = cli("run", str(spec), "--set", "rollouts=1", "--out", str(spec.parent / "r"), "--json")
    assert run.returncode == 0, run.stderr
    records = (spec.parent / "r" / "results.jsonl").read_text().splitlines()
    assert len(records) == 2  # two inputs, one rollout each (the spec says 2)
    bad = cli("validate", str(spec), "--set", "rollouts=0")
    assert bad.returncode == 2
    assert "rollouts" in bad.stderr and "Traceback" not in bad.stderr
    for pair, said in [
        ("rollouts", "expected key=value"),
        ("verifiers.0.type=x", "lists are replaced whole"),
        ("rollouts=[1", "not YAML"),
    ]:
        done = cli("validate", str(spec), "--set", pair)
        assert done.returncode == 2, pair
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_pinning_one_variant_leaves_its_siblings_valid(env_builder: EnvBuilder) -> None:
    base = env_builder.write(POLICY)
    env_dir = base.parent
    (env_dir / "other.jsonl").write_text(json.dumps({"id": "c", "prompt": "c", "answer": "c"}))
    own = _variant(env_dir, "own.yaml", inputs={"path": "other.jsonl"})
    sibling = _variant(env_dir, "sibling.yaml", rollouts=1)
    assert cli("validate", str(own)).returncode == 2  # the base's hash, another file
    done = cli("pin", str(own))
    assert done.returncode == 0, done.stderr
    assert sha256_file(env_dir / "other.jsonl") in own.read_text()  # pinned in the variant
    assert "sha256" not in sibling.read_text()
    for spec in (own, sibling, base):
        done = cli("validate", str(spec))
        assert done.returncode == 0, (spec.name, done.stderr)
    # a shared file that changed is pinned in the base, where every sibling reads it
    (env_dir / "inputs.jsonl").write_text(json.dumps({"id": "z", "prompt": "z", "answer": "z"}))
    done = cli("pin", str(sibling))
    assert done.returncode == 0, done.stderr
    assert sha256_file(env_dir / "inputs.jsonl") in base.read_text()
    assert "sha256" not in sibling.read_text()
    assert cli("validate", str(base)).returncode == 0
    assert cli("validate", str(own)).returncode == 0


@pytest.mark.parametrize(
    ("documents", "said"),
    [
        ({"a.yaml": {"extends": "missing.yaml"}}, "extends: base spec not found"),
        ({"a.yaml": {"extends": "b.yaml"}, "b.yaml": {"extends": "a.yaml"}}, "a cycle"),
        ({"a.yaml": {"extends": "a.yaml"}}, "a cycle"),
        ({"a.yaml": {"extends": 3}}, "expected the base spec's file name"),
        ({"a.yaml": {"extends": "../x/a.yaml"}}, "must be in the spec's directory"),
    ],
)
def test_a_bad_extends_is_one_line_and_exit_2(
    tmp_path: Path, documents: dict[str, dict[str, object]], said: str
) -> None:
    for name, document in documents.items():
        (tmp_path / name).write_text(yaml.safe_dump(document))
    for command in ("validate", "pin", "run"):
        done = cli(command, str(tmp_path / "a.yaml"))
        assert done.returncode == 2, (command, done.stderr)
        assert said in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
