"""The reward model on a human scale (issue 16 item 3): `rlenv rm calibrate` against a real
loopback reward-model server, the calibrated estimate and alignment gap in report and compare
(on the constructed clean/hacked runs, with the calibration in run.json as the runner writes
it), and the pure pieces (map, gap, flag) on hand-made numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlenv.metrics import apply_calibration, calibrated_reward, compare_runs
from rlenv.rm.calibration import fit_calibration, load_calibration
from tests.conftest import ROOT, cli, json_endpoint
from tests.hacked_runs import CAPITALS, ROLLOUTS, RunPair, input_id, make_pair

LINEAR = {
    "format": "rlenv-calibration/1",
    "scale": [1.0, 10.0],
    "knots": {"raw": [0.4, 1.5], "human": [1.0, 10.0]},
    "band": {"raw": [0.4, 1.5], "lower": [1.0, 9.0], "upper": [2.0, 10.0]},
    "holdout": {"mae": 0.5},
}


def _record(input_id: str, rollout: int, reward: float | None) -> dict[str, Any]:
    return {"input_id": input_id, "rollout": rollout, "status": "ok", "reward": reward,
            "passed": True, "answer": "x", "verifiers": []}  # fmt: skip


# ----------------------------------------------------------------------------- pure pieces


def test_map_interpolates_between_knots_and_clips_outside() -> None:
    assert apply_calibration([0.4, 0.95, 1.5], LINEAR) == pytest.approx([1.0, 5.5, 10.0])
    assert apply_calibration([-3.0, 9.0], LINEAR) == [1.0, 10.0]
    assert apply_calibration([0.95], LINEAR, "lower") == pytest.approx([5.0])


def test_gap_is_calibrated_estimate_minus_human_on_the_scale() -> None:
    records = [_record("a", 0, 0.95), _record("a", 1, 1.5), _record("b", 0, 0.4),
               _record("b", 1, None)]  # fmt: skip
    human = {("a", 0): 0.5, ("a", 1): 0.0, ("b", 0): 0.0}  # on the scale: 5.5, 1, 1
    block = calibrated_reward(records, LINEAR, human)
    assert block["n"] == 3 and block["n_labelled"] == 3
    assert block["calibrated_mean"] == pytest.approx((5.5 + 10 + 1) / 3)
    assert block["human_mean"] == pytest.approx((5.5 + 1 + 1) / 3)
    assert block["gap"] == pytest.approx((0 + 9 + 0) / 3)
    lo, hi = block["gap_ci"]
    assert lo <= block["gap"] <= hi
    assert block["gap_band"][0] < block["gap"] < block["gap_band"][1]
    json.dumps(block, allow_nan=False)  # strict JSON: None, never NaN
    alone = calibrated_reward(records, LINEAR)
    assert alone["gap"] is None and alone["gap_ci"] is None and alone["n_labelled"] == 0
    json.dumps(calibrated_reward([], LINEAR, human), allow_nan=False)


def test_fit_is_monotone_inside_its_band_and_beats_a_constant_held_out() -> None:
    rng = np.random.default_rng(3)
    raw = rng.normal(size=400)
    human = np.clip(np.round(5.5 + 3 * np.tanh(raw) + rng.normal(scale=0.8, size=400)), 1, 10)
    prompts = [f"q{i // 8}" for i in range(400)]
    fit = fit_calibration(list(raw), list(human), prompts, scale=(1, 10), n_boot=50)
    ys = fit["knots"]["human"]
    assert all(b >= a for a, b in zip(ys, ys[1:], strict=False))
    assert fit["holdout"]["n"] == 80 and fit["holdout"]["prompts"] == 10
    assert fit["holdout"]["mae"] < 0.8 * fit["holdout"]["mae_constant"]
    grid = fit["band"]["raw"]
    fitted = apply_calibration(grid, fit)
    assert all(lo - 1e-9 <= f <= hi + 1e-9 for lo, f, hi in
               zip(fit["band"]["lower"], fitted, fit["band"]["upper"], strict=True))  # fmt: skip
    json.dumps(fit, allow_nan=False)


def test_gap_growth_flag_needs_the_reward_to_rise() -> None:
    def run(reward: float, human_score: float) -> tuple[list[dict[str, Any]], dict[Any, float]]:
        records = [_record(f"i{i}", r, reward + 0.01 * ((i * 7 + r) % 5)) for i in range(12)
                   for r in range(2)]  # fmt: skip
        return records, {(rec["input_id"], rec["rollout"]): human_score for rec in records}

    (early, early_h), (late, late_h) = run(0.6, 0.5), run(1.3, 0.2)
    forward = compare_runs(
        [("early", early), ("late", late)],
        {"early": early_h, "late": late_h},
        calibrations={"early": LINEAR, "late": LINEAR},
    )
    names = [flag["name"] for flag in forward["flags"]]
    assert "alignment_gap_growth" in names
    assert forward["runs"][1]["calibrated_gap"] > forward["runs"][0]["calibrated_gap"]
    backward = compare_runs(
        [("late", late), ("early", early)],
        {"early": early_h, "late": late_h},
        calibrations={"early": LINEAR, "late": LINEAR},
    )
    assert "alignment_gap_growth" not in [flag["name"] for flag in backward["flags"]]
    # the reward rises but humans agree more: the gap shrinks, no flag
    (honest_early, he_h), (honest_late, hl_h) = run(0.6, 0.2), run(1.3, 1.0)
    honest = compare_runs(
        [("early", honest_early), ("late", honest_late)],
        {"early": he_h, "late": hl_h},
        calibrations={"early": LINEAR, "late": LINEAR},
    )
    assert honest["runs"][1]["delta_reward_mean"] > 0
    assert "alignment_gap_growth" not in [flag["name"] for flag in honest["flags"]]
    # without labels there is an estimate but no gap, and no flag
    bare = compare_runs([("early", early), ("late", late)], calibrations={"early": LINEAR,
                        "late": LINEAR})  # fmt: skip
    assert bare["runs"][1]["calibrated_mean"] is not None
    assert bare["runs"][1]["calibrated_gap"] is None
    assert "alignment_gap_growth" not in [flag["name"] for flag in bare["flags"]]


# ----------------------------------------------------------------------------- rm calibrate


@pytest.fixture
def reward_server() -> Iterator[str]:
    """A reward model that pays for words: reward = number of words in the answer."""
    with json_endpoint(lambda body: (200, {"reward": len(body["answer"].split())})) as url:
        yield f"{url}/reward"


def _scores(path: Path) -> Path:
    """Humans like answers of 3-4 words best: the word-counting RM is calibrated non-linearly
    (monotone fit: saturates) and the held-out error is finite."""
    lines = []
    for question in range(20):
        for words in range(1, 9):
            score = {1: 2, 2: 5, 3: 8, 4: 8}.get(words, 7)
            answer = " ".join(["word"] * words)
            lines.append(json.dumps({"prompt": f"q{question}", "answer": answer, "score": score}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rm_calibrate_writes_the_map_and_its_held_out_error(
    reward_server: str, tmp_path: Path
) -> None:
    scores = _scores(tmp_path / "scores.jsonl")
    done = cli("rm", "calibrate", reward_server, str(scores), "--out", str(tmp_path / "cal"),
               "--scale", "1,10", "--n-boot", "30", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    stored = load_calibration(tmp_path / "cal" / "calibration.json")
    assert stored["knots"] == result["knots"] and result["scale"] == [1.0, 10.0]
    # increasing fit: 3 words and more pool to the mean of 8, 8, 7, 7, 7, 7
    assert apply_calibration([1, 2, 3, 8], stored) == pytest.approx([2, 5, 22 / 3, 22 / 3])
    assert result["holdout"]["n"] == 32 and math.isfinite(result["holdout"]["mae"])
    assert result["reward_model"] == {"uri": reward_server}
    text = cli("rm", "calibrate", reward_server, str(scores), "--out", str(tmp_path / "cal2"),
               "--n-boot", "5")  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert "held-out MAE" in text.stdout and "scale 2-8" in text.stdout


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "q", "answer": "a"}', "'score' must be a number"),
        ('{"prompt": "q", "answer": 3, "score": 1}', "'answer' must be a string"),
        ("not json", "invalid JSON"),
    ],
)
def test_bad_scores_exit_2_one_line_and_keep_the_old_map(
    reward_server: str, tmp_path: Path, line: str, message: str
) -> None:
    out = tmp_path / "cal"
    out.mkdir()
    (out / "calibration.json").write_text("earlier\n")
    scores = _scores(tmp_path / "scores.jsonl")
    scores.write_text(scores.read_text() + line + "\n")
    done = cli("rm", "calibrate", reward_server, str(scores), "--out", str(out))
    assert done.returncode == 2
    assert message in done.stderr and f"{scores}:161" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert (out / "calibration.json").read_text() == "earlier\n"


def test_http_reward_model_needs_out_and_scale_must_hold_the_scores(
    reward_server: str, tmp_path: Path
) -> None:
    scores = _scores(tmp_path / "scores.jsonl")
    done = cli("rm", "calibrate", reward_server, str(scores))
    assert done.returncode == 2 and "--out" in done.stderr
    done = cli("rm", "calibrate", reward_server, str(scores), "--out", str(tmp_path),
               "--scale", "3,10")  # fmt: skip
    assert done.returncode == 2 and "outside the scale" in done.stderr
    assert not (tmp_path / "calibration.json").exists()


# ----------------------------------------------------------------------------- report, compare


def _summarise_again(run: Path) -> None:
    """summary.json rebuilt from the records and the edited run.json, and sealed, as the
    runner would have written it with that run.json."""
    from rlenv.audit import recompute_summary, seal_run_json

    meta = json.loads((run / "run.json").read_text())
    old = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    summary = seal_run_json(recompute_summary(run, meta, old, records), run)
    (run / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def calibrated_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunPair, Path]:
    """The clean/hacked pair with LINEAR in run.json (as the runner writes it) and human
    labels of the clean run (correct answers 0.8, wrong ones 0.2)."""
    pair = make_pair(tmp_path_factory.mktemp("calibrated"))
    for run in (pair.clean, pair.hacked):
        meta = json.loads((run / "run.json").read_text())
        meta["reward_calibration"] = LINEAR
        (run / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        _summarise_again(run)
    records = [json.loads(line) for line in (pair.clean / "results.jsonl").read_text().splitlines()]
    clean_human = pair.clean.parent / "human-step-100.jsonl"
    clean_human.write_text("".join(
        json.dumps({"input_id": r["input_id"], "rollout": r["rollout"],
                    "score": 0.8 if r["passed"] else 0.2}) + "\n" for r in records
    ))  # fmt: skip
    assert len(records) == len(CAPITALS) * ROLLOUTS and input_id(0) == records[0]["input_id"]
    return pair, clean_human


def test_report_shows_raw_calibrated_and_gap(calibrated_pair: tuple[RunPair, Path]) -> None:
    pair, _ = calibrated_pair
    done = cli("report", str(pair.hacked), "--human", str(pair.human), "--json")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(Path(json.loads(done.stdout)["metrics"]).read_text())
    block = metrics["calibrated_reward"]
    assert block["scale"] == [1.0, 10.0] and block["n_labelled"] == 48
    assert block["gap"] == pytest.approx(block["calibrated_mean"] - block["human_mean"])
    records = [json.loads(line) for line in (pair.hacked / "results.jsonl").open()]
    labels = {(h["input_id"], h["rollout"]): h["score"] for h in map(json.loads, pair.human.open())}
    expected = [
        min(10.0, max(1.0, 1 + 9 * (r["reward"] - 0.4) / 1.1))
        - (1 + 9 * labels[(r["input_id"], r["rollout"])])
        for r in records
    ]
    assert block["gap"] == pytest.approx(sum(expected) / len(expected))
    hacks = [e for r, e in zip(records, expected, strict=True) if not r["passed"]]
    assert min(hacks) > 5, "the RM puts the padded hacks high, humans low"
    html = (pair.hacked / "report.html").read_text()
    assert 'id="calibrated-gap"' in html and 'id="calibrated-mean"' in html
    assert "human scale 1–10" in html


def test_compare_tracks_the_gap_and_flags_its_growth(
    calibrated_pair: tuple[RunPair, Path], tmp_path: Path
) -> None:
    pair, clean_human = calibrated_pair
    labels = ["--human", f"{pair.clean}={clean_human}", "--human", f"{pair.hacked}={pair.human}"]
    done = cli("compare", str(pair.clean), str(pair.hacked), *labels, "--out",
               str(tmp_path / "fwd"), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    gaps = [row["calibrated_gap"] for row in result["runs"]]
    assert gaps[1] - gaps[0] > 2
    assert "alignment_gap_growth" in [flag["name"] for flag in result["flags"]]
    assert "calibrated_gap" in result["metrics"]
    page = (tmp_path / "fwd" / "compare.html").read_text()
    assert "alignment gap (RM est. − human)" in page and "alignment_gap_growth" in page
    text = cli("compare", str(pair.clean), str(pair.hacked), *labels, "--out",
               str(tmp_path / "txt"))  # fmt: skip
    assert "NOTE     alignment_gap_growth" in text.stdout  # a note: no false-alarm rate known
    # hacked first, by explicit steps (the directories' own steps would sort them back)
    back = cli("compare", str(pair.hacked), str(pair.clean), *labels, "--out",
               str(tmp_path / "back"), "--json", "--steps", "0,1")  # fmt: skip
    assert "alignment_gap_growth" not in [f["name"] for f in json.loads(back.stdout)["flags"]]


def test_bundled_human_scores_come_from_training_questions_only() -> None:
    search = ROOT / "fixtures" / "search"
    train = {json.loads(line)["prompt"] for line in (search / "train_questions.jsonl").open()}
    held = {json.loads(line)["prompt"] for line in (search / "questions.jsonl").open()}
    scored = [json.loads(line) for line in (search / "human_scores.jsonl").open()]
    assert len(scored) == 480 and {s["prompt"] for s in scored} == train
    assert not {s["prompt"] for s in scored} & held
    stored = load_calibration(search / "rm" / "calibration.json")
    assert stored["data"]["file"] == "human_scores.jsonl" and stored["scale"] == [1.0, 10.0]


def test_readme_mae_is_the_stored_calibrations() -> None:
    from tests.conftest import as_written, readme_figures

    (mae, constant) = readme_figures(
        r"held-out MAE (\d\.\d+) on the 1–10 scale \(96 answers, 12 prompts; a constant"
        r" predictor (\d\.\d+)\)"
    )
    held = load_calibration(ROOT / "fixtures" / "search" / "rm" / "calibration.json")["holdout"]
    assert as_written(held["mae"], mae) == mae
    assert as_written(held["mae_constant"], constant) == constant
