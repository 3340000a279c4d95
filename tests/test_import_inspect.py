"""`rlenv import inspect`: Inspect AI tasks become frozen specs whose pass rate, for the same
answers (a replay policy in rlenv, Inspect's mockllm model in Inspect), equals Inspect's own
score; what cannot be carried is listed; bad input is one line, exit 2.

Inspect runs in its own venv (`make inspect-venv`, a prerequisite of `make test`); without it
these tests skip here and fail under CI (`conftest.require`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, cli, in_process, read_jsonl, require
from tests.warm_python import warm_python

DATA = ROOT / "tests" / "data" / "importers"
TASKS = DATA / "inspect"
INSPECT_PYTHON = ROOT / ".venv-inspect" / "bin" / "python"
# what the loader and the task files import: preloaded once in the warm python
INSPECT_MODULES = ["inspect_ai", "inspect_ai.dataset", "inspect_ai.scorer", "inspect_ai.tool"]


@pytest.fixture(autouse=True)
def _inspect_venv() -> None:
    require(INSPECT_PYTHON.is_file(), ".venv-inspect (`make inspect-venv`)")


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """.venv-inspect's python with inspect_ai imported once for the module (a fork per load:
    tests/warm_python.py), given to rlenv as `--python`. test_import_is_deterministic loads
    through the real interpreter, found as rlenv finds it, and compares the two."""
    require(INSPECT_PYTHON.is_file(), ".venv-inspect (`make inspect-venv`)")
    with warm_python(INSPECT_PYTHON, INSPECT_MODULES, tmp_path_factory.mktemp("warm")) as shim:
        yield shim


def _import(
    target: str, out: Path, *extra: str, python: Path | None
) -> subprocess.CompletedProcess[str]:
    """`rlenv import inspect` through the entry point; `python`: given as --python (None: the
    one rlenv finds, as a user runs it)."""
    given = ("--python", str(python)) if python is not None else ()
    return cli("import", "inspect", str(TASKS / target), "--out", str(out), *given, *extra)


def _rlenv_rates(
    spec: Path, records: list[dict[str, Any]], answers: dict[str, str], tmp: Path
) -> dict[str, float]:
    """Per-verifier pass rate of `rlenv run` with a replay policy answering each input."""
    rollouts = int(yaml.safe_load(spec.read_text()).get("rollouts", 1))
    replay = tmp / "replay.jsonl"
    lines = []
    for record in records:
        key = max((key for key in answers if key in record["input_text"]), key=len)
        for rollout in range(rollouts):
            lines.append({"input_id": record["id"], "rollout": rollout, "answer": answers[key]})
    replay.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = cli(
        "run", str(spec), "--model", f"replay:{replay}", "--out", str(tmp / "run"), "--workers", "1"
    )
    assert done.returncode == 0, done.stderr
    counts: dict[str, list[bool]] = {}
    for result in read_jsonl(tmp / "run" / "results.jsonl"):
        assert result["status"] == "ok", result
        for verdict in result["verifiers"]:
            counts.setdefault(verdict["name"], []).append(verdict["passed"])
    return {name: sum(values) / len(values) for name, values in counts.items()}


COMPARED = ("arithmetic.py@arithmetic", "capitals.py@capitals", "own_task.py@own")
IMPORTED = (*COMPARED, "capitals.py@capitals_graded")


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory, warm: Path) -> dict[str, Path]:
    """Each test task imported once for the module: target -> output directory."""
    root = tmp_path_factory.mktemp("imported")
    found = {}
    for target in IMPORTED:
        out = root / target.replace(".py@", "-")
        done = _import(target, out, python=warm)
        assert done.returncode == 0, done.stderr
        found[target] = out
    return found


@pytest.fixture(scope="module")
def inspect_scores(
    tmp_path_factory: pytest.TempPathFactory, warm: Path
) -> dict[str, dict[str, float]]:
    """Inspect's own accuracy per scorer for each compared task and its answers (mockllm
    model), all in one Inspect process (a fork of the warm python)."""
    root = tmp_path_factory.mktemp("inspect")
    runs = root / "runs.json"
    runs.write_text(json.dumps({str(TASKS / t): ANSWERS[t] for t in COMPARED}))
    done = subprocess.run(
        [str(warm), str(DATA / "inspect_score.py"), str(runs)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    return {target: scores[str(TASKS / target)] for target in COMPARED}


def _compare(
    target: str, envs: dict[str, Path], theirs: dict[str, dict[str, float]], tmp_path: Path
) -> dict[str, float]:
    out = envs[target]
    spec = next(out.glob("*.yaml"))
    ours = _rlenv_rates(spec, read_jsonl(out / "inputs.jsonl"), ANSWERS[target], tmp_path)
    assert list(ours) == list(theirs[target])  # the same scorers, named as Inspect names them
    assert ours == pytest.approx(theirs[target]), (ours, theirs[target])
    return ours


ARITHMETIC = {
    # right: the last number is the answer, in the formats models write
    "Tom has 3 apples": "3 + 4 = 7\nANSWER: 7",
    "A box holds 12 eggs": "12 x 5 = 60 eggs.\nANSWER: **60**",
    "Sara had $1,250": "She has $1,000 left.\nANSWER: $1,000",
    "A train travels 90 km": "90 / 1.5 = 60\nANSWER: 60.0",
    # right by Inspect's rule too: numbers are compared to 5 significant digits
    "What is 0.1 plus 0.2?": "0.3 is close; exactly it is 0.30000000000000004",
    # wrong: another number last, a percentage, a sign lost
    "A class of 28": "ANSWER: 7 teams, or maybe 8",
    "What is 15% of 200?": "30% of it",
    "The temperature is -3": "It is 8 degrees below zero: ANSWER: 8",
}

CAPITALS = {
    "France": "Paris\nANSWER: Paris",
    "Japan": "The capital is Tokyo.\nANSWER: tokyo.",
    "Kenya": "nairobi",
    "Peru": "I think the capital is Lima, not Cusco.\nANSWER: Lima",
    "Canada": "Toronto\nANSWER: Toronto",
    "Egypt": "The Capital Is Cairo!",
}

OWN = {
    "Name a primary color.": "Blue",
    "What is the largest planet?": "It is jupiter",
    "How many legs does a spider have?": "8.0",  # exact() reads numbers: 8.0 is 8
    "What is {braces} in Python?": "A set or a dict",
}


ANSWERS = {
    "arithmetic.py@arithmetic": ARITHMETIC,
    "capitals.py@capitals": CAPITALS,
    "own_task.py@own": OWN,
}


def test_arithmetic_pass_rate_equals_inspects(
    tmp_path: Path, envs: dict[str, Path], inspect_scores: dict[str, dict[str, float]]
) -> None:
    rates = _compare("arithmetic.py@arithmetic", envs, inspect_scores, tmp_path)
    assert rates == {"match": 0.625}  # 5 of 8, as chosen


def test_capitals_every_scorer_equals_inspects(
    tmp_path: Path, envs: dict[str, Path], inspect_scores: dict[str, dict[str, float]]
) -> None:
    rates = _compare("capitals.py@capitals", envs, inspect_scores, tmp_path)
    assert len(set(rates.values())) > 1, rates  # the scorers disagree on these answers


def test_own_task_with_epochs_and_multi_targets_equals_inspects(
    tmp_path: Path, envs: dict[str, Path], inspect_scores: dict[str, dict[str, float]]
) -> None:
    _compare("own_task.py@own", envs, inspect_scores, tmp_path)


def test_spec_carries_prompt_system_message_decoding_and_lists_tools(
    envs: dict[str, Path],
) -> None:
    out = envs["own_task.py@own"]
    spec_text = (out / "own.yaml").read_text()
    spec = yaml.safe_load(spec_text)
    assert spec["system_prompt"] == "Answer in a few words. Hints are given in {braces}."
    assert spec["rollouts"] == 2  # epochs
    assert "# - name: lookup" in spec_text and "term" in spec_text  # listed for `record`
    records = read_jsonl(out / "inputs.jsonl")
    assert [r["id"] for r in records] == ["u1", "u2", "u3", "u4"]
    assert records[0]["target"] == ["red", "blue", "yellow"]
    from rlenv.canonical import sha256_file

    assert spec["inputs"]["sha256"] == sha256_file(out / "inputs.jsonl")

    assert "# Not carried over (left out):\n#   - tool lookup: runs inside Inspect" in spec_text
    assert "#   - time_limit 600: not carried" in spec_text
    arithmetic = envs["arithmetic.py@arithmetic"]
    spec = yaml.safe_load((arithmetic / "arithmetic.yaml").read_text())
    assert spec["decoding"] == {"temperature": 0.0, "max_tokens": 512}
    assert spec["prompt"]["template"].endswith(
        "{{ prompt }}\n\nRemember to put your answer on"
        ' its own line at the end in the form "ANSWER:'
        ' $ANSWER" (without\nquotes) where $ANSWER is the'
        " answer to the problem, and you do not need to use"
        " a \\boxed\ncommand.\n\nReasoning:"
    )


def test_import_is_deterministic(tmp_path: Path, envs: dict[str, Path]) -> None:
    """Imported again by the python rlenv finds itself (a fresh interpreter, its own hash
    seed): the same bytes as the warm fork's import."""
    assert _import("capitals.py@capitals", tmp_path / "again", python=None).returncode == 0
    first = envs["capitals.py@capitals"]
    assert sorted(p.name for p in first.iterdir()) == sorted(
        p.name for p in (tmp_path / "again").iterdir()
    )
    for file in first.iterdir():
        assert file.read_bytes() == (tmp_path / "again" / file.name).read_bytes(), file.name


def test_model_graded_fact_becomes_a_judge(envs: dict[str, Path]) -> None:
    out = envs["capitals.py@capitals_graded"]
    spec_text = (out / "capitals_graded.yaml").read_text()
    (verifier,) = yaml.safe_load((out / "capitals_graded.yaml").read_text())["verifiers"]
    assert verifier["type"] == "judge"
    judge = verifier["judge"]
    assert judge["model"] == "openai:gpt-4o-mini"
    assert "[Question]: {{ input_text }}" in judge["rubric"]
    assert "[Submission]: {{ answer }}" in judge["rubric"]
    assert "score: N" in judge["rubric"]
    assert "GRADE: C/P/I" in spec_text  # the changed instruction is stated


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("own_task.py@unsupported", (), "scorer 'f1' has no rlenv equivalent"),
        ("own_task.py@nope", (), "no task named 'nope' (tasks: graded, own, unsupported)"),
        ("missing.py@task", (), "missing.py: no such file"),
        ("own_task.py", (), "give FILE.py@TASK"),
        ("own_task.py@own", ("--python", "/nonexistent/python"), "no such python"),
        ("own_task.py@own", ("--python", "/bin/true"), "the loader printed no JSON"),
        ("own_task.py@graded", (), "give --judge-model openai:NAME"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, warm: Path, target: str, extra: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "env"
    given = () if "--python" in extra else ("--python", str(warm))
    # called in this process: a refusal's one line and exit code (the entry point: above)
    done = in_process("import", "inspect", str(TASKS / target), "--out", str(out), *given, *extra)
    assert done.exit_code == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not out.exists()


def test_judge_model_given_on_the_command_line(tmp_path: Path, warm: Path) -> None:
    out = tmp_path / "env"
    done = in_process(  # the option's effect (the entry point: the module's imports)
        "import", "inspect", str(TASKS / "own_task.py@graded"), "--out", str(out),
        "--judge-model", "openai:grader-1", "--python", str(warm),
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    (verifier,) = yaml.safe_load((out / "graded.yaml").read_text())["verifiers"]
    assert verifier["judge"]["model"] == "openai:grader-1"
    assert "0.5 for a partially correct one" in verifier["judge"]["rubric"]  # partial_credit
    assert (
        "[Criterion]: {{ target if target is string else target | join('') }}"
        in (verifier["judge"]["rubric"])
    )


def test_no_inspect_python_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No .venv-inspect where it looks and a python3 on PATH without inspect_ai: the one line
    says how to get one."""
    from rlenv.errors import UserError
    from rlenv.importers.inspect_task import find_python

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to("/usr/bin/false")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(UserError, match="no python with inspect_ai: run `make inspect-venv`"):
        find_python(None, roots=(tmp_path,))
    assert find_python(None, roots=(tmp_path, ROOT)) == str(INSPECT_PYTHON)


def test_out_dir_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "env"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    done = in_process("import", "inspect", str(TASKS / "capitals.py@capitals"), "--out", str(out))
    assert done.exit_code == 2 and "is not an empty directory" in done.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
