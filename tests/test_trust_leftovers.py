"""Trust leftovers of issue #26: each test is an attack that held against main before its fix.

- The checking child imports the installed rlenv, never a decoy `rlenv/` in the user's cwd.
- The fingerprint covers a data file or helper a flat-layout env module names by a string
  (opened or imported at call time), so `--resume` refuses after such a file is edited.
"""

from __future__ import annotations

from pathlib import Path

from rlenv.env import load_environment
from tests.call_time_files import POLICY, assert_resume_refuses_each_edit, call_time_env
from tests.conftest import EnvBuilder, cli

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


def _flat_env(builder: EnvBuilder) -> Path:
    """A flat-layout verifier beside the spec: its helper and its data reached by name at call
    time."""
    return call_time_env(builder, None)


def test_resume_refuses_an_edited_flat_layout_file_reached_at_call_time(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = _flat_env(env_builder)
    edited = [env_builder.root / "flat_helper_dyn.py", env_builder.root / "flat_gold.txt"]
    assert_resume_refuses_each_edit(spec, tmp_path / "run", edited)


def test_flat_layout_fingerprint_is_the_same_for_every_command(env_builder: EnvBuilder) -> None:
    spec = _flat_env(env_builder)
    prints = {
        purpose: load_environment(spec, purpose=purpose).fingerprint
        for purpose in ("validate", "run", "grade")
    }
    assert len(set(prints.values())) == 1, prints
    (env_builder.root / "unrelated.txt").write_text("not named by env code")
    assert load_environment(spec, purpose="validate").fingerprint == prints["validate"]
