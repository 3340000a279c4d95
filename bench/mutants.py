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
VERIFIER_TESTS = [
    "tests/test_verifier_parts.py",
    "tests/test_verifier_catalog.py",
    "tests/test_number_reading.py",
]
SECRET_TESTS = ["tests/test_secret_values.py"]
RESULT_TESTS = ["tests/test_results_digest.py"]
# what the metrics keep of a record (results.components, compact_for_metrics): in process
COMPACT_TESTS = [
    "tests/test_record_components.py",
    "tests/test_flagging.py",
    "tests/test_summary_stream.py::test_compact_rows_give_the_metrics_of_the_dicts_they_replace",
    "tests/test_summary_stream.py::test_compact_rows_share_repeated_failures",
]
TARGETS: dict[str, list[str]] = {
    "rlenv/metrics/flagging.py": ["tests/test_flagging.py"],
    "rlenv/world/secrets.py": SECRET_TESTS,
    "rlenv/world/scrub.py": SECRET_TESTS,
    "rlenv/metrics/stats.py": ["tests/test_stats.py", "tests/test_metrics.py"],
    "rlenv/policy_shift/kl.py": ["tests/test_kl.py"],
    "rlenv/verifiers/base.py": VERIFIER_TESTS,
    "rlenv/verifiers/builtin.py": ["tests/test_mutants_builtin.py", *VERIFIER_TESTS],
    "rlenv/verifiers/text.py": VERIFIER_TESTS,
    "rlenv/verifiers/numbers.py": VERIFIER_TESTS,
    "rlenv/verifiers/maths.py": VERIFIER_TESTS,
    "rlenv/verifiers/json_answers.py": ["tests/test_mutants_builtin.py", *VERIFIER_TESTS],
    "rlenv/verifiers/judge.py": ["tests/test_judge_parts.py", "tests/test_mutants_judge.py"],
    # the parts one at a time (a real sandbox only where the model's code must run: ~0.2 s
    # each); the attack catalog (tests/test_code_attacks.py) takes minutes per mutant
    "rlenv/verifiers/code.py": ["tests/test_code_parts.py"],
    "rlenv/verifiers/state.py": ["tests/test_state_diff.py"],
    "rlenv/results.py": [
        *COMPACT_TESTS[:1],
        *RESULT_TESTS,
        "tests/test_mutants_results.py",
        "tests/test_integrity_reader.py",
        *COMPACT_TESTS[1:],
    ],
    "rlenv/result_lines.py": [*RESULT_TESTS, "tests/test_mutants_results.py"],
    # the run-integrity reader: the record checks, the one reader, `rlenv check`'s library side
    "rlenv/audit_records.py": ["tests/test_integrity_reader.py", *RESULT_TESTS],
    "rlenv/audit_reader.py": ["tests/test_verified_run.py"],
    "rlenv/audit.py": ["tests/test_verified_run.py", *RESULT_TESTS],
    "rlenv/world/replay.py": ["tests/test_replay_index.py", "tests/test_mutants_replay.py"],
}
# what the copied tests read besides rlenv/ and tests/
ALSO_COPY = ["envs", "fixtures", "README.md", "pyproject.toml"]
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
# surviving mutants whose behaviour cannot differ from the module's: not counted in the score
_MEMORY = "only how much memory the seen-table takes; every check and message the same"
_UNUSED = "the first missing rollout is read only when one is missing"
_SLOT = "the dense slot is always set before it is read (or the record refused first)"
EQUIVALENT: dict[str, str] = {
    "rlenv.audit_records.xǁRecordAuditǁ__init____mutmut_15": "array q vs Q: line numbers >= 0",
    "rlenv.audit_records.xǁRecordAuditǁ__init____mutmut_19": _MEMORY,
    "rlenv.audit_records.xǁRecordAuditǁ__init____mutmut_22": _MEMORY,
    "rlenv.audit_records.xǁRecordAuditǁ_gaps__mutmut_14": _UNUSED,
    "rlenv.audit_records.xǁRecordAuditǁ_gaps__mutmut_15": _UNUSED,
    "rlenv.audit_records.xǁRecordAuditǁ_gaps__mutmut_23": _UNUSED,
    "rlenv.audit_records.xǁRecordAuditǁ_gaps__mutmut_24": _UNUSED,
    "rlenv.audit_records.xǁRecordAuditǁadmit_key__mutmut_3": _SLOT,
    "rlenv.audit_records.xǁRecordAuditǁadmit_key__mutmut_4": _SLOT,
    "rlenv.audit_records.xǁRecordAuditǁadmit_key__mutmut_5": _SLOT,
    "rlenv.audit_records.xǁRecordAuditǁadmit_key__mutmut_20": _SLOT,
    "rlenv.audit_records.xǁRecordAuditǁadmit_key__mutmut_70": "slot 0 is then recomputed as 0",
    "rlenv.audit_records.xǁRecordAuditǁadmit_key__mutmut_71": "slot 0 is then recomputed as 0",
    **dict.fromkeys(
        [f"rlenv.audit_reader.x_read_baseline__mutmut_{n}" for n in range(13, 21)],
        "a verified summary's env is the one recomputed from run.json: same fingerprint",
    ),
    **dict.fromkeys(
        [f"rlenv.audit_reader.x_recompute_summary__mutmut_{n}" for n in (2, 3, 4, 5)],
        "expected_inputs reads run.json's inputs first too: the same count either way",
    ),
    **dict.fromkeys(
        [
            f"rlenv.audit_reader.x_recompute_summary__mutmut_{n}"
            for n in (28, 39, 40, 41, 42, 43, 44, 45, 46)
        ],
        "build_summary never reads its model_uri argument",
    ),
    "rlenv.audit_reader.x_brief__mutmut_3": "ensure_ascii=None is falsy, as False",
    "rlenv.audit_reader.x__read_object__mutmut_3": "encoding=None is the locale's: UTF-8 here",
    "rlenv.audit_reader.x__read_object__mutmut_5": "codec names are case-blind",
    "rlenv.verifiers.state.x__show__mutmut_2": "ensure_ascii=None is falsy, as False",
    "rlenv.verifiers.state.x__verdict__mutmut_14": "a total of 1 means nothing met: 0/1 = 0/2",
    "rlenv.verifiers.state.x__trim__mutmut_11": "trimming exactly SHOWN rows to SHOWN keeps them",
    "rlenv.verifiers.state.x__under__mutmut_8": "every pointer is '' or starts with '/'",
    "rlenv.verifiers.state.x__read_json__mutmut_5": "encoding=None is the locale's: UTF-8 here",
    "rlenv.verifiers.state.x__read_json__mutmut_7": "codec names are case-blind",
    **dict.fromkeys(
        [f"rlenv.verifiers.state.x__read_sqlite__mutmut_{n}" for n in (22, 25, 26, 52, 54)],
        "SQL keywords, NULL and rowid are case-blind",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.state.x__read_sqlite__mutmut_{n}" for n in (62, 65, 67)],
        "a row always has one value per column: zip's strict never fires",
    ),
    "rlenv.verifiers.builtin.x__regex__mutmut_11": "a regex verifier always has a pattern (spec)",
    "rlenv.verifiers.builtin.x__python__mutmut_7": "a python verifier always has a function (spec)",
    "rlenv.verifiers.builtin.x__file_state__mutmut_9": (
        "path_field is read only when path is unset, and the spec then requires it"
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.builtin.x__file_state__mutmut_{n}" for n in (35, 37, 40)],
        "encoding=None is the locale's: UTF-8 here; codec names are case-blind",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.x__record__mutmut_{n}" for n in (18, 21, 25)],
        "json.dumps escapes non-ASCII: the line is ASCII in any encoding",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.xǁJudgesǁ_reply__mutmut_{n}" for n in (57, 60, 65)],
        "json.dumps escapes non-ASCII: the line is ASCII in any encoding",
    ),
    "rlenv.verifiers.judge.x__regraded__mutmut_31": (
        "a record carries a rewards dict exactly when the spec has a reward"
    ),
    "rlenv.verifiers.judge.x_build__mutmut_30": "nothing reads LiveJudgment's argument",
    "rlenv.verifiers.judge.x__regraded__mutmut_59": "a graded verifier always has a score",
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.x__live_reply__mutmut_{n}" for n in (21, 22)],
        "HTTP header names are case-blind",
    ),
    "rlenv.verifiers.judge.x__live_reply__mutmut_34": "a 61 s timeout for a 60 s one",
    "rlenv.verifiers.judge.xǁJudgesǁclose__mutmut_5": (
        "record_missing needs a cassette (spec): path is None only when the mode is not it"
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.xǁJudgesǁclose__mutmut_{n}" for n in (16, 18, 24)],
        "the staged lines are json.dumps output: ASCII in any encoding",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.xǁJudgesǁclose__mutmut_{n}" for n in (27, 28, 29)],
        "every writer of a cassette takes the lock of the same (other) name: still exclusive",
    ),
    "rlenv.verifiers.judge.xǁJudgesǁclose__mutmut_35": "keep=True is merge_recording's default",
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.xǁJudgesǁclose__mutmut_{n}" for n in (37, 38)],
        "the staged file was written just before: it is there to unlink",
    ),
    "rlenv.verifiers.judge.xǁJudgeServicesǁreachable__mutmut_7": (
        "no service's host is 'xxxx' (they end in .rlenv.internal), as none is ''"
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.x__regraded__mutmut_{n}" for n in (67, 68)],
        "a pending record's total is None (never a partial total): never summed",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.x__regraded__mutmut_{n}" for n in (80, 82, 83, 84)],
        "seal recomputes the digest from stable(), which drops the old one; records are sealed",
    ),
    "rlenv.verifiers.judge.x_describe__mutmut_19": "codec names are case-blind",
    **dict.fromkeys(
        [f"rlenv.verifiers.judge.xǁJudgeServicesǁ_start__mutmut_{n}" for n in (3, 6, 8, 9)],
        "an unknown or missing zone reads the instant as UTC, as 'UTC' does (faketime_string)",
    ),
    **dict.fromkeys(
        [f"rlenv.world.replay.x_canonical_body__mutmut_{n}" for n in (31, 47)]
        + [f"rlenv.world.replay.x_canonical_body__mutmut_{n}" for n in (61, 64)],
        "codec names are case-blind; strict_parsing=None or omitted is False",
    ),
    **dict.fromkeys(
        [f"rlenv.world.replay.x_load_interactions__mutmut_{n}" for n in (45, 48, 49)],
        "vcrpy loads as many responses as requests: zip's strict never fires",
    ),
    **dict.fromkeys(
        ["rlenv.world.replay.x_lookup__mutmut_4", "rlenv.world.replay.x_missed__mutmut_4"],
        "with no current tool, '' and 'XXXX' name no index (no tool is being called)",
    ),
    **dict.fromkeys(
        [f"rlenv.world.replay.xǁToolIndexǁscrubbed__mutmut_{n}" for n in (2, 9)],
        "the scrubber looks for json/multipart/form inside the content type: 'XXXX' or a"
        " list's str() holds the same words",
    ),
    "rlenv.audit_records.x_numbered_records__mutmut_41": "typing.cast returns its value as is",
    # verifiers/code.py
    "rlenv.verifiers.code.x_extract_code__mutmut_4": (
        "'' and 'XXXX' hold no fenced block: the whole answer ('' for none) either way"
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.code.x_sandboxed_grader__mutmut_{n}" for n in (34, 35, 36, 40, 41)],
        "the scratch copy's name: a fresh random temporary directory either way, read by nothing",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.code.x_sandboxed_grader__mutmut_{n}" for n in (58, 63, 70, 75)],
        "not given a mechanism, run_* probe again: the same one (the probe runs once a process)",
    ),
    **dict.fromkeys(
        [
            "rlenv.verifiers.code.x__tail__mutmut_8",
            "rlenv.verifiers.code.x_run_python_tests__mutmut_19",
        ]
        + [f"rlenv.verifiers.code.x__prepare__mutmut_{n}" for n in (8, 10, 13)]
        + ["rlenv.verifiers.code.x_run_python_tests__mutmut_17"]
        + [f"rlenv.verifiers.code.x__run_case__mutmut_{n}" for n in (44, 51)],
        "encoding=None is the locale's: UTF-8 here; codec names are case-blind",
    ),
    "rlenv.verifiers.code.xǁ_Channelǁ_line__mutmut_5": (
        "a difference of two monotonic float readings is never exactly 0.0 (and select with 0"
        " polls once)"
    ),
    "rlenv.verifiers.code.xǁ_Channelǁ_line__mutmut_24": "the read size only: a line is read whole",
    "rlenv.verifiers.code.xǁ_Channelǁ_line__mutmut_29": (
        "which read brings a line's newline decides whether exactly 8 MiB passes: that byte is"
        " not deterministic under either comparison"
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.code.x__short__mutmut_{n}" for n in (1, 3, 5)],
        "format_exception_only takes the type from the value (Python >= 3.10)",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.code.x__run_tests_here__mutmut_{n}" for n in (28, 29)],
        "the tests' file name shows only in tracebacks; a failure keeps the exception's last line",
    ),
    **dict.fromkeys(
        [f"rlenv.verifiers.code.x_run_python_tests__mutmut_{n}" for n in (121, 123, 126)],
        "a run counts at least one test (asserts alone count one, a load error fails one): never 0",
    ),
    "rlenv.verifiers.code.x__normalise__mutmut_8": (
        "rstrip drops the \\r of a \\r\\n line end anyway"
    ),
    # result_lines.py: encode_line's orjson path is a shortcut; whatever raises in it falls back to
    # fast_json, then the reference (json.dumps): the same line, only slower
    **dict.fromkeys(
        [
            f"rlenv.result_lines.x_encode_line__mutmut_{n}"
            for n in (1, 4, 6, 8, 9, 10, 11, 12, 13, 16, 18, 20, 23, 24, 26, 27, 28, 31, 32, 34)
            + (39, 40)
        ],
        "an error in the orjson shortcut falls back to fast_json/json.dumps: the same line",
    ),
    **dict.fromkeys(
        [f"rlenv.result_lines.x_encode_line__mutmut_{n}" for n in (22, 38)],
        "fast_json's canonical=None is falsy, as False",
    ),
    "rlenv.result_lines.x__reference_line__mutmut_4": "ensure_ascii=None is falsy, as False",
    **dict.fromkeys(
        [f"rlenv.result_lines.x__reference_line__mutmut_{n}" for n in (5, 10, 16)],
        "plain_json has already written NaN and infinities as null: allow_nan is never asked",
    ),
    "rlenv.result_lines.x_decode_line__mutmut_7": (
        "orjson refusing the line falls back to json.loads"
    ),
    "rlenv.results.x_read_results__mutmut_38": "truncating a file to its own size changes nothing",
    "rlenv.results.xǁResultsWriterǁ__init____mutmut_1": "nothing reads the writer's path",
    "rlenv.results.xǁResultsWriterǁwrite__mutmut_12": "a file's write returns >= 1 byte or raises",
    "rlenv.results.xǁResultsWriterǁwrite__mutmut_14": (
        "ftruncate to a smaller size of a file open for writing does not raise"
    ),
    **dict.fromkeys(
        [f"rlenv.results.x__named__mutmut_{n}" for n in (4, 12, 15)],
        "the first piece of split(': ') is the same at any maxsplit; 'XXXX' is not 'tool ...'",
    ),
    "rlenv.results.x_components__mutmut_114": "'XXXX' does not start with 'verifier error: '",
    **dict.fromkeys(
        [f"rlenv.results.x_compact_for_metrics__mutmut_{n}" for n in (1, 7)],
        "interning equal strings only saves memory: every value the same",
    ),
    **dict.fromkeys(
        [f"rlenv.results.x_compact_for_metrics__mutmut_{n}" for n in (22, 23, 75, 76, 88, 89)]
        + [f"rlenv.results.x__shared_failure__mutmut_{n}" for n in (2, 3)],
        "the tag of a shared-table key: any distinct tag keeps the tables apart",
    ),
    **dict.fromkeys(
        [f"rlenv.audit.x_audit_run__mutmut_{n}" for n in range(17, 22)],
        "a verified summary always holds outcome_digest (recomputed and compared)",
    ),
}
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


_RECHECK = """
import importlib, json, os, signal, sys
import pytest
module, names, tests = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
importlib.import_module(module)  # imported before a mutant is chosen, as under mutmut
for test in tests:  # imported once; each mutant's run in a fork collects them from memory
    importlib.import_module(test.split("::")[0].removesuffix(".py").replace("/", "."))
codes = {}
for name in names:
    pid = os.fork()
    if pid == 0:
        os.environ["MUTANT_UNDER_TEST"] = name
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        signal.alarm(300)  # a mutant that loops: the default SIGALRM ends it (a timeout)
        args = ["-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]
        os._exit(int(pytest.main([*args, *tests])))
    codes[name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(codes))
"""


def recheck_module(module: str, root: Path, statuses: dict[str, str]) -> dict[str, str]:
    """Each surviving mutant of `module` run again (in the scratch copy kept by `--keep ROOT`)
    against the module's test set as it is now (the whole set, not mutmut's per-function
    selection, so a mutant no test reached can be reached now): the survivors the tests
    written since have killed. Refused when the module itself changed since its run."""
    slug = module.removeprefix("rlenv/").removesuffix(".py").replace("/", ".")
    work = root / slug
    if not (work / "mutants").is_dir():
        raise SystemExit(f"no scratch copy of {module} in {root}: run it with --keep {root}")
    if (work / module).read_bytes() != (ROOT / module).read_bytes():
        raise SystemExit(f"{module} changed since its mutation run: run it again")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tests", work / "mutants" / "tests", ignore=ignore, dirs_exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(work / "mutants"), "PYTHONDONTWRITEBYTECODE": "1"}
    dotted = module.removesuffix(".py").replace("/", ".")
    names = sorted(n for n, s in statuses.items() if s not in KILLED and n not in EQUIVALENT)
    done = subprocess.run(
        [sys.executable, "-c", _RECHECK, dotted, json.dumps(names), *TARGETS[module]],
        cwd=work / "mutants",
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise SystemExit(f"recheck of {module} failed:\n{done.stderr[-3000:]}")
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    updated = dict(statuses)
    for name, code in codes.items():
        updated[name] = {0: statuses[name], 1: "killed", -14: "timeout"}.get(code, "suspicious")
    return updated


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


def report(results: dict[str, dict[str, Any]], not_run: list[str]) -> tuple[str, float]:
    """The results file: per module and overall, killed / (mutants - equivalent)."""
    rows = ["module                              mutants  equiv  killed  survived  score  seconds"]
    total = killed = 0
    survivors: list[str] = []
    equivalent: list[str] = []
    rechecked = 0
    for module, entry in results.items():
        statuses: dict[str, str] = entry["statuses"]
        same = [name for name in statuses if name in EQUIVALENT]
        counted = {name: status for name, status in statuses.items() if name not in EQUIVALENT}
        n = len(counted)
        k = sum(status in KILLED for status in counted.values())
        total, killed = total + n, killed + k
        rechecked += int(entry.get("rechecked_killed", 0))
        score = k / n if n else 1.0
        rows.append(
            f"{module:<36}{len(statuses):>8}{len(same):>7}{k:>8}{n - k:>10}  {score:>6.1%}"
            f"{float(entry['seconds']):>8.0f}"
        )
        survivors += [
            f"  {name} ({status})"
            for name, status in sorted(counted.items())
            if status not in KILLED
        ]
        equivalent += [f"  {name}: {EQUIVALENT[name]}" for name in sorted(same)]
    notes = [f"  {module}: {entry['note']}" for module, entry in results.items() if "note" in entry]
    overall = killed / total if total else 1.0
    verdict = "PASS" if overall >= TARGET_SCORE else "MISS"
    if not_run:
        verdict += f", {len(not_run)} modules not run"
    rows.append(
        f"{'overall':<36}{total + len(equivalent):>8}{len(equivalent):>7}{killed:>8}"
        f"{total - killed:>10}  {overall:>6.1%}   mutation score >= {TARGET_SCORE:.0%}: {verdict}"
    )
    lines = [
        "Mutation score of the trust-critical modules (bench/mutants.py; mutmut, each module",
        "against its fast test set; a timeout counts as killed; equivalent mutants not counted).",
        "Reproduce: `make mutants` (.venv/bin/python bench/mutants.py --keep /tmp/rlenv-mutants);",
        "one module: `make mutants MUTANTS=rlenv/results.py`; survivors of a kept run against",
        "tests written since: .venv/bin/python bench/mutants.py --keep DIR --recheck MODULE.",
        "",
        *rows,
        *(["", "notes:", *notes] if notes else []),
        "",
        f"survivors killed on a --recheck by tests written after the module's run: {rechecked}",
        "",
        f"surviving mutants ({len(survivors)}; `mutmut show NAME` in a --keep copy):",
        *survivors,
        "",
        f"modules not run yet ({len(not_run)}):",
        *(f"  {module}" for module in not_run),
        "",
        f"equivalent mutants ({len(equivalent)}; cannot behave differently; EQUIVALENT above):",
        *(equivalent or ["  none"]),
        "",
        "equivalent mutants, not generated (`# pragma: no mutate`; the reason on or above it):",
        *(_pragmas() or ["  none"]),
    ]
    return "\n".join(lines) + "\n", overall


def _save(module: str, entry: dict[str, Any]) -> dict[str, Any]:
    """One module's entry written into the store as it is on disk now (another run of this
    script may have written other modules meanwhile); the store after."""
    store = _load_store()
    store[module] = entry
    STORE.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")
    return store


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
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="only run each survivor of MODULES again against the tests as they are now"
        " (needs the scratch copies of --keep DIR)",
    )
    args = parser.parse_args()
    unknown = [module for module in args.modules if module not in TARGETS]
    if unknown:
        print(f"not a target: {', '.join(unknown)} (see TARGETS in {__file__})", file=sys.stderr)
        return 2
    modules = [] if args.report else (args.modules or list(TARGETS))
    store = _load_store()
    if args.recheck:
        if not args.keep or not args.modules:
            print("--recheck needs --keep DIR and the modules to recheck", file=sys.stderr)
            return 2
        for module in args.modules:
            started = time.monotonic()
            before = store[module]["statuses"]
            after = recheck_module(module, args.keep.resolve(), before)
            newly = sum(after[n] in KILLED and before[n] not in KILLED for n in after)
            entry = {**store[module], "statuses": after}
            entry["rechecked_killed"] = entry.get("rechecked_killed", 0) + newly
            store = _save(module, entry)
            took = time.monotonic() - started
            print(f"{module}: {newly} survivors killed on recheck in {took:.0f}s")
        modules = []
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="rlenv-mutants-"))
    try:
        for module in modules:
            statuses, elapsed = run_module(module, root, args.max_children)
            store = _save(module, {"statuses": statuses, "seconds": round(elapsed)})
            killed = sum(status in KILLED for status in statuses.values())
            print(f"{module}: {killed}/{len(statuses)} killed in {elapsed:.0f}s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    store = _load_store()
    results = {module: store[module] for module in TARGETS if module in store}
    text, overall = report(results, [module for module in TARGETS if module not in store])
    OUT.write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"written to {OUT.relative_to(ROOT)}")
    return 0 if overall >= TARGET_SCORE and len(results) == len(TARGETS) else 1


if __name__ == "__main__":
    sys.exit(main())
