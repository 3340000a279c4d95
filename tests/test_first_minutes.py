"""Issue 28 item 6: the first ten minutes of a new env. `record` works on a fresh spec (no
hashes, no cassettes yet: it pins the files that exist, writes the cassettes and pins them);
`pin` tolerates the cassettes `record` will write and says so; `validate` prints the hash a
missing pin should hold; an empty cassette is a clear message; `validate` names a missing
system package `record` needs; one signature per kind of callable in the schema, the README and
the signature checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rlenv.canonical import sha256_file
from rlenv.errors import UserError
from tests.conftest import ROOT, EnvBuilder, cli, require_tool

QUESTIONS = ROOT / "fixtures/search/questions.jsonl"


def _fresh_search_env(tmp_path: Path) -> Path:
    """The bundled search env as a new user writes it: no sha256 anywhere, no cassette yet."""
    env_dir = tmp_path / "envs"
    shutil.copytree(ROOT / "envs" / "search_env", env_dir / "search_env")
    document = yaml.safe_load((ROOT / "envs/search.yaml").read_text())
    document["inputs"] = {"path": str(QUESTIONS)}
    document["tools"][0]["cassette"] = {"path": "cassettes/search.yaml"}
    command = document["services"][0]["command"]
    command[command.index("--corpus") + 1] = str(ROOT / "fixtures/search/corpus.jsonl")
    document.pop("reward_model")
    document.pop("train_inputs")  # the held-out split is enough here (and records faster)
    spec = env_dir / "search.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


def test_validate_prints_the_hash_a_missing_pin_should_hold(tmp_path: Path) -> None:
    spec = _fresh_search_env(tmp_path)
    done = cli("validate", str(spec))
    assert done.returncode == 2
    assert (
        f"inputs.sha256: required field is missing; {QUESTIONS} has sha256"
        f" {sha256_file(QUESTIONS)} (`rlenv pin {spec}` writes it)"
    ) in done.stderr


def test_pin_tolerates_the_cassettes_record_will_write(tmp_path: Path) -> None:
    spec = _fresh_search_env(tmp_path)
    done = cli("pin", str(spec))
    assert done.returncode == 0, done.stderr
    assert (
        "waiting tools[0].cassette: cassettes/search.yaml does not exist yet; `rlenv record`"
        " writes it"
    ) in done.stdout
    assert f"sha256: {sha256_file(QUESTIONS)}" in spec.read_text()


def test_record_works_on_a_fresh_spec_and_pins_what_it_wrote(tmp_path: Path) -> None:
    require_tool("faketime")
    spec = _fresh_search_env(tmp_path)
    recorded = cli("record", str(spec), "--limit", "2", "--rollouts", "1")
    assert recorded.returncode == 0, recorded.stderr
    cassette = spec.parent / "cassettes" / "search.yaml"
    assert f"pinned inputs.sha256 {sha256_file(QUESTIONS)}" in recorded.stdout
    assert f"pinned tools[0].cassette.sha256 {sha256_file(cassette)}" in recorded.stdout
    validated = cli("validate", str(spec))
    assert validated.returncode == 0, validated.stderr
    run = cli("run", str(spec), "--limit", "2", "--rollouts", "1", "--out", str(tmp_path / "r"))
    assert run.returncode == 0, run.stderr


def test_an_empty_cassette_is_a_clear_message(tmp_path: Path) -> None:
    spec = _fresh_search_env(tmp_path)
    cassette = spec.parent / "cassettes" / "search.yaml"
    cassette.parent.mkdir()
    cassette.write_text("")
    assert cli("pin", str(spec)).returncode == 0
    done = cli("validate", str(spec))
    assert done.returncode == 2
    assert (
        "cassette cannot be read: the file is empty (no recorded interactions); write it with"
        " `rlenv record`" in done.stderr
    )
    assert "CassetteNotFoundError" not in done.stderr


def test_validate_names_a_missing_system_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine without libfaketime (its probe says so), a spec with services is refused
    by validate, naming the package, before `record` would fail on it."""
    import rlenv.sandbox.faketime
    from rlenv.env import load_environment

    spec = _fresh_search_env(tmp_path)
    document = yaml.safe_load(spec.read_text())
    document["tools"][0]["cassette"] = {"path": str(ROOT / "fixtures/search/cassettes/search.yaml")}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    assert cli("pin", str(spec)).returncode == 0
    assert cli("validate", str(spec)).returncode == 0  # libfaketime is there
    monkeypatch.setattr(rlenv.sandbox.faketime, "faketime_library", lambda: None)
    with pytest.raises(UserError, match="libfaketime is not installed.*apt-get install faketime"):
        load_environment(spec, purpose="validate", world_checks="here")
    load_environment(spec, purpose="run", world_checks="here")  # replay needs no services


def test_one_signature_per_kind_of_callable(env_builder: EnvBuilder) -> None:
    from rlenv.spec import CALLABLES, json_schema, signature

    schema = json.dumps(json_schema())
    readme = (ROOT / "README.md").read_text().replace("\\|", "|")
    for kind, (call, _) in CALLABLES.items():
        assert json.dumps(signature(kind))[1:-1] in schema, kind
        assert f"`{call}`" in readme, kind
    # the checks say the same: a reward component with the wrong signature
    code = (
        "def policy(messages, tools, ctx):\n    return 'a'\n\n\n"
        "def brevity(answer):\n    return 1\n"
    )
    spec = env_builder.write(code)
    document = yaml.safe_load(spec.read_text())
    document["reward"] = {"components": {"short": {"function": f"{env_builder.module}:brevity"}}}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    done = cli("validate", str(spec))
    assert done.returncode == 2
    assert f"expected {signature('reward_component')}" in done.stderr
    assert "reward.components.short.function" in done.stderr
