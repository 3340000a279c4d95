"""The env fingerprint covers what the env's code can read: every file under its python package
directories (a helper loaded with `importlib.import_module`, a data file a verifier opens when
called) and every file its modules open while the checks import them. Attack: edit one of
those between a run and its `--resume`; the resume must refuse (one run, one verifier)."""

from __future__ import annotations

from pathlib import Path

from rlenv.env import load_environment
from tests.call_time_files import assert_resume_refuses_each_edit, call_time_env
from tests.conftest import EnvBuilder


def _dynamic_env(builder: EnvBuilder) -> Path:
    """The verifier in package `dynpkg` reaches its helper and its data only at call time."""
    return call_time_env(builder, "dynpkg")


def test_resume_refuses_an_edited_file_the_verifier_reaches_at_call_time(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = _dynamic_env(env_builder)
    package = env_builder.root / "dynpkg"
    edited = [package / "helper_dyn.py", package / "gold.txt"]
    assert_resume_refuses_each_edit(spec, tmp_path / "run", edited)


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
