"""`rlenv check` of a run written elsewhere: a summary figure NumPy ends in another last bit
on another machine (its version, the CPU's vector unit) is no tampering; a figure moved by
more than that is. The first pin of tests/test_lines_pinned.py failed that way on an AMD EPYC
with main's own code: checked there, a run from the first machine would have been "tampered"."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EnvBuilder, cli

POLICY = """
import random

def policy(messages, tools, ctx):
    return random.choice(["a", "b", "c " * random.randrange(1, 5)])

def reward(prompt, answer, ctx):
    return len(answer or "") / 7.0
"""


def _floats(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], float]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _floats(item, (*path, key))]
    if isinstance(value, list):
        return [found for at, item in enumerate(value) for found in _floats(item, (*path, at))]
    if type(value) is float and value != int(value) and path[0] != "digest":
        return [(path, value)]
    return []


def _set(summary: dict[str, Any], path: tuple[Any, ...], value: float) -> None:
    target: Any = summary
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("floats")
    builder = EnvBuilder(root / "env")
    inputs = [{"id": f"i{n}", "prompt": f"say {n}", "answer": "a"} for n in range(6)]
    spec = builder.write(
        POLICY, inputs=inputs, rollouts=3, reward_model={"function": f"{builder.module}:reward"}
    )
    out = root / "run"
    done = cli("run", str(spec), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("moved", ["last bits", "a millionth"])
def test_a_summary_float_off_in_its_last_bits_is_no_tampering(
    run_dir: Path, tmp_path: Path, moved: str
) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    summary = json.loads((copy / "summary.json").read_text())
    floats = _floats(summary)
    assert len(floats) >= 5, floats
    for path, value in floats:
        if moved == "last bits":
            _set(summary, path, math.nextafter(math.nextafter(value, math.inf), math.inf))
        else:
            _set(summary, path, value * (1 + 1e-6))
    (copy / "summary.json").write_text(json.dumps(summary, indent=2))
    checked = cli("check", str(copy))
    if moved == "last bits":
        assert checked.returncode == 0, checked.stdout + checked.stderr
    else:
        assert checked.returncode == 1, checked.stdout + checked.stderr
        assert "recomputed from results.jsonl" in checked.stdout + checked.stderr
