"""Code-running verifiers: the model's program runs in the sandbox against the input's tests
(``python_tests``) or stdin/stdout cases (``program_cases``); no network, read-only system,
writable only in the rollout's copy of the workdir."""

from __future__ import annotations

import ast
import json
import re
import secrets
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.sandbox import (
    HARNESS,
    OUTPUT_LIMIT,
    SandboxLimits,
    SandboxResult,
    probe_mechanism,
    run_sandboxed,
    sandbox_python,
)
from rlenv.spec import Verifier
from rlenv.verifiers.base import Check, VerifierContext, expected_value

__all__ = ["extract_code", "run_program_cases", "run_python_tests", "sandboxed_check"]

HARNESS_NAME = "_rlenv_runner.py"
"""What the harness is called in the workdir."""

_PYTHON_FLAGS = ["-s", "-P", "-B"]
"""-I minus -E: -I would ignore PYTHONHASHSEED; the environment is already fully controlled."""
_LIMIT_NAMES = {"cpu_seconds", "wall_seconds", "memory_mb", "file_size_mb", "max_processes"}
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(answer: str | None) -> str:
    """The first fenced code block of an answer, or the whole answer."""
    found = _CODE_BLOCK.search(answer or "")
    return found.group(1) if found else (answer or "")


def sandboxed_check(config: Verifier) -> Check:
    """Run the model's code in the sandbox (bubblewrap, else unshare + rlimits) against the
    input's tests or cases: no network, read-only system, writable only in the rollout's copy."""
    unknown = sorted(set(config.options) - _LIMIT_NAMES)
    if unknown:
        raise UserError(f"verifier {config.label!r}: unknown sandbox option(s) {unknown}")

    def check(context: VerifierContext) -> tuple[bool, float, str | None]:
        limits = SandboxLimits(frozen_time=context.frozen_time, **config.options)
        material = expected_value(config, context)
        code = extract_code(context.answer)
        if config.type == "python_tests":
            outcome = run_python_tests(code, str(material), context.workdir, limits)
        else:
            outcome = run_program_cases(code, list(material), context.workdir, limits)
        return bool(outcome["passed"]), float(outcome["score"]), outcome.get("detail")

    return check


def _limit_reason(result: SandboxResult) -> str:
    if result.timed_out:
        return "killed by the wall-clock limit"
    if result.killed_by is not None:
        return (
            f"hit the {result.killed_by} limit"
            if " " not in result.killed_by
            else (f"killed by {result.killed_by}")
        )
    return f"exit code {result.returncode}"


def _tail(data: bytes, size: int = 400) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text[-size:]


def _prepare(workdir: Path, files: dict[str, str]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (workdir / name).write_text(text, encoding="utf-8")


def _verdict(passed: bool, score: float, detail: str, mechanism: str) -> dict[str, Any]:
    return {"passed": passed, "score": score, "detail": detail[:2000], "mechanism": mechanism}


def run_python_tests(
    code: str,
    tests: str,
    workdir: Path,
    limits: SandboxLimits,
    hidden: list[Path] | None = None,
    *,
    mechanism: str | None = None,
) -> dict[str, Any]:
    """Grade ``code`` (written to solution.py) with ``tests`` (plain asserts, test_* functions
    or unittest classes, importing from ``solution``) inside the sandbox; never raises for
    anything the code does. Returns {"passed", "score", "detail", "mechanism"}.

    The tests share an interpreter with the solution: containment protects the host, but a
    solution written to tamper with the runner in memory could forge its own verdict; use
    ``run_program_cases`` (compared outside the sandbox) where that matters.
    """
    mechanism = mechanism or probe_mechanism()
    workdir = Path(workdir)
    try:
        ast.parse(tests)
    except SyntaxError as exc:
        return _verdict(False, 0.0, f"tests do not parse: {exc}", mechanism)
    harness = HARNESS.read_text(encoding="utf-8")
    _prepare(workdir, {"solution.py": code, "test_solution.py": tests, HARNESS_NAME: harness})
    nonce = secrets.token_hex(16)
    try:
        result = run_sandboxed(
            [sandbox_python(), *_PYTHON_FLAGS, HARNESS_NAME],
            workdir,
            limits=limits,
            hidden=hidden,
            stdin=nonce.encode() + b"\n",
            mechanism=mechanism,
        )
    except OSError as exc:
        return _verdict(False, 0.0, f"sandbox could not start: {exc}", mechanism)
    return _test_verdict(result, nonce, mechanism)


def _test_verdict(result: SandboxResult, nonce: str, mechanism: str) -> dict[str, Any]:
    """Read the harness's one report line (marked with ``nonce``) into a verdict."""
    reports = [
        line[len(nonce) + 1 :]
        for line in result.stdout.decode("utf-8", "replace").splitlines()
        if line.startswith(nonce + " ")
    ]
    if result.returncode != 0 or result.timed_out or len(reports) != 1:
        reason = _limit_reason(result)
        if len(reports) != 1 and result.returncode == 0 and not result.timed_out:
            reason = "the test runner did not report (the program exited early)"
        detail = f"failed: {reason}"
        stderr = _tail(result.stderr)
        if stderr:
            detail += f"; stderr: {stderr}"
        return _verdict(False, 0.0, detail, mechanism)
    report = json.loads(reports[0])
    total = report["passed"] + report["failed"]
    score = report["passed"] / total if total else 0.0
    passed = total > 0 and report["failed"] == 0
    detail = f"{report['passed']}/{total} tests passed"
    if report["failures"]:
        detail += "; " + "; ".join(report["failures"])
    if report["output"] and not passed:
        detail += "; output: " + report["output"][-400:]
    return _verdict(passed, score, detail, mechanism)


def _normalise(text: str) -> str:
    """Judge-style comparison: trailing spaces on each line and trailing blank lines ignored."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _clip(text: str, size: int = 80) -> str:
    text = _normalise(text)
    return text if len(text) <= size else text[:size] + "..."


def run_program_cases(
    code: str,
    cases: list[dict[str, str]],
    workdir: Path,
    limits: SandboxLimits,
    hidden: list[Path] | None = None,
    *,
    mechanism: str | None = None,
) -> dict[str, Any]:
    """Run ``code`` (solution.py) once per case with the case's stdin and compare its stdout
    to ``expected_stdout`` outside the sandbox (trailing whitespace ignored). The score is the
    fraction of cases passed; never raises for anything the code does."""
    mechanism = mechanism or probe_mechanism()
    workdir = Path(workdir)
    if not cases:
        return _verdict(False, 0.0, "no test cases", mechanism)
    _prepare(workdir, {"solution.py": code})
    problems = [
        _run_case(index, case, workdir, limits, hidden, mechanism)
        for index, case in enumerate(cases)
    ]
    failures = [problem for problem in problems if problem is not None]
    passed = len(cases) - len(failures)
    detail = f"{passed}/{len(cases)} cases passed"
    if failures:
        detail += "; " + "; ".join(failures)
    return _verdict(passed == len(cases), passed / len(cases), detail, mechanism)


def _run_case(
    index: int,
    case: dict[str, str],
    workdir: Path,
    limits: SandboxLimits,
    hidden: list[Path] | None,
    mechanism: str,
) -> str | None:
    """Run one case; None when it passed, else what went wrong."""
    expected = case.get("expected_stdout", "")
    try:
        result = run_sandboxed(
            [sandbox_python(), *_PYTHON_FLAGS, "solution.py"],
            workdir,
            limits=limits,
            hidden=hidden,
            stdin=case.get("stdin", "").encode("utf-8"),
            mechanism=mechanism,
            output_limit=max(OUTPUT_LIMIT, 2 * len(expected.encode("utf-8")) + 1024),
        )
    except OSError as exc:
        return f"case {index}: sandbox could not start: {exc}"
    got = result.stdout.decode("utf-8", "replace")
    if result.returncode != 0 or result.timed_out:
        problem = f"case {index}: {_limit_reason(result)}"
        stderr = _tail(result.stderr, 200)
        if stderr:
            problem += f" ({stderr})"
        return problem
    if _normalise(got) != _normalise(expected):
        return f"case {index}: wrong answer: expected {_clip(expected)!r}, got {_clip(got)!r}"
    return None
