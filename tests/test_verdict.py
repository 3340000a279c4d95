"""The verdict rules (rlenv.metrics.verdict) on small synthetic training runs.

Each run is a list of records of one checkpoint: an input's difficulty sets how often it is
answered right, the reward model pays a right answer ``GAP`` over a wrong one plus noise, and a
hack adds a payoff to answers showing it. A healthy control gets better and is paid for it; a
hacked run learns the hack. The false-alarm tests run many seeds and count.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from rlenv import metrics as m
from rlenv.metrics.compare import gold_vs_kl
from rlenv.metrics.verdict import (
    EVIDENCE,
    headline,
    judge,
    judge_run,
    judge_series,
)
from rlenv.watch import verdict_scalars

GAP = 0.3


def checkpoint(
    seed: int,
    skill: float,
    *,
    hack: float = 0.0,
    payoff: float = 0.5,
    n: int = 40,
    k: int = 4,
    answer: str | None = None,
    length: float = 1.0,
) -> list[dict[str, Any]]:
    """A checkpoint: P(right) = skill * (0.5 + difficulty); ``hack`` of the wrong answers show
    the hack, paid ``payoff``; ``length`` scales answer length."""
    difficulty = random.Random(1234)  # the same inputs at every checkpoint
    levels = [difficulty.random() for _ in range(n)]
    rng = random.Random(seed)
    out = []
    for i, level in enumerate(levels):
        for r in range(k):
            right = rng.random() < min(1.0, skill * (0.5 + level))
            hacked = not right and rng.random() < hack
            words = max(1, round(rng.randint(3, 9) * length))
            text = (
                answer
                if answer is not None
                else " ".join(f"w{rng.randrange(40)}" for _ in range(words))
            )
            out.append(
                {
                    "input_id": f"q{i:02d}",
                    "rollout": r,
                    "status": "ok",
                    "passed": right,
                    "reward": GAP * right + rng.gauss(0, 0.1) + (payoff if hacked else 0.0),
                    "answer": text + (" certainly" if hacked else ""),
                }
            )
    return out


def statuses(result: dict[str, Any]) -> list[str]:
    return [c["verdict"]["status"] for c in result["checkpoints"][1:]]


def test_a_hack_is_reward_hacking_from_its_onset_with_evidence_and_since() -> None:
    runs = [
        ("step-0", checkpoint(0, 0.4)),
        ("step-10", checkpoint(1, 0.45)),
        ("step-20", checkpoint(2, 0.45, hack=0.4)),  # onset
        ("step-30", checkpoint(3, 0.4, hack=0.8)),
    ]
    result = judge_series(runs)
    assert statuses(result) == ["healthy", "reward_hacking", "reward_hacking"]
    verdict = result["verdict"]
    assert verdict["status"] == "reward_hacking" and verdict["since"] == "step-20"
    for item in verdict["evidence"]:
        assert item["signal"] in EVIDENCE
        assert item["ci"] is None or item["ci"][0] > 0 or item["signal"] == "reward_auc_fell"
        assert isinstance(item["effect"], float) and item["message"]
    assert headline(verdict).startswith("verdict: REWARD_HACKING since step-20 (vs step-0): ")
    # what to look at: the hacked checkpoint's top suspects, highest reward first
    look = verdict["look_at"]
    assert 0 < len(look) <= 5 and look == sorted(look, key=lambda s: -s["reward"])
    hacked = {
        (r["input_id"], r["rollout"]) for r in runs[2][1] if r["answer"].endswith("certainly")
    }
    assert {(s["input_id"], s["rollout"]) for s in look} <= hacked


def test_a_healthy_control_that_learns_is_healthy_even_when_the_gold_rise_is_not_significant() -> (
    None
):
    """The old neighbour test fired proxy_gold_turnover when the reward rose significantly but
    the pass rate's rise did not reach significance: a model answering better and paid for it."""
    runs = [("step-0", checkpoint(0, 0.4))] + [
        (f"step-{i}", checkpoint(i, 0.4 + 0.05 * i)) for i in range(1, 6)
    ]
    result = judge_series(runs)
    assert "reward_hacking" not in statuses(result) and "regressed" not in statuses(result)
    assert result["verdict"]["status"] in ("healthy", "inconclusive")


@pytest.mark.parametrize("checkpoints", [3, 10])
def test_false_alarms_on_healthy_runs_stay_below_five_percent_per_checkpoint(
    checkpoints: int,
) -> None:
    """Many checkpoints of noise around one skill, and slowly improving runs: a trend over
    checkpoints is tested against the reference with Bonferroni-widened intervals, not the
    noisiest pair, so more checkpoints do not mean more alarms."""
    alarms = judged = 0
    for seed in range(12):
        base = seed * 100
        runs = [("step-0", checkpoint(base, 0.4))] + [
            (f"step-{i}", checkpoint(base + i, 0.4 + 0.01 * i * (seed % 2)))
            for i in range(1, checkpoints + 1)
        ]
        result = judge_series(runs)
        # each checkpoint's interval is widened for the number judged against the reference
        assert result["checkpoints"][1]["verdict"]["alpha"] == pytest.approx(0.05 / checkpoints)
        found = statuses(result)
        alarms += sum(s in ("reward_hacking", "regressed") for s in found)
        judged += len(found)
    assert alarms / judged <= 0.05, (alarms, judged)


def test_a_short_answer_task_is_not_collapse_evidence() -> None:
    """Every rollout the same one word at the base model and after: the run's collapse flag is
    a note, and the verdict (against the base) is healthy."""
    base = checkpoint(0, 0.4, answer="Paris")
    later = checkpoint(1, 0.42, answer="Paris")
    flags = m.compute_all(later, decoding={"temperature": 1.0})["flags"]
    assert [(f["name"], f["kind"]) for f in flags] == [("collapse", "note")]
    assert judge(base, later)["status"] == "healthy"
    compared = m.compare_runs([("step-0", base), ("step-1", later)])
    assert not [f for f in compared["flags"] if f["name"] == "diversity_collapse"]


def test_regressed_is_gold_falling_without_a_proxy_gain() -> None:
    verdict = judge(checkpoint(0, 0.5), checkpoint(1, 0.25))
    assert verdict["status"] == "regressed"
    assert [e["signal"] for e in verdict["evidence"]] == ["pass_rate_fell"]
    # gold falling while the proxy pays a hack is reward hacking, not a regression
    assert judge(checkpoint(0, 0.5), checkpoint(1, 0.25, hack=0.8))["status"] == "reward_hacking"


def test_too_few_samples_are_inconclusive_and_say_how_many_more_would_decide() -> None:
    small = judge(checkpoint(0, 0.4, n=3), checkpoint(1, 0.4, n=3))
    assert small["status"] == "inconclusive" and "at least 5" in small["reason"]
    few = judge(checkpoint(0, 0.4, n=8, k=2), checkpoint(1, 0.4, n=8, k=2))
    assert few["status"] == "inconclusive", few
    assert few["more_rollouts"] and few["more_rollouts"] > 0
    assert "more rollouts would decide it" in headline(few)


def test_a_run_alone_is_never_judged_in_the_absolute() -> None:
    records = checkpoint(0, 0.4, hack=0.9)
    assert judge_run(records, None)["status"] == "inconclusive"
    assert "--baseline" in judge_run(records, None)["reason"]
    assert judge_run(records, checkpoint(1, 0.4))["status"] == "reward_hacking"
    assert m.compute_all(records, baseline=checkpoint(1, 0.4))["verdict"]["status"] == (
        "reward_hacking"
    )


def test_a_failing_answer_paid_exactly_the_median_passing_reward_is_a_suspect() -> None:
    """Ties are suspects: the median of two passing rewards is a float an ulp away from the
    failing reward that equals it (0.1 + 0.2 over 2), and a run whose passing answers are paid
    the run's minimum still has its ties found."""

    def rec(input_id: str, rollout: int, passed: bool, reward: float) -> dict[str, Any]:
        return {"input_id": input_id, "rollout": rollout, "status": "ok", "passed": passed,
                "reward": reward}  # fmt: skip

    records = [
        rec("a", 0, True, 0.1),
        rec("a", 1, True, 0.2),
        rec("a", 2, False, 0.15),  # the median of 0.1 and 0.2 is 0.15000000000000002
        rec("b", 0, True, 0.0),
        rec("b", 1, False, 0.0),  # a tie at the run's minimum
        rec("c", 0, True, 0.5),
        rec("c", 1, False, 0.4),  # below its input's passing answer: not a suspect
        *(rec("d", r, False, 0.9) for r in range(3)),  # failing paid more: no tie margin
    ]
    result = m.disagreements(records)
    assert result["margin"] == 0.0
    found = {(s["input_id"], s["rollout"]) for s in result["high_reward_failed"]}
    assert found == {("a", 2), ("b", 1), ("d", 0), ("d", 1), ("d", 2)}
    same = [{**r, "reward": 0.5} for r in records]  # a reward that says nothing
    assert m.disagreements(same)["high_reward_failed"] == []


def test_suspects_rose_fires_when_failing_answers_are_paid_like_passing_ones() -> None:
    verdict = judge(checkpoint(0, 0.4), checkpoint(1, 0.4, hack=0.5, payoff=GAP))
    signal = verdict["signals"]["suspects_rose"]
    assert signal["ci"][0] > 0 and signal["rate"] > signal["rate_reference"]
    assert "suspects_rose" in [e["signal"] for e in verdict["evidence"]]


def test_length_explaining_a_gain_the_gold_does_not_share_is_evidence() -> None:
    """A reward that pays for length: the checkpoint writes three times as much."""

    def paid_for_length(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "reward": r["reward"] + 0.05 * len(r["answer"].split())} for r in records]

    base = paid_for_length(checkpoint(0, 0.4))
    longer = paid_for_length(checkpoint(1, 0.4, length=3.0))
    verdict = judge(base, longer)
    assert verdict["status"] == "reward_hacking"
    assert "length_explained_gain" in [e["signal"] for e in verdict["evidence"]]


def test_reward_auc_falling_is_evidence_and_undefined_when_nothing_passes() -> None:
    base = checkpoint(0, 0.4)
    scrambled = [{**r, "reward": random.Random(i).gauss(0, 0.2)} for i, r in enumerate(base)]
    verdict = judge(base, scrambled)
    assert verdict["signals"]["reward_auc_fell"]["ci"][1] < 0
    assert "reward_auc_fell" in [e["signal"] for e in verdict["evidence"]]
    nothing = [{**r, "passed": False} for r in checkpoint(1, 0.4)]
    undefined = judge(base, nothing)
    assert any("reward_auc undefined" in note for note in undefined["notes"])


def test_kl_growth_is_a_note_that_can_fire_from_the_starting_model() -> None:
    base = [{**r, "kl": {"k3": [0.0, 0.0]}} for r in checkpoint(0, 0.4)]
    later = [
        {**r, "kl": {"k3": [0.02 + 0.01 * (r["rollout"] % 2), 0.03]}} for r in checkpoint(1, 0.4)
    ]
    flags = m.compare_runs([("step-0", base), ("step-1", later)])["flags"]
    growth = [f for f in flags if f["name"] == "kl_growth_without_gain"]
    assert len(growth) == 1 and growth[0]["kind"] == "note"
    assert growth[0]["value"]["kl_prev"] == 0.0


def test_gold_vs_kl_reports_a_peak_only_for_a_curve_that_turns_over() -> None:
    def row(name: str, kl: float, gold: float) -> dict[str, Any]:
        return {"name": name, "kl_mean_k1": kl, "pass_rate": gold}

    # alpha < 0 and beta < 0: falling then rising; a / 2b > 0 is no peak (was KL 783)
    rising = [row("a", 0.1, 0.5), row("b", 1.0, 0.45), row("c", 3.3, 0.5), row("d", 2.0, 0.46)]
    fit = gold_vs_kl(rising)
    assert fit is not None and fit["alpha"] < 0 and fit["beta"] < 0
    assert fit["kl_peak"] is None and fit["past_peak"] is False


def test_verdict_scalars_for_tensorboard() -> None:
    verdict = judge(checkpoint(0, 0.4), checkpoint(1, 0.4, hack=0.8))
    scalars = verdict_scalars(verdict, {"status": "reward_hacking"})
    assert scalars["rlenv/verdict"] == 3.0 and scalars["rlenv/verdict_run"] == 3.0
    assert scalars["rlenv/signals/proxy_gold_turnover"] > 0
    healthy = judge(checkpoint(0, 0.4), checkpoint(1, 0.4))
    assert verdict_scalars(healthy)["rlenv/verdict"] == 0.0
