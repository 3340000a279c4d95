"""Issue 26 item 7 through the real entry point: each day-one bad input
(tests/bad_inputs_day_one.py) is one line naming what and where, exit 2 (a pin that should
simply work: exit 0), no traceback, and --out left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_inputs import Env, Outcome, attempt
from tests.bad_inputs_day_one import DEEP, day_one_cases, resume_deep
from tests.conftest import cli

CASES = day_one_cases()


def _entry_point(args: list[str]) -> Outcome:
    done = cli(*args, timeout=240)
    return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.category}/{c.name}" for c in CASES])
def test_day_one_bad_input(case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    problem = attempt(case, tmp_path, _entry_point)
    assert problem is None, f"{case.category}/{case.name}: {problem}"


def test_resume_of_a_run_json_nested_200k_deep(tmp_path: Path) -> None:
    import sys

    env = Env(tmp_path / "env")
    sys.path.insert(0, str(env.root))
    try:
        args = resume_deep(env, tmp_path)
    finally:
        sys.path.remove(str(env.root))
    done = cli(*args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "--resume" in lines[0] and "not readable JSON" in lines[0]
    assert (tmp_path / "out" / "run.json").read_text() == DEEP
    assert (tmp_path / "out" / "results.jsonl").read_text() == ""
