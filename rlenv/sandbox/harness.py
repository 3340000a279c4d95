"""The test runner of ``run_python_tests``: copied into the workdir as ``_rlenv_runner.py``
and run by path inside the sandbox, next to ``solution.py`` and ``test_solution.py``.

Imports solution.py through the tests, runs plain module-level asserts, test_* functions and
unittest.TestCase classes, and prints one result line. The line carries a nonce that the
runner reads from stdin only after every test ran, so output printed by the solution cannot
pass for it; exiting early leaves no line at all and counts as a failure.

Runs under the sandboxed interpreter: standard library only.
"""

from __future__ import annotations

import io
import json
import os
import sys
import traceback
import types
import unittest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_FAILURES = 20
"""Failure lines kept in the report."""


class _Capped(io.TextIOBase):
    def __init__(self, limit: int = 4096) -> None:
        self.parts: list[str] = []
        self.size, self.limit = 0, limit

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if self.size < self.limit:
            self.parts.append(s[: self.limit - self.size])
        self.size += len(s)
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


def _short(exc: BaseException) -> str:
    line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return line[:300]


def _load_tests() -> tuple[types.ModuleType, BaseException | None]:
    """Execute test_solution.py as module ``test_solution``; (module, error while loading)."""
    module = types.ModuleType("test_solution")
    module.__file__ = os.path.join(os.getcwd(), "test_solution.py")
    sys.modules["test_solution"] = module
    with open("test_solution.py", encoding="utf-8") as handle:
        source = handle.read()
    try:
        exec(compile(source, "test_solution.py", "exec"), module.__dict__)
    except BaseException as exc:
        return module, exc
    return module, None


class Tally:
    """Counts and failure lines so far (kept when the runner itself is interrupted)."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []


def _run_functions(functions: list[tuple[str, Any]], tally: Tally) -> None:
    for name, function in functions:
        try:
            function()
            tally.passed += 1
        except BaseException as exc:
            tally.failed += 1
            tally.failures.append(name + ": " + _short(exc))


def _run_suite(suite: unittest.TestSuite, tally: Tally) -> None:
    result = unittest.TestResult()
    suite.run(result)
    bad = result.failures + result.errors
    skipped = len(result.skipped) + len(result.unexpectedSuccesses)
    tally.failed += len(bad) + skipped
    tally.passed += result.testsRun - len(bad) - skipped
    for case, text in bad:
        last = text.strip().splitlines()[-1][:300]
        tally.failures.append(case.id().split(".")[-1] + ": " + last)


def run_tests(tally: Tally) -> None:
    """Run the tests of test_solution.py, counting into ``tally``."""
    module, load_error = _load_tests()
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
        _run_functions(functions, tally)
        if suite.countTestCases():
            _run_suite(suite, tally)


def main() -> None:
    real_stdout = sys.stdout
    captured = _Capped()
    sys.stdout = sys.stderr = captured
    sys.path.insert(0, os.getcwd())
    tally = Tally()
    try:
        run_tests(tally)
    except BaseException as exc:
        tally.failed = max(tally.failed, 1)
        tally.failures.append("runner: " + _short(exc))
    sys.stdout, sys.stderr = real_stdout, sys.__stderr__
    nonce = sys.stdin.read().strip()
    report = {
        "passed": tally.passed,
        "failed": tally.failed,
        "failures": tally.failures[:MAX_FAILURES],
        "output": captured.text(),
    }
    real_stdout.write("\n" + nonce + " " + json.dumps(report, sort_keys=True) + "\n")
    real_stdout.flush()


if __name__ == "__main__":
    main()
