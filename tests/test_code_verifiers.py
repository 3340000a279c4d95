"""Code-executing verifiers through the runner: model-written code runs in the sandbox."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlenv.sandbox import probe_mechanism
from tests.conftest import EnvBuilder, cli, needs, read_jsonl

ANSWERS = {
    "good": "def add(a, b):\n    return a + b\n",
    "wrong": "def add(a, b):\n    return a - b\n",
    # the escapes are correct solutions that also peek at the gold or connect out: they pass
    # unless the sandbox stops the peek or the connection (see the control run below)
    "peek": "import pathlib\nGOLD = pathlib.Path({gold!r}).read_text()\n"
    "def add(a, b):\n    return a + b\n",
    "net": "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
    "def add(a, b):\n    return a + b\n",
    "loop": "while True:\n    pass\n",
}
TESTS = "from solution import add\nassert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
# why each escape must fail inside the sandbox: the file is absent from its view (not merely
# unreadable), the loopback server is in another network namespace
ISOLATION_ERRORS = {
    "peek": ("FileNotFoundError",),
    "net": ("Network is unreachable", "ConnectionRefusedError"),
}

POLICY = """
import json
ANSWERS = json.loads({answers!r})
def policy(messages, tools, ctx):
    return "```python\\n" + ANSWERS[messages[-1]["content"]] + "```"
"""


@pytest.fixture
def gold() -> Iterator[Path]:
    """A gold answer any host uid can read (world-readable dir under /tmp, not pytest's 0700
    tmp_path), so only the sandbox's isolation can keep the code from it."""
    folder = Path(tempfile.mkdtemp(prefix="rlenv-gold-"))
    folder.chmod(0o755)
    answer = folder / "gold.txt"
    answer.write_text("the hidden answer")
    answer.chmod(0o644)
    yield answer
    shutil.rmtree(folder)


@pytest.fixture
def server() -> Iterator[socket.socket]:
    """A listening loopback server on the host (port 9 was simply closed: any run failed)."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)
    yield listening
    listening.close()


def control_run(code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """The same solution and tests on the host, outside any sandbox."""
    folder.mkdir()
    (folder / "solution.py").write_text(code)
    (folder / "test_solution.py").write_text(TESTS)
    return subprocess.run(
        [sys.executable, "-s", "test_solution.py"],
        cwd=folder,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def accepted(server: socket.socket) -> int:
    """How many connections are waiting on the server (accepted and closed here)."""
    server.setblocking(False)
    count = 0
    while True:
        try:
            connection, _ = server.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


@needs(probe_mechanism() != "rlimits", "a namespace sandbox (bubblewrap or unshare)")
def test_python_tests_verifier_in_the_sandbox(
    env_builder: EnvBuilder, tmp_path: Path, gold: Path, server: socket.socket
) -> None:
    port = server.getsockname()[1]
    answers = {key: value.format(gold=str(gold), port=port) for key, value in ANSWERS.items()}
    for escape in ("peek", "net"):  # control: outside the sandbox each escape works and passes
        control = control_run(answers[escape], tmp_path / f"control-{escape}")
        assert control.returncode == 0, (escape, control.stderr)
    assert accepted(server) == 1, "the control run reached the loopback server"
    spec = _unit_tested(
        env_builder, answers, {"cpu_seconds": 2, "wall_seconds": 5, "memory_mb": 256}, 1
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
    for escape, errors in ISOLATION_ERRORS.items():  # ... and they failed because of isolation
        detail = records[escape]["verifiers"][0]["detail"] or ""
        assert any(error in detail for error in errors), (escape, detail)
    assert accepted(server) == 0, "nothing from inside the sandbox reached the server"
    again = cli("run", str(spec), "--out", str(tmp_path / "again"), "--json")
    assert json.loads(again.stdout)["digest"] == summary["digest"]


def _unit_tested(
    env_builder: EnvBuilder, answers: dict[str, str], options: dict[str, Any], rollouts: int
) -> Path:
    """An env whose policy gives `answers` (by input id), each graded by a python_tests
    verifier with sandbox `options`."""
    return env_builder.write(
        POLICY.format(answers=json.dumps(answers)),
        inputs=[{"id": key, "prompt": key, "tests": TESTS} for key in answers],
        verifiers=[
            {"name": "unit", "type": "python_tests", "expected_field": "tests", "options": options}
        ],
        rollouts=rollouts,
    )


DOUBLER = """
def policy(messages, tools, ctx):
    return "```python\\nprint(int(input()) * 2)\\n```"
"""


def test_allow_weak_sandbox_flag_on_run_and_resume(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """With only rlimits (forced here by RLENV_SANDBOX), code verifiers refuse to run; the
    --allow-weak-sandbox flag lets them, is recorded in run.json (it changes results) and must
    be given again to --resume."""
    spec = env_builder.write(
        DOUBLER,
        inputs=[{"id": "a", "prompt": "double", "tests": [{"stdin": "2", "expected_stdout": "4"}]}],
        verifiers=[{"type": "program_cases", "expected_field": "tests"}],
        rollouts=1,
    )
    env = {"RLENV_SANDBOX": "rlimits", "RLENV_ALLOW_WEAK_SANDBOX": ""}
    refused = cli("run", str(spec), "--out", str(tmp_path / "refused"), "--json", env=env)
    # the verifier refused on every rollout: a failing part, so the run fails (exit 1)
    assert refused.returncode == 1 and "refusing to run model code" in refused.stderr
    assert json.loads(refused.stdout)["world"]["sandbox"] == "rlimits"
    detail = read_jsonl(tmp_path / "refused" / "results.jsonl")[0]["verifiers"][0]["detail"]
    assert "refusing to run model code with no namespace sandbox" in detail
    assert "--allow-weak-sandbox" in detail
    assert "allow_weak_sandbox" not in json.loads((tmp_path / "refused" / "run.json").read_text())

    out = tmp_path / "allowed"
    allowed = cli("run", str(spec), "--out", str(out), "--json", "--allow-weak-sandbox", env=env)
    assert allowed.returncode == 0, allowed.stderr
    detail = read_jsonl(out / "results.jsonl")[0]["verifiers"][0]["detail"]
    assert "refusing" not in detail  # it ran (as root the interpreter may be closed to it)
    assert json.loads((out / "run.json").read_text())["allow_weak_sandbox"] is True
    resumed = cli("run", str(spec), "--out", str(out), "--resume", env=env)
    assert resumed.returncode == 2
    assert "allow_weak_sandbox" in resumed.stderr and len(resumed.stderr.splitlines()) == 1


@needs(probe_mechanism() != "rlimits", "a namespace sandbox (bubblewrap or unshare)")
def test_a_sandboxed_program_may_start_while_the_run_has_many_workers(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The sandbox runs model code as nobody with RLIMIT_NPROC, which counts every process of
    that real uid on the machine. Each worker's template process ran as nobody too: with as
    many workers as the verifier's `max_processes`, the sandboxed program could not exec
    ("hit the processes limit") and every good answer failed."""
    spec = _unit_tested(
        env_builder,
        {"good": ANSWERS["good"]},
        {"cpu_seconds": 2, "wall_seconds": 10, "max_processes": 4},
        3,
    )
    result = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json", "--workers", "4")
    assert result.returncode == 0, result.stderr
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert [r["passed"] for r in records] == [True] * 3, [r["verifiers"] for r in records]
