"""The env fingerprint covers what the env's code can read: every file under its python package
directories (a helper loaded with `importlib.import_module`, a data file a verifier opens when
called) and every file its modules open while the checks import them. Attack: edit one of
those between a run and its `--resume`; the resume must refuse (one run, one verifier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlenv.env import load_environment
from tests.conftest import EnvBuilder, cli

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""
# the verifier reaches its helper and its data only at call time, by name: no import statement
VERIFIER = """
import importlib
from pathlib import Path

def check(answer, input, ctx):
    helper = importlib.import_module("dynpkg.helper_dyn")
    gold = (Path(__file__).parent / "gold.txt").read_text().split()
    return helper.same(answer, input["answer"]) and answer in gold
"""
HELPER = """
def same(answer, expected):
    return answer == expected
"""


def _dynamic_env(builder: EnvBuilder) -> Path:
    package = builder.root / "dynpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "verify.py").write_text(VERIFIER)
    (package / "helper_dyn.py").write_text(HELPER)
    (package / "gold.txt").write_text("a b\n")
    return builder.write(
        POLICY, rollouts=1, verifiers=[{"type": "python", "function": "dynpkg.verify:check"}]
    )


@pytest.mark.parametrize("edited", ["dynpkg/helper_dyn.py", "dynpkg/gold.txt"])
def test_resume_refuses_an_edited_file_the_verifier_reaches_at_call_time(
    env_builder: EnvBuilder, tmp_path: Path, edited: str
) -> None:
    spec = _dynamic_env(env_builder)
    out = tmp_path / "run"
    first = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1")
    assert first.returncode == 0, first.stderr
    same = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", "--resume")
    assert same.returncode == 0, same.stderr  # the control: nothing edited, the resume goes on
    path = env_builder.root / edited
    path.write_text(path.read_text() + "\n# edited: now a different verifier\n")
    resumed = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", "--resume")
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "fingerprint" in resumed.stderr and "Traceback" not in resumed.stderr


def test_fingerprint_changes_with_every_file_under_the_package(env_builder: EnvBuilder) -> None:
    spec = _dynamic_env(env_builder)
    original = load_environment(spec, purpose="validate").fingerprint
    assert load_environment(spec, purpose="validate").fingerprint == original
    for name in ("helper_dyn.py", "gold.txt", "__init__.py", "verify.py"):
        path = env_builder.root / "dynpkg" / name
        saved = path.read_bytes()
        path.write_bytes(saved + b"\n")
        assert load_environment(spec, purpose="validate").fingerprint != original, name
        path.write_bytes(saved)
    added = env_builder.root / "dynpkg" / "extra" / "more.json"
    added.parent.mkdir()
    added.write_text("{}")
    assert load_environment(spec, purpose="validate").fingerprint != original
    added.unlink()
    cache = env_builder.root / "dynpkg" / "__pycache__"  # bytecode is not env content
    cache.mkdir(exist_ok=True)
    (cache / "verify.cpython-311.pyc").write_bytes(b"\0junk")
    assert load_environment(spec, purpose="validate").fingerprint == original
