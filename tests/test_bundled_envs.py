"""Every bundled env: twice with equal digests; solved by its baseline, not by a null policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, as_written, cli, readme_figures

SEARCH = ROOT / "envs" / "search.yaml"
FILE_EDIT = ROOT / "envs" / "file_edit.yaml"
RETAIL = ROOT / "envs" / "retail.yaml"

OUTCOME_DIGESTS = {
    SEARCH: "8f6e9f2952694ca3e1eef67d3629e96928bf20effeaa7c759700887295595503",
    FILE_EDIT: "3bfe30f11b6038960d23eb617511106d6dc9740a96b7c17ab8c3bd7dc79a6a2f",
    RETAIL: "2c3ca689247df48bfbfaa9d91a63e85e33c246714122114c6cf21c9156ebe2e8",
}
"""The bundled envs' outcome digests with their default policies (answers, tool calls, verdicts,
statuses: no reward-model score). The same on any machine: a machine where one differs fails
here (DESIGN: "The same outcome on any machine"). The run digest, which holds the reward
model's float scores, is only compared between two runs on one machine."""


def _run(spec: Path, out: Path, *extra: str, concurrency: int = 1) -> dict:
    # each worker loads the reward model (MiniLM, ~10 s of CPU importing its libraries) at its
    # start, and a rollout takes milliseconds: one worker, except where two are the point
    result = cli(
        "run", str(spec), "--out", str(out), "--json", "--concurrency", str(concurrency), *extra
    )
    assert result.returncode == 0, result.stderr
    # nothing on the user's terminal from a worker's exit (the search env's worker once printed
    # multiprocessing finalizers' tracebacks: its semaphores removed from its private /dev/shm)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return json.loads(result.stdout)


# the search env's two identical runs are in the next test (its runs feed the review checks)
@pytest.mark.parametrize(
    "spec", sorted(set((ROOT / "envs").glob("*.yaml")) - {SEARCH}), ids=lambda p: p.stem
)
def test_bundled_env_validates_and_verifies(spec: Path) -> None:
    assert cli("validate", str(spec)).returncode == 0
    verified = cli("verify", str(spec), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    result = json.loads(verified.stdout)
    assert result["identical"] and len(result["digests"]) == 2


def test_file_edit_env_outcome_digest_is_the_constant(tmp_path: Path) -> None:
    summary = _run(FILE_EDIT, tmp_path / "run")
    assert summary["outcome_digest"] == OUTCOME_DIGESTS[FILE_EDIT], "outcomes differ here"
    assert cli("check", str(tmp_path / "run")).returncode == 0


def test_search_env_two_stage_scoring_and_sanity(tmp_path: Path) -> None:
    assert cli("validate", str(SEARCH)).returncode == 0
    baseline = _run(SEARCH, tmp_path / "baseline", concurrency=2)
    again = _run(SEARCH, tmp_path / "again")
    assert again["digest"] == baseline["digest"], "two runs of the search env differ"
    assert baseline["outcome_digest"] == OUTCOME_DIGESTS[SEARCH], "outcomes differ on this machine"
    assert baseline["pass_rate"]["value"] >= 0.8
    assert baseline["fixtures"] == {"hit": 80}, "replay only: the service is not running"
    assert baseline["reward"]["count"] == 80
    # fixtures/search/rm/calibration.json: the raw reward also on the human 1-10 scale
    calibrated = baseline["reward_calibrated"]
    assert calibrated["n"] == 80 and calibrated["scale"] == [1, 10]
    assert 1 <= calibrated["calibrated_mean"] <= 10
    # (a quarter of the inputs: a policy that never answers scores 0 on any of them)
    null = _run(
        SEARCH, tmp_path / "null", "--model", "python:search_env.policies:null", "--limit", "10"
    )
    assert null["pass_rate"]["value"] == 0.0
    padded = _run(SEARCH, tmp_path / "padded", "--model", "python:search_env.policies:padded")
    assert padded["pass_rate"]["value"] == 0.0
    assert padded["reward"]["mean"] > baseline["reward"]["mean"], "the RM pays for padding"
    assert "high_suspect_rate" in {flag["name"] for flag in padded["flags"]}
    # the README's figures for these runs
    baseline_figure, null_figure = readme_figures(
        r"Baseline policy \(`search_env\.policies:baseline`\) scores (\d\.\d+),"
        r" `:null` scores (\d+), `:padded` \(a length-and-keyword hacker\) passes `mentions`"
        r" but never `exact`"
    )
    assert as_written(baseline["pass_rate"]["value"], baseline_figure) == baseline_figure
    assert as_written(null["pass_rate"]["value"], null_figure) == null_figure
    rates = {name: row["rate"] for name, row in padded["verifiers"].items()}
    assert rates["mentions"] > 0 and rates["exact"] == 0

    # issue 16's review of the three as checkpoints: generations side by side, histograms on
    # shared bins, and the calibrated alignment gap (rubric labels of each run's rollouts)
    humans = []
    for name in ("baseline", "padded", "null"):
        labels = tmp_path / f"{name}.human.jsonl"
        made = subprocess.run(
            [
                sys.executable,
                str(ROOT / "envs" / "search_env" / "make_human_scores.py"),
                "--label-run",
                str(tmp_path / name),
                "--out",
                str(labels),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        humans += ["--human", f"{tmp_path / name}={labels}"]
    runs = [str(tmp_path / name) for name in ("baseline", "padded", "null")]
    done = cli(
        "compare",
        *runs,
        *humans,
        "--labels",
        "sft,rl-100,rl-200",
        "--json",
        "--out",
        str(tmp_path / "cmp"),
    )
    assert done.returncode == 0, done.stderr
    compared = json.loads(done.stdout)
    assert compared["generations"]["rows"] and len(compared["generations"]["runs"]) == 3
    assert {"reward", "length"} <= set(compared["histograms"])
    gaps = [row["calibrated_gap"] for row in compared["runs"]]
    assert gaps[0] is not None and gaps[1] is not None and gaps[1] > gaps[0], gaps
    assert (tmp_path / "cmp" / "compare.html").is_file()
