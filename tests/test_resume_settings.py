"""`--resume` refuses a run directory started with other settings (issue 27: mutants that let
a changed `decoding` or `rollouts_per_input` through survived the suite): through the real CLI,
exit 2, the changed field named, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EnvBuilder, cli

POLICY = "def policy(messages, tools, ctx):\n    return 'x'\n"


def _started(env_builder: EnvBuilder, tmp_path: Path) -> tuple[Path, Path, bytes]:
    spec = env_builder.write(POLICY, rollouts=2)
    out = tmp_path / "run"
    first = cli("run", str(spec), "--out", str(out), "--limit", "1")
    assert first.returncode == 0, first.stderr
    return spec, out, (out / "results.jsonl").read_bytes()


def test_resume_refuses_other_rollouts_per_input(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec, out, results = _started(env_builder, tmp_path)
    again = cli("run", str(spec), "--out", str(out), "--limit", "1", "--resume", "--rollouts", "3")
    assert again.returncode == 2, again.stderr
    assert "different rollouts_per_input (2 then, 3 now)" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    assert (out / "results.jsonl").read_bytes() == results
    same = cli("run", str(spec), "--out", str(out), "--limit", "1", "--resume", "--rollouts", "2")
    assert same.returncode == 0, same.stderr


def test_resume_refuses_other_decoding(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """A changed spec also changes the env fingerprint, named first; so the earlier run's
    run.json is given another decoding under the same fingerprint: decoding is itself a
    setting `--resume` compares, not only through the fingerprint."""
    spec, out, results = _started(env_builder, tmp_path)
    meta = json.loads((out / "run.json").read_text())
    for field, value in (("temperature", 0.25), ("seed", 12345), ("max_tokens", 7)):
        earlier = {**meta, "decoding": {**meta["decoding"], field: value}}
        (out / "run.json").write_text(json.dumps(earlier))
        again = cli("run", str(spec), "--out", str(out), "--limit", "1", "--resume")
        assert again.returncode == 2, again.stderr
        assert f"different decoding.{field} ({value} then," in again.stderr, again.stderr
        assert (out / "results.jsonl").read_bytes() == results
    (out / "run.json").write_text(json.dumps(meta))
    same = cli("run", str(spec), "--out", str(out), "--limit", "1", "--resume")
    assert same.returncode == 0, same.stderr
