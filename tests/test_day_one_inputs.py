"""Issue 26 item 7 through the real entry point: each day-one bad input
(tests/bad_inputs_day_one.py) is one line naming what and where, exit 2 (a pin that should
simply work: exit 0), no traceback, and --out left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_inputs import Outcome, attempt
from tests.bad_inputs_day_one import day_one_cases
from tests.conftest import cli

CASES = day_one_cases()


def _entry_point(args: list[str]) -> Outcome:
    done = cli(*args, timeout=240)
    return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.category}/{c.name}" for c in CASES])
def test_day_one_bad_input(case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    problem = attempt(case, tmp_path, _entry_point)
    assert problem is None, f"{case.category}/{case.name}: {problem}"
