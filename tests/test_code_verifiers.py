"""Code-executing verifiers through the runner: model-written code runs in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlenv.sandbox import probe_mechanism
from tests.conftest import EnvBuilder, cli, read_jsonl

ANSWERS = {
    "good": "def add(a, b):\n    return a + b\n",
    "wrong": "def add(a, b):\n    return a - b\n",
    "peek": "import pathlib\nGOLD = pathlib.Path({gold!r}).read_text()\n"
    "def add(a, b):\n    return a + b\n",
    "net": "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    "def add(a, b):\n    return a + b\n",
    "loop": "while True:\n    pass\n",
}

POLICY = """
import json
ANSWERS = json.loads({answers!r})
def policy(messages, tools, ctx):
    return "```python\\n" + ANSWERS[messages[-1]["content"]] + "```"
"""


@pytest.mark.skipif(probe_mechanism() == "rlimits", reason="no bubblewrap or unshare here")
def test_python_tests_verifier_in_the_sandbox(env_builder: EnvBuilder, tmp_path: Path) -> None:
    gold = tmp_path / "gold.txt"
    gold.write_text("the hidden answer")
    answers = {key: value.format(gold=str(gold)) for key, value in ANSWERS.items()}
    tests = "from solution import add\nassert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
    spec = env_builder.write(
        POLICY.format(answers=json.dumps(answers)),
        inputs=[{"id": key, "prompt": key, "tests": tests} for key in answers],
        verifiers=[
            {
                "name": "unit",
                "type": "python_tests",
                "expected_field": "tests",
                "options": {"cpu_seconds": 2, "wall_seconds": 5, "memory_mb": 256},
            }
        ],
        rollouts=1,
    )
    result = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["world"]["sandbox"] in ("bwrap", "unshare")
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    assert records["good"]["passed"] is True
    for escape in ("wrong", "peek", "net", "loop"):
        assert records[escape]["passed"] is False, (escape, records[escape]["verifiers"])
        assert records[escape]["status"] == "ok"  # a verifier failure, not a crash
    again = cli("run", str(spec), "--out", str(tmp_path / "again"), "--json")
    assert json.loads(again.stdout)["digest"] == summary["digest"]
