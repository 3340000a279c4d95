"""The env's python modules are imported only in the frozen world, never in the orchestrator.

Attack: module-level code of an env (its package ``__init__``, its policy, tool, verifier and
reward-model modules) ran in the orchestrator when `load_environment` checked that they import
and computed the fingerprint (`importlib.util.find_spec("pkg.mod")` imports ``pkg``): there it
read the API keys the orchestrator holds (and could reach the network). Now the checks that
import env code run in a child with the world's environment (`validate`, `grade`...) or in the
run's own workers (`run`), and what they find is still one line, exit 2, naming the spec line.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cli, sha256

SECRET = "sk-world-checks-0123456789abcdef"

SPY = """\
import json, os
with open({log!r}, "a") as _log:
    _log.write(json.dumps({{"module": __name__, "key": os.environ.get("OPENAI_API_KEY")}}) + "\\n")
"""


def _env(root: Path, *, policy_tail: str = "") -> tuple[Path, Path]:
    """An env whose package, policy, tool, verifier and reward modules each log, when
    imported, the API key they can see; returns (spec, log)."""
    log = root / "imports.jsonl"
    package = root / "spyenv"
    package.mkdir(parents=True)
    spy = SPY.format(log=str(log))
    (package / "__init__.py").write_text(spy)
    (package / "policies.py").write_text(
        spy + "def policy(messages, tools, ctx):\n    return 'a'\n" + policy_tail
    )
    (package / "tools.py").write_text(spy + "def echo(arguments, ctx):\n    return 'echo'\n")
    (package / "checks.py").write_text(
        spy + "def check(answer, input, ctx):\n    return answer == input['answer']\n"
    )
    (package / "reward.py").write_text(spy + "def score(prompt, answer, ctx):\n    return 1.0\n")
    inputs = root / "inputs.jsonl"
    inputs.write_text(json.dumps({"id": "a", "prompt": "say a", "answer": "a"}) + "\n")
    spec = root / "spec.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""\
            name: spy
            seed: 1
            time: "2024-03-01T12:00:00+00:00"
            model: python:spyenv.policies:policy
            inputs: {{path: inputs.jsonl, sha256: {sha256(inputs)}}}
            tools:
              - name: echo
                description: says echo
                parameters: {{type: object, properties: {{}}}}
                function: spyenv.tools:echo
            verifiers:
              - {{type: python, function: "spyenv.checks:check"}}
            reward_model: {{function: "spyenv.reward:score"}}
            rollouts: 2
            """
        )
    )
    return spec, log


def _imports(log: Path) -> list[dict[str, str | None]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("command", ["validate", "run"])
def test_env_modules_never_run_where_the_api_key_is(tmp_path: Path, command: str) -> None:
    spec, log = _env(tmp_path / "env")
    extra = ["--out", str(tmp_path / "out"), "--json"] if command == "run" else []
    result = cli(command, str(spec), *extra, env={"OPENAI_API_KEY": SECRET})
    assert result.returncode == 0, result.stderr
    seen = _imports(log)
    modules = {entry["module"] for entry in seen}
    names = ("", ".policies", ".tools", ".checks", ".reward")
    assert modules == {f"spyenv{name}" for name in names}
    assert all(entry["key"] != SECRET for entry in seen), seen
    if command == "run":  # checked where they run anyway: no child of their own
        assert len([e for e in seen if e["module"] == "spyenv"]) <= 2  # one per worker
        assert json.loads(result.stdout)["rollouts"] == 2


@pytest.mark.parametrize(
    ("tail", "fragment"),
    [
        ("raise ImportError('no such thing here')\n", "cannot import module 'spyenv.policies'"),
        ("import sys\nsys.exit(0)\n", "importing 'spyenv.policies' tried to end the process"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_module_that_fails_at_import_is_one_line_naming_the_spec_line(
    tmp_path: Path, command: str, tail: str, fragment: str
) -> None:
    spec, _ = _env(tmp_path / "env", policy_tail=tail)
    out = tmp_path / "out"
    extra = ["--out", str(out)] if command == "run" else []
    result = cli(command, str(spec), *extra)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"{spec}:4: model python:spyenv.policies:policy: " in result.stderr
    assert fragment in result.stderr
    assert not out.exists()


def test_a_module_that_kills_the_checking_process_is_one_line(tmp_path: Path) -> None:
    spec, _ = _env(tmp_path / "env", policy_tail="import os\nos._exit(0)\n")
    result = cli("validate", str(spec))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "ended the process that checks them (exit code 0)" in result.stderr


def test_what_a_module_prints_at_import_stays_off_json_stdout(tmp_path: Path) -> None:
    spec, _ = _env(tmp_path / "env", policy_tail="print('hello from import')\n")
    result = cli("validate", str(spec), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["name"] == "spy"
    assert "hello from import" in result.stderr
