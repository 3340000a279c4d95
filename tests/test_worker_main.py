"""A training script that calls rlenv is not run again inside its frozen-world workers.

multiprocessing's spawn runs the parent's ``__main__`` file again in each child (as
``__mp_main__``). A script that calls rlenv without an ``if __name__ == "__main__"`` guard (a
TRL training script with rlenv's callback, a notebook exported to a file) ran again in every
worker: its module-level code (training, writing files) repeated there, and the run failed;
a script piped on stdin could not start a worker at all (``<stdin>`` is no file).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, EnvBuilder

POLICY = "def policy(messages, tools, ctx):\n    return messages[-1]['content'].split()[-1]\n"

SCRIPT = """\
import json, os
with open({marker!r}, "a") as marker:  # module-level work, as a training script has
    marker.write(f"{{os.getpid()}}\\n")
from rlenv.runner import RunSettings, run
result = run({spec!r}, RunSettings(out={out!r}, concurrency=2))
print(json.dumps({{"digest": result.summary["digest"], "rollouts": result.summary["rollouts"]}}))
"""


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_an_unguarded_script_runs_once_and_its_run_finishes(
    env_builder: EnvBuilder, tmp_path: Path, how: str
) -> None:
    spec = env_builder.write(POLICY)
    marker = tmp_path / "marker.txt"
    out = tmp_path / "out"
    script = SCRIPT.format(marker=str(marker), spec=str(spec), out=str(out))
    if how == "file":
        path = tmp_path / "train.py"
        path.write_text(script)
        command, given = [sys.executable, str(path)], None
    else:
        command, given = [sys.executable, "-"], script
    result = subprocess.run(
        command,
        input=given,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        stdin=None if given is not None else subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(marker.read_text().splitlines()) == 1, "the script ran again in a worker"
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["rollouts"] == 4
