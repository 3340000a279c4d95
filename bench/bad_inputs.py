"""Tried/held figures for the bad-input catalog (issue 13 item 4), through the real entry point.

Every case of tests/bad_inputs.py is built in a fresh directory and run as a subprocess of the
installed `rlenv` script with a 60 s limit (a hang counts as not held). A case holds when the
exit code is the expected one, stderr is one line naming the place with the expected fragment,
there is no traceback, a refused run leaves --out as it was, and every results line written is
strict JSON. Prints a table per category, the cases that did not hold, and exits 0.

    .venv/bin/python bench/bad_inputs.py            # all cases
    .venv/bin/python bench/bad_inputs.py cassette   # only categories/names containing a word
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.bad_inputs import CATALOG, Outcome, attempt  # noqa: E402

RLENV = Path(sys.executable).parent / "rlenv"
LIMIT_S = 60.0


def through_entry_point(args: list[str]) -> Outcome:
    try:
        done = subprocess.run(
            [str(RLENV), *args],
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return Outcome("hang", "", f"no answer in {LIMIT_S:.0f} s\n")
    return Outcome(done.returncode, done.stdout, done.stderr)


def main() -> None:
    words = sys.argv[1:]
    cases = [
        case
        for case in CATALOG
        if not words or any(word in f"{case.category}/{case.name}" for word in words)
    ]
    tried: Counter[str] = Counter()
    held: Counter[str] = Counter()
    failures: list[str] = []
    started = time.perf_counter()
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="rlenv-bad-") as scratch:
            problem = attempt(case, Path(scratch), through_entry_point)
        tried[case.category] += 1
        if problem is None:
            held[case.category] += 1
        else:
            failures.append(f"  {case.category}/{case.name}: {problem}")
    print(f"bad-input catalog through {RLENV} ({time.perf_counter() - started:.0f} s)")
    print(f"{'category':<18} {'tried':>5} {'held':>5}")
    for category in tried:
        print(f"{category:<18} {tried[category]:>5} {held[category]:>5}")
    print(f"{'total':<18} {sum(tried.values()):>5} {sum(held.values()):>5}")
    if failures:
        print("not held:")
        print("\n".join(failures))


if __name__ == "__main__":
    main()
