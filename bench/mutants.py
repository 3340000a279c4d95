"""Mutation testing of the trust-critical modules (`make mutants`): can the tests fail?

A surviving mutant is a deliberate bug that no test noticed. For each module of `TARGETS`,
mutmut (the `dev` extra) mutates that module only and runs, for each mutant, the tests of the
module's FAST set that call the mutated function (mutmut's own per-function selection within
the set). Each module runs in a scratch copy of the tree (rlenv, tests, envs, fixtures, the
pyproject with a `[tool.mutmut]` written for that module), so the real tree is never mutated
and the modules do not share a cache.

The score (killed / total per module and overall; a timeout counts as killed, a mutant no test
of the set reaches counts as survived) is written to `bench/results/mutants.txt` with the
surviving mutants' names (`mutmut show NAME` in the scratch dir prints the diff) and the
lines marked `# pragma: no mutate` (equivalent mutants, each with its reason on the line).

    .venv/bin/python bench/mutants.py                          # every module (hours on 2 cores)
    .venv/bin/python bench/mutants.py rlenv/verifiers/text.py  # one module; the others as stored
    .venv/bin/python bench/mutants.py --report                 # run nothing, rewrite the file
    .venv/bin/python bench/mutants.py --keep DIR MODULE        # leave the scratch copy in DIR

Each module's statuses are kept in `bench/results/mutants.json`, so a run of one module
updates its rows and the overall score; modules never run are listed as such.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "mutants.txt"
STORE = ROOT / "bench" / "results" / "mutants.json"  # every module's last statuses
TARGET_SCORE = 0.90

# module -> the fast tests that must catch its mutants (in process where possible: each
# mutant costs one run of the tests of its set that call the mutated function).
VERIFIER_TESTS = ["tests/test_verifier_parts.py", "tests/test_verifier_catalog.py"]
SECRET_TESTS = ["tests/test_secret_values.py"]
RESULT_TESTS = ["tests/test_results_digest.py"]
TARGETS: dict[str, list[str]] = {
    "rlenv/metrics/flagging.py": ["tests/test_flagging.py"],
    "rlenv/world/secrets.py": SECRET_TESTS,
    "rlenv/world/scrub.py": SECRET_TESTS,
    "rlenv/metrics/stats.py": ["tests/test_stats.py", "tests/test_metrics.py"],
    "rlenv/policy_shift/kl.py": ["tests/test_kl.py"],
    "rlenv/verifiers/base.py": VERIFIER_TESTS,
    "rlenv/verifiers/builtin.py": VERIFIER_TESTS,
    "rlenv/verifiers/text.py": VERIFIER_TESTS,
    "rlenv/verifiers/numbers.py": VERIFIER_TESTS,
    "rlenv/verifiers/maths.py": VERIFIER_TESTS,
    "rlenv/verifiers/json_answers.py": VERIFIER_TESTS,
    "rlenv/verifiers/judge.py": ["tests/test_judge_parts.py"],
    "rlenv/verifiers/code.py": ["tests/test_code_attacks.py"],
    "rlenv/verifiers/state.py": ["tests/test_state_diff.py"],
    "rlenv/results.py": RESULT_TESTS + ["tests/test_integrity_reader.py"],
    # the run-integrity reader: the record checks, the one reader, `rlenv check`'s library side
    "rlenv/integrity.py": ["tests/test_integrity_reader.py", *RESULT_TESTS],
    "rlenv/verified.py": ["tests/test_verified_run.py"],
    "rlenv/check.py": ["tests/test_verified_run.py", *RESULT_TESTS],
    "rlenv/world/replay.py": ["tests/test_replay_index.py"],
}
# what the copied tests read besides rlenv/ and tests/
ALSO_COPY = ["envs", "fixtures", "README.md", "pyproject.toml"]
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
STATUS = {  # mutmut's exit codes (mutmut.stats.status_by_exit_code)
    0: "survived",
    1: "killed",
    3: "killed",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    37: "caught by type check",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    -11: "segfault",
    -9: "segfault",
}


def _mutmut_config(module: str, tests: list[str]) -> str:
    lines = [
        "",
        "[tool.mutmut]",
        'source_paths = ["rlenv"]',
        f"only_mutate = {json.dumps([module])}",
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
        # one process per test run (no xdist), the suite's own timeout still applies
        'pytest_add_cli_args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]',
        f"also_copy = {json.dumps(ALSO_COPY)}",
        "use_git_change_detection = false",
        "",
    ]
    return "\n".join(lines)


def _scratch(module: str, tests: list[str], root: Path) -> Path:
    """A copy of the tree for one module's run, its pyproject carrying that module's config."""
    slug = module.removeprefix("rlenv/").removesuffix(".py").replace("/", ".")
    work = root / slug
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("rlenv", "tests", "envs", "fixtures"):
        shutil.copytree(ROOT / name, work / name, ignore=ignore)
    shutil.copy2(ROOT / "README.md", work / "README.md")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    pyproject = re.sub(r"\n\[tool\.mutmut\].*?(?=\n\[|\Z)", "", pyproject, flags=re.S)
    (work / "pyproject.toml").write_text(pyproject + _mutmut_config(module, tests))
    return work


def _statuses(work: Path, module: str) -> dict[str, str]:
    meta = work / "mutants" / f"{module}.meta"
    if not meta.exists():
        return {}
    data = json.loads(meta.read_text(encoding="utf-8"))
    return {name: STATUS.get(code, "suspicious") for name, code in data["exit_code_by_key"].items()}


def run_module(module: str, root: Path, max_children: int) -> tuple[dict[str, str], float]:
    tests = TARGETS[module]
    work = _scratch(module, tests, root)
    mutmut = Path(sys.executable).parent / "mutmut"
    env = {**os.environ, "PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    log = work / "mutmut.log"
    with log.open("w") as out:
        done = subprocess.run(
            [str(mutmut), "run", "--max-children", str(max_children)],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    elapsed = time.monotonic() - started
    statuses = _statuses(work, module)
    if done.returncode != 0 or not statuses:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"mutmut failed on {module} (exit {done.returncode}):\n{tail}")
    return statuses, elapsed


def _pragmas() -> list[str]:
    """Each line marked `# pragma: no mutate`, with the comment line above it (the reason)."""
    found = []
    for module in TARGETS:
        lines = (ROOT / module).read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if "pragma: no mutate" in line:
                above = lines[number - 2].strip() if number > 1 else ""
                reason = f"    {above}" if above.startswith("#") else ""
                found += [f"  {module}:{number}: {line.strip()}", *([reason] if reason else [])]
    return found


def report(
    results: dict[str, tuple[dict[str, str], float]], not_run: list[str]
) -> tuple[str, float]:
    rows = ["module                              mutants  killed  survived  score   seconds"]
    total = killed = 0
    survivors: list[str] = []
    for module, (statuses, elapsed) in results.items():
        n = len(statuses)
        k = sum(status in KILLED for status in statuses.values())
        total, killed = total + n, killed + k
        score = k / n if n else 1.0
        rows.append(f"{module:<36}{n:>8}{k:>8}{n - k:>10}  {score:>6.1%}{elapsed:>9.0f}")
        survivors += [
            f"  {name} ({status})"
            for name, status in sorted(statuses.items())
            if status not in KILLED
        ]
    overall = killed / total if total else 1.0
    verdict = "PASS" if overall >= TARGET_SCORE else "MISS"
    if not_run:
        verdict += f", {len(not_run)} modules not run"
    rows.append(
        f"{'overall':<36}{total:>8}{killed:>8}{total - killed:>10}  {overall:>6.1%}"
        f"   mutation score >= {TARGET_SCORE:.0%}: {verdict}"
    )
    lines = [
        "Mutation score of the trust-critical modules (`make mutants`, bench/mutants.py; mutmut,",
        "each module against its fast test set; a timeout counts as killed).",
        "",
        *rows,
        "",
        f"surviving mutants ({len(survivors)}; `mutmut show NAME` in a --keep copy):",
        *survivors,
        "",
        f"modules not run yet ({len(not_run)}):",
        *(f"  {module}" for module in not_run),
        "",
        "equivalent mutants, not generated (`# pragma: no mutate`; the reason on or above it):",
        *(_pragmas() or ["  none"]),
    ]
    return "\n".join(lines) + "\n", overall


def _load_store() -> dict[str, Any]:
    if STORE.exists():
        data: dict[str, Any] = json.loads(STORE.read_text(encoding="utf-8"))
        return data
    return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="only these modules (the others' last results")
    parser.add_argument("--keep", type=Path, help="scratch copies here, kept after the run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--report", action="store_true", help="run nothing: rewrite the file")
    args = parser.parse_args()
    unknown = [module for module in args.modules if module not in TARGETS]
    if unknown:
        print(f"not a target: {', '.join(unknown)} (see TARGETS in {__file__})", file=sys.stderr)
        return 2
    modules = [] if args.report else (args.modules or list(TARGETS))
    store = _load_store()
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="rlenv-mutants-"))
    try:
        for module in modules:
            statuses, elapsed = run_module(module, root, args.max_children)
            store[module] = {"statuses": statuses, "seconds": round(elapsed)}
            STORE.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")
            killed = sum(status in KILLED for status in statuses.values())
            print(f"{module}: {killed}/{len(statuses)} killed in {elapsed:.0f}s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results = {
        module: (store[module]["statuses"], float(store[module]["seconds"]))
        for module in TARGETS
        if module in store
    }
    text, overall = report(results, [module for module in TARGETS if module not in store])
    OUT.write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"written to {OUT.relative_to(ROOT)}")
    return 0 if overall >= TARGET_SCORE and len(results) == len(TARGETS) else 1


if __name__ == "__main__":
    sys.exit(main())
