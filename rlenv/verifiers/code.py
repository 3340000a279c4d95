"""Code-running verifiers: the model's program runs in the sandbox against the input's tests
(``python_tests``) or stdin/stdout cases (``program_cases``); no network, read-only system,
writable only in the rollout's copy of the workdir."""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import re
import secrets
import select
import shutil
import sys
import tempfile
import threading
import time
import traceback
import types
import unittest
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from rlenv.sandbox.mechanism import WEAK_SANDBOX_VARIABLE
from rlenv.verifiers.base import Grader, VerifierContext, expected_value

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier

__all__ = [
    "SolutionError",
    "extract_code",
    "plain_value",
    "run_program_cases",
    "run_python_tests",
    "sandboxed_grader",
]

HARNESS_NAME = "_rlenv_runner.py"
"""What the harness is called in the workdir."""

_PYTHON_FLAGS = ["-s", "-P", "-B"]
"""-I minus -E: -I would ignore PYTHONHASHSEED; the environment is already fully controlled."""
_LIMIT_NAMES = {
    "cpu_seconds",
    "wall_seconds",
    "memory_mb",
    "file_size_mb",
    "max_processes",
    "disk_mb",
}
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(answer: str | None) -> str:
    """The first fenced code block of an answer, or the whole answer."""
    found = _CODE_BLOCK.search(answer or "")
    return found.group(1) if found else (answer or "")


def sandboxed_grader(config: Verifier) -> Grader:
    """Run the model's code in the sandbox (bubblewrap, else unshare) against the input's tests
    or cases, on a throw-away copy of the rollout's workdir. With no namespace sandbox it
    refuses (a verifier error) unless ``--allow-weak-sandbox`` / ``RLENV_ALLOW_WEAK_SANDBOX=1``."""
    unknown = sorted(set(config.options) - _LIMIT_NAMES)
    if unknown:
        raise UserError(f"verifier {config.label!r}: unknown sandbox option(s) {unknown}")
    for name, value in sorted(config.options.items()):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise UserError(
                f"verifier {config.label!r}: option {name} is {value!r:.40}, not a positive number"
            )

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        mechanism = probe_mechanism()
        if mechanism == "rlimits" and os.environ.get(WEAK_SANDBOX_VARIABLE) != "1":
            raise RuntimeError(
                f"verifier {config.label!r}: refusing to run model code with no namespace "
                f"sandbox (neither bubblewrap nor unshare works here); install bubblewrap "
                f"(scripts/system-deps.sh), or pass --allow-weak-sandbox (or set "
                f"{WEAK_SANDBOX_VARIABLE}=1) to accept rlimits only"
            )
        limits = SandboxLimits(frozen_time=context.frozen_time, **config.options)
        material = expected_value(config, context)
        code = extract_code(context.answer)
        with tempfile.TemporaryDirectory(prefix="rlenv-grade-") as scratch:
            # A throw-away copy: what the code writes never reaches what file_state checks.
            copy = Path(scratch) / "work"
            if Path(context.workdir).is_dir():
                shutil.copytree(context.workdir, copy, symlinks=True)
            else:
                copy.mkdir()
            if config.type == "python_tests":
                outcome = run_python_tests(code, str(material), copy, limits, mechanism=mechanism)
            else:
                outcome = run_program_cases(code, list(material), copy, limits, mechanism=mechanism)
        return bool(outcome["passed"]), float(outcome["score"]), outcome.get("detail")

    return grade


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


class SolutionError(Exception):
    """A call into the model's code failed in a way no builtin exception describes."""


class _Unsupported(Exception):
    """A test passed or expected a value that cannot cross as JSON of plain types."""


_PLAIN = (type(None), bool, int, float, str)
_MAX_LINE = 8 * 1024 * 1024
_STOPPED = "the solution's process stopped answering"
"""One message for a dead, killed or silent harness: which limit struck first is racy, so the
verdict names it once, from the sandbox's result (deterministic details, stable digests)."""


def plain_value(value: Any, depth: int = 0) -> bool:
    """True when ``value`` is JSON of plain types (None, bool, int, float, str, list, dict with
    str keys), by exact type: subclasses (an always-equal ``int``) are refused."""
    if depth > 50:
        return False
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind is list or kind is tuple:
        return all(plain_value(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and plain_value(v, depth + 1) for k, v in value.items())
    return False


class _Channel:
    """The parent's end of the harness protocol: one JSON request line, one reply line with the
    same random id; anything else (stray output, a dead or silent process) fails that call and
    every later one."""

    def __init__(self, write_fd: int, read_fd: int, deadline: float) -> None:
        self.write_fd, self.read_fd, self.deadline = write_fd, read_fd, deadline
        self.buffer = b""
        self.broken: str | None = None

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.broken is not None:
            raise SolutionError(self.broken)
        message_id = secrets.token_hex(8)
        try:
            os.write(self.write_fd, json.dumps({**message, "id": message_id}).encode() + b"\n")
            reply = json.loads(self._line())
        except (OSError, ValueError):
            self.broken = _STOPPED
            raise SolutionError(self.broken) from None
        except SolutionError as exc:
            self.broken = str(exc)
            raise
        if type(reply) is not dict or reply.get("id") != message_id:
            self.broken = "stray output on the protocol pipe"
            raise SolutionError(self.broken)
        return reply

    def _line(self) -> bytes:
        while b"\n" not in self.buffer:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise SolutionError(_STOPPED)
            ready, _, _ = select.select([self.read_fd], [], [], remaining)
            if not ready:
                raise SolutionError(_STOPPED)
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                raise SolutionError(_STOPPED)
            self.buffer += chunk
            if len(self.buffer) > _MAX_LINE:
                raise SolutionError("reply too long")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def _raise_reply(reply: dict[str, Any]) -> None:
    """Raise what the model's code raised: the builtin exception of that name, else
    SolutionError (never SystemExit/KeyboardInterrupt: those would end the parent)."""
    name, text = str(reply.get("error_type")), str(reply.get("error"))[:300]
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        raise kind(text)
    raise SolutionError(text)


def _proxy_module(channel: _Channel, names: dict[str, Any]) -> types.ModuleType:
    """A stand-in ``solution`` module: its functions forward each call to the sandbox."""
    module = types.ModuleType("solution")

    def forward(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not plain_value(list(args)) or not plain_value(kwargs):
                raise _Unsupported(
                    f"{name}() called with a value that is not JSON of plain types; "
                    "python_tests passes only None/bool/int/float/str/list/dict"
                )
            reply = channel.request({"op": "call", "name": name, "args": args, "kwargs": kwargs})
            if reply.get("ok") is not True:
                _raise_reply(reply)
            value = reply.get("value")
            if not plain_value(value):  # json.loads gives plain types; checked all the same
                raise SolutionError(f"{name}() returned a value that is not plain JSON")
            return value

        call.__name__ = call.__qualname__ = name
        return call

    for name, entry in names.items():
        if type(name) is not str or type(entry) is not dict:
            continue
        if entry.get("kind") == "function":
            setattr(module, name, forward(name))
        elif entry.get("kind") == "value" and plain_value(entry.get("value")):
            setattr(module, name, entry["value"])
    return module


class _Tally:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []


def _short(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]


_TESTS_LOCK = threading.Lock()


def _run_tests_here(tests: str, solution: types.ModuleType, tally: _Tally) -> None:
    """Run the env author's tests in this (trusted) process against the proxy ``solution``:
    module-level asserts, test_* functions, unittest.TestCase classes."""
    module = types.ModuleType("test_solution")
    saved = {name: sys.modules.get(name) for name in ("solution", "test_solution")}
    with _TESTS_LOCK, contextlib.redirect_stdout(io.StringIO()):
        sys.modules["solution"], sys.modules["test_solution"] = solution, module
        try:
            load_error: Exception | None = None
            try:
                exec(compile(tests, "test_solution.py", "exec"), module.__dict__)
            except Exception as exc:
                load_error = exc
            functions = [
                (name, obj)
                for name, obj in list(vars(module).items())
                if name.startswith("test")
                and isinstance(obj, types.FunctionType)
                and obj.__module__ == "test_solution"
            ]
            suite = unittest.defaultTestLoader.loadTestsFromModule(module)
            if load_error is not None:
                tally.failed = max(1, len(functions) + suite.countTestCases())
                tally.failures.append("loading tests: " + _short(load_error))
            elif not functions and suite.countTestCases() == 0:
                tally.passed = 1  # plain asserts at module level, all held
            else:
                for name, function in functions:
                    try:
                        function()
                        tally.passed += 1
                    except Exception as exc:
                        tally.failed += 1
                        tally.failures.append(name + ": " + _short(exc))
                if suite.countTestCases():
                    _run_suite(suite, tally)
        finally:
            for name, value in saved.items():
                if value is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = value


def _run_suite(suite: unittest.TestSuite, tally: _Tally) -> None:
    result = unittest.TestResult()
    suite.run(result)
    bad = result.failures + result.errors
    skipped = len(result.skipped) + len(result.unexpectedSuccesses)
    tally.failed += len(bad) + skipped
    tally.passed += result.testsRun - len(bad) - skipped
    for case, text in bad:
        last = text.strip().splitlines()[-1][:300]
        tally.failures.append(case.id().split(".")[-1] + ": " + last)


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
    or unittest classes, importing from ``solution``); never raises for anything the code does.
    Returns {"passed", "score", "detail", "mechanism"}.

    The tests run here, in the trusted caller, against a stand-in ``solution`` module whose
    functions forward each call (arguments and return value as JSON of plain types) to a
    harness that imported the model's code inside the sandbox. The test source and expected
    values never enter the sandbox; the model's code can influence only the values it returns.
    """
    mechanism = mechanism or probe_mechanism()
    workdir = Path(workdir)
    try:
        ast.parse(tests)
    except SyntaxError as exc:
        return _verdict(False, 0.0, f"tests do not parse: {exc}", mechanism)
    harness = HARNESS.read_text(encoding="utf-8")
    _prepare(workdir, {"solution.py": code, HARNESS_NAME: harness})
    tally = _Tally()
    load_problem: list[str] = []

    def session(write_fd: int, read_fd: int, deadline: float) -> None:
        channel = _Channel(write_fd, read_fd, deadline)
        try:
            reply = channel.request({"op": "load"})
        except SolutionError as exc:
            load_problem.append(str(exc))
            return
        if reply.get("ok") is not True or type(reply.get("names")) is not dict:
            load_problem.append(str(reply.get("error"))[:300])
            return
        _run_tests_here(tests, _proxy_module(channel, reply["names"]), tally)

    try:
        result = run_sandboxed(
            [sandbox_python(), *_PYTHON_FLAGS, HARNESS_NAME],
            workdir,
            limits=limits,
            hidden=hidden,
            mechanism=mechanism,
            interact=session,
        )
    except OSError as exc:
        return _verdict(False, 0.0, f"sandbox could not start: {exc}", mechanism)
    if load_problem:
        detail = f"failed: the solution did not load: {load_problem[0]}"
        if result.returncode != 0 or result.timed_out:
            detail += f" ({_limit_reason(result)})"
        stderr = _tail(result.stderr)
        if stderr:
            detail += f"; stderr: {stderr}"
        return _verdict(False, 0.0, detail, mechanism)
    total = tally.passed + tally.failed
    score = tally.passed / total if total else 0.0
    passed = total > 0 and tally.failed == 0
    detail = f"{tally.passed}/{total} tests passed"
    if tally.failures:
        detail += "; " + "; ".join(tally.failures[:20])
    if not passed and (result.returncode != 0 or result.timed_out):
        detail += f"; {_limit_reason(result)}"
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
    cap = max(OUTPUT_LIMIT, 2 * len(expected.encode("utf-8")) + 1024)
    try:
        result = run_sandboxed(
            [sandbox_python(), *_PYTHON_FLAGS, "solution.py"],
            workdir,
            limits=limits,
            hidden=hidden,
            stdin=case.get("stdin", "").encode("utf-8"),
            mechanism=mechanism,
            output_limit=cap,
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
    if len(result.stdout) >= cap:
        # cut at the cap (the rest read and dropped): the start alone is not the output
        return f"case {index}: output longer than {cap} bytes, cut there"
    if _normalise(got) != _normalise(expected):
        return f"case {index}: wrong answer: expected {_clip(expected)!r}, got {_clip(got)!r}"
    return None
