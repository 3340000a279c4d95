"""Trust leftovers of issue #26: each test is an attack that held against main before its fix.

- The checking child imports the installed rlenv, never a decoy `rlenv/` in the user's cwd.
- The fingerprint covers a data file or helper a flat-layout env module names by a string
  (opened or imported at call time), so `--resume` refuses after such a file is edited.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlenv.env import load_environment
from tests.conftest import EnvBuilder, cli

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""

# a decoy package that answers every in-world check "no problem"
DECOY_ENV = """
import json, os, sys

def _world_child():
    request = json.loads(sys.stdin.buffer.read())
    with os.fdopen(int(request["answer_fd"]), "wb") as answer:
        answer.write(json.dumps({"checks": {}, "error": None}).encode())
"""


def test_checking_child_ignores_a_decoy_rlenv_in_the_cwd(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(
        POLICY, verifiers=[{"type": "python", "function": "MOD:no_such_function"}]
    )
    decoy = tmp_path / "cwd"
    (decoy / "rlenv").mkdir(parents=True)
    (decoy / "rlenv" / "__init__.py").write_text("")
    (decoy / "rlenv" / "env.py").write_text(DECOY_ENV)
    honest = cli("validate", str(spec))
    assert honest.returncode == 2 and "no_such_function" in honest.stderr, honest.stderr
    shadowed = cli("validate", str(spec), cwd=decoy)
    assert shadowed.returncode == 2, shadowed.stdout + shadowed.stderr
    assert "no_such_function" in shadowed.stderr and "Traceback" not in shadowed.stderr


# a flat-layout verifier beside the spec: its helper and its data reached by name at call time
FLAT_VERIFIER = """
import importlib
from pathlib import Path

import pytest

from rlenv.env import load_environment

def check(answer, input, ctx):
    helper = importlib.import_module("flat_helper_dyn")
    gold = (Path(__file__).parent / "flat_gold.txt").read_text().split()
    return helper.same(answer, input["answer"]) and answer in gold
"""
FLAT_HELPER = """
def same(answer, expected):
    return answer == expected
"""


def _flat_env(builder: EnvBuilder) -> Path:
    builder.root.mkdir(parents=True)
    (builder.root / "flat_verify.py").write_text(FLAT_VERIFIER)
    (builder.root / "flat_helper_dyn.py").write_text(FLAT_HELPER)
    (builder.root / "flat_gold.txt").write_text("a b\n")
    return builder.write(
        POLICY, rollouts=1, verifiers=[{"type": "python", "function": "flat_verify:check"}]
    )


@pytest.mark.parametrize("edited", ["flat_helper_dyn.py", "flat_gold.txt"])
def test_resume_refuses_an_edited_flat_layout_file_reached_at_call_time(
    env_builder: EnvBuilder, tmp_path: Path, edited: str
) -> None:
    spec = _flat_env(env_builder)
    out = tmp_path / "run"
    first = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1")
    assert first.returncode == 0, first.stderr
    path = env_builder.root / edited
    path.write_text(path.read_text() + "\n# edited: now a different verifier\n")
    resumed = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", "--resume")
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1 and "fingerprint" in lines[0], resumed.stderr


def test_flat_layout_fingerprint_is_the_same_for_every_command(env_builder: EnvBuilder) -> None:
    spec = _flat_env(env_builder)
    prints = {
        purpose: load_environment(spec, purpose=purpose).fingerprint
        for purpose in ("validate", "run", "grade")
    }
    assert len(set(prints.values())) == 1, prints
    (env_builder.root / "unrelated.txt").write_text("not named by env code")
    assert load_environment(spec, purpose="validate").fingerprint == prints["validate"]
