"""A worker's private /tmp and $HOME (issue 26) are given a fresh layer after a call that wrote
there. A user who starts `rlenv run` from a directory under /tmp or $HOME (the usual place) must
not lose the later rollouts to it: the worker's own working directory was on the layer the
renewal took away, and every later rollout failed with FileNotFoundError."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EnvBuilder, cli, read_jsonl

CODE = """
import tempfile

def policy(messages, tools, ctx):
    with tempfile.NamedTemporaryFile("w", delete=False) as handle:  # /tmp: renewed after the call
        handle.write("scratch")
    return "done"
"""


def test_rollouts_after_a_renewal_run_from_a_directory_under_tmp(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    inputs = [{"id": f"q{n}", "prompt": "go", "answer": "done"} for n in range(3)]
    spec = env_builder.write(CODE, inputs=inputs, rollouts=2)
    here = tmp_path / "where-the-user-is"  # under /tmp, which a worker overlays
    here.mkdir()
    done = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json", cwd=here)
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert [r["status"] for r in records] == ["ok"] * 6, [r["error"] for r in records]
    assert json.loads(done.stdout)["pass_rate"]["value"] == 1.0
