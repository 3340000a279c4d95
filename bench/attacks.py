"""The attack catalog of issue 12 ("verdicts that cannot be forged"), with issue 26's channels
between rollouts (kernel, scratch directories, the worker's python state), clock reads below
Python and forged replies: tried and held per family.

Runs the suite's attack tests through pytest (a JUnit XML report, nothing else installed) and
counts each test case as one attempt: held when the defence stood (the test passed), not held
when it failed. Controls (the same attack with the defence off, to show it would work) and
functional checks are left out of the counts. Prints one line per family and the total, and
always exits 0 (a benchmark reports; `make test` is what fails).

    .venv/bin/python bench/attacks.py            # the whole catalog, about 2 to 3 minutes
    .venv/bin/python bench/attacks.py --quick    # without the run-level families (seconds)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (test file, test function) -> family; a test function missing here is not an attack
FAMILIES: dict[tuple[str, str], str] = {
    ("test_code_attacks", "test_attack_does_not_pass_python_tests"): "python_tests forgery",
    ("test_code_attacks", "test_attack_does_not_pass_program_cases"): "program_cases forgery",
    ("test_code_attacks", "test_code_verifier_cannot_write_what_file_state_checks"): (
        "code verifier writes file_state's file"
    ),
    ("test_code_attacks", "test_refuses_without_a_namespace_sandbox"): "weak sandbox (fail closed)",
    ("test_sandbox_view", "test_graded_code_sees_none_of_the_project"): (
        "graded code reads the project"
    ),
    ("test_audit", "test_check_catches_tampering"): "tampered run directory",
    ("test_audit", "test_readers_refuse_tampered_records"): "tampered run directory",
    ("test_audit", "test_grade_refuses_tampered_records"): "tampered run directory",
    ("test_audit", "test_summary_refuses_tampered_records"): "tampered run directory",
    ("test_no_silent_success", "test_env_code_that_exits_or_is_interrupted_is_an_error_status"): (
        "env code exits / is interrupted"
    ),
    ("test_no_silent_success", "test_env_code_that_kills_its_worker_is_an_error_status"): (
        "env code kills its worker"
    ),
    ("test_hard_limits", "test_a_worker_death_is_an_error_status"): "env code kills its worker",
    ("test_hard_limits", "test_an_overrun_is_a_timeout"): "overrun (loop, swallow, deaf to alarm)",
    ("test_hard_limits", "test_processes_a_rollout_starts_are_gone_when_it_ends"): (
        "processes outlive the rollout / run"
    ),
    ("test_hard_limits", "test_workers_die_with_the_orchestrator"): (
        "processes outlive the rollout / run"
    ),
    ("test_run_lock", "test_second_writer_is_refused_while_the_first_holds_the_run"): (
        "two writers / changed --resume"
    ),
    ("test_run_lock", "test_resume_refuses_a_changed_setting"): "two writers / changed --resume",
    ("test_run_lock", "test_resume_refuses_an_edited_env"): "two writers / changed --resume",
    ("test_run_lock", "test_fingerprint_covers_indirectly_imported_helpers"): (
        "two writers / changed --resume"
    ),
    ("test_isolation_channels", "test_no_channel_between_worker_rollouts"): (
        "channel between rollouts"
    ),
    ("test_isolation_channels", "test_no_channel_between_sandboxes"): "channel between rollouts",
    ("test_ray_channels", "test_no_channel_between_actor_rollouts"): "channel between rollouts",
    ("test_world_clock", "test_every_clock_in_the_world_reads_the_spec_year"): (
        "real clock read below Python"
    ),
    ("test_world_clock", "test_every_clock_in_the_sandbox_reads_the_spec_year"): (
        "real clock read below Python"
    ),
    ("test_audit_readers", "test_check_names_the_first_field_that_differs"): (
        "readers trust more than they check"
    ),
    ("test_audit_readers", "test_report_compare_grade_refuse_what_check_refuses"): (
        "readers trust more than they check"
    ),
    ("test_audit_readers", "test_resume_refuses_an_edited_record_up_front"): (
        "readers trust more than they check"
    ),
    ("test_audit_readers", "test_baseline_is_sealed_and_read_again"): (
        "readers trust more than they check"
    ),
    ("test_audit_readers", "test_against_refuses_a_tampered_run"): (
        "readers trust more than they check"
    ),
    ("test_fingerprint", "test_resume_refuses_an_edited_file_the_verifier_reaches_at_call_time"): (
        "two writers / changed --resume"
    ),
    (
        "test_trust_leftovers",
        "test_resume_refuses_an_edited_flat_layout_file_reached_at_call_time",
    ): "two writers / changed --resume",
    ("test_trust_leftovers", "test_checking_child_ignores_a_decoy_rlenv_in_the_cwd"): (
        "decoy rlenv package in the cwd"
    ),
    ("test_ray_replies", "test_a_forged_reply_changes_nothing_on_ray"): (
        "forged reply / grading patched in-process"
    ),
    ("test_bounded_inputs", "test_an_attack_from_the_world_is_one_rollout_status"): (
        "one output ends the run"
    ),
    ("test_bounded_inputs", "test_an_attack_from_an_api_model_is_one_rollout_status"): (
        "one output ends the run"
    ),
    ("test_verifier_catalog", "test_a_gaming_answer_fails"): "text verifier gamed",
    ("test_forged_replies", "test_a_forged_reply_changes_nothing"): (
        "forged reply / grading patched in-process"
    ),
    ("test_forged_replies", "test_a_rollout_cannot_rewrite_how_workers_start"): (
        "forged reply / grading patched in-process"
    ),
    ("test_worker_channel", "test_a_pickled_call_from_env_code_never_runs_in_the_orchestrator"): (
        "forged reply / grading patched in-process"
    ),
    ("test_worker_reuse", "test_nothing_an_earlier_rollout_left_reaches_the_next"): (
        "channel between rollouts"
    ),
    ("test_rm_batching", "test_scores_do_not_depend_on_batch_composition_or_order"): (
        "score depends on the machine or batch"
    ),
    ("test_rm_batching", "test_scores_do_not_depend_on_the_thread_count"): (
        "score depends on the machine or batch"
    ),
}
QUICK = ("test_code_attacks", "test_sandbox_view", "test_audit")
FULL = (
    *QUICK,
    "test_no_silent_success",
    "test_hard_limits",
    "test_run_lock",
    "test_isolation_channels",
    "test_ray_channels",
    "test_world_clock",
    "test_audit_readers",
    "test_fingerprint",
    "test_trust_leftovers",
    "test_ray_replies",
    "test_bounded_inputs",
    "test_verifier_catalog",
    "test_rm_batching",
    "test_forged_replies",
    "test_worker_channel",
    "test_worker_reuse",
)


def run_catalog(files: tuple[str, ...]) -> list[tuple[str, str, str, bool]]:
    """(file, function, case id, held) for every test case of `files`."""
    with tempfile.TemporaryDirectory(prefix="rlenv-attacks-") as scratch:
        report = Path(scratch) / "report.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            *(f"tests/{name}.py" for name in files),
        ]
        subprocess.run(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
        cases = []
        for case in ElementTree.parse(report).iter("testcase"):
            module = case.get("classname", "").rsplit(".", 1)[-1]
            name = case.get("name", "")
            function = name.split("[", 1)[0]
            skipped = case.find("skipped") is not None
            broken = case.find("failure") is not None or case.find("error") is not None
            if not skipped:
                cases.append((module, function, name, not broken))
        return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="only the in-process families")
    parser.add_argument(
        "--files",
        nargs="+",
        metavar="TEST_FILE",
        help="only these test files (e.g. test_forged_replies)",
    )
    options = parser.parse_args()
    os.environ.setdefault("RLENV_FULL_SUITE", "")  # under 7 test files: no full-suite guard
    files = tuple(options.files) if options.files else QUICK if options.quick else FULL
    cases = run_catalog(files)
    tried: Counter[str] = Counter()
    held: Counter[str] = Counter()
    broken: list[str] = []
    for module, function, name, ok in cases:
        family = FAMILIES.get((module, function))
        if family is None:
            continue
        tried[family] += 1
        held[family] += ok
        if not ok:
            broken.append(f"{module}::{name}")
    width = max((len(family) for family in tried), default=10)
    print(f"{'family':<{width}}  tried  held")
    for family in sorted(tried):
        print(f"{family:<{width}}  {tried[family]:>5}  {held[family]:>4}")
    print(f"{'total':<{width}}  {sum(tried.values()):>5}  {sum(held.values()):>4}")
    for name in broken:
        print(f"NOT HELD: {name}")


if __name__ == "__main__":
    main()
