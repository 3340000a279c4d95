"""Tests for rlenv.metrics: each function against a closed form, brute force or scipy."""

from __future__ import annotations

import itertools
import json
import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import rfc8785
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from rlenv import metrics as m
from rlenv.jsonl import load_human
from rlenv.metrics.verdict import judge_series


def rec(
    input_id: str,
    rollout: int,
    passed: bool | None = True,
    reward: float | None = None,
    answer: str | None = "x",
    status: str = "ok",
    verifiers: list[dict[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
    kl: dict[str, float] | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "input_id": input_id,
        "input_index": 0,
        "rollout": rollout,
        "seed": 0,
        "model": "python:m:f",
        "status": status,
        "error": None,
        "messages": [],
        "tool_calls": [],
        "answer": answer,
        "verifiers": verifiers if verifiers is not None else [],
        "passed": None if status == "infra_error" else passed,
        "reward": reward,
        "usage": usage or {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "timing": {},
    }
    if kl is not None:
        record["kl"] = kl
    return record


def synthetic_run(
    n_inputs: int, k: int, seed: int, p_pass: float = 0.5, reward_shift: float = 0.0
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n_inputs):
        difficulty = rng.random()
        for r in range(k):
            passed = rng.random() < p_pass * (0.5 + difficulty)
            words = " ".join(f"w{rng.randrange(50)}" for _ in range(rng.randrange(3, 12)))
            out.append(
                rec(
                    f"in{i:03d}",
                    r,
                    passed,
                    reward=rng.gauss(float(passed), 0.5) + reward_shift,
                    answer=words,
                )
            )
    return out


# ----------------------------------------------------------------------------- wilson


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        # p=0.8: center (0.8 + 1.9208/10)/1.38416 = 0.716738, half 1.96*sqrt(.025604)/1.38416
        (8, 10, (0.490160, 0.943302)),
        (5, 10, (0.236593, 0.763407)),
        # 0 successes: upper = z^2/n / (1 + z^2/n) = 0.38416/1.38416
        (0, 10, (0.0, 0.277540)),
        (10, 10, (0.722460, 1.0)),
    ],
)
def test_wilson_hand_values(successes: int, n: int, expected: tuple[float, float]) -> None:
    lo, hi = m.wilson_interval(successes, n)
    assert lo == pytest.approx(expected[0], abs=2e-5)
    assert hi == pytest.approx(expected[1], abs=2e-5)


def test_wilson_edge_cases() -> None:
    assert m.wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        m.wilson_interval(3, 2)
    narrow = m.wilson_interval(50, 100, z=1.0)
    wide = m.wilson_interval(50, 100, z=2.576)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]


# ----------------------------------------------------------------------------- pass@k


def brute_force(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    any_pass = sum(any(outcomes[i] for i in s) for s in subsets)
    all_pass = sum(all(outcomes[i] for i in s) for s in subsets)
    return Fraction(any_pass, len(subsets)), Fraction(all_pass, len(subsets))


def test_pass_at_k_and_hat_k_match_subset_enumeration() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                any_pass, all_pass = brute_force(n, c, k)
                assert m.pass_at_k(n, c, k) == pytest.approx(float(any_pass), abs=1e-12)
                assert m.pass_hat_k(n, c, k) == pytest.approx(float(all_pass), abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(200, 13, 10), (200, 0, 100), (100, 99, 1), (50, 5, 25)])
def test_pass_at_k_large_n_matches_comb_formulas(n: int, c: int, k: int) -> None:
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    chen_numpy = 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
    assert m.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-10, abs=1e-12)
    assert m.pass_at_k(n, c, k) == pytest.approx(chen_numpy, rel=1e-12, abs=1e-12)
    closed_hat = Fraction(math.comb(c, k), math.comb(n, k))
    assert m.pass_hat_k(n, c, k) == pytest.approx(float(closed_hat), rel=1e-10, abs=1e-300)


def test_pass_at_k_rejects_bad_arguments() -> None:
    for n, c, k in [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)]:
        with pytest.raises(ValueError):
            m.pass_at_k(n, c, k)
        with pytest.raises(ValueError):
            m.pass_hat_k(n, c, k)


nck = st.integers(1, 60).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
)


@settings(max_examples=300, deadline=None)
@given(nck)
def test_pass_at_k_properties(args: tuple[int, int, int]) -> None:
    n, c, k = args
    at, hat = m.pass_at_k(n, c, k), m.pass_hat_k(n, c, k)
    assert 0.0 <= hat <= 1.0 and 0.0 <= at <= 1.0
    assert hat <= at + 1e-12  # equal at k=1, where the two products round differently
    if k == 1:
        assert at == pytest.approx(c / n) and hat == pytest.approx(c / n)
    if k < n:
        assert m.pass_at_k(n, c, k + 1) >= at
        assert m.pass_hat_k(n, c, k + 1) <= hat
    if c < n:
        assert m.pass_at_k(n, c + 1, k) >= at
        assert m.pass_hat_k(n, c + 1, k) >= hat


def test_pass_k_table_averages_inputs_and_excludes_infra_errors() -> None:
    records = [
        rec("a", 0, True), rec("a", 1, False), rec("a", 2, False),
        rec("b", 0, True), rec("b", 1, True), rec("b", 2, True),
        rec("b", 3, status="infra_error"),  # not a model failure: b has n=3, c=3
        rec("c", 0, status="infra_error"),  # an input with only infra errors drops out
    ]  # fmt: skip
    table = m.pass_k_table(records)
    assert sorted(table["pass@k"]) == [1, 2, 3]
    assert table["pass@k"][1] == pytest.approx((1 / 3 + 1) / 2)
    assert table["pass@k"][2] == pytest.approx((m.pass_at_k(3, 1, 2) + 1) / 2)
    assert table["pass^k"][2] == pytest.approx((0 + 1) / 2)
    assert table["pass^k"][3] == pytest.approx(0.5)
    assert m.pass_k_table(records, ks=[1, 3, 10]) == {
        "pass@k": {1: table["pass@k"][1], 3: table["pass@k"][3]},
        "pass^k": {1: table["pass^k"][1], 3: table["pass^k"][3]},
    }
    assert m.pass_k_table([]) == {"pass@k": {}, "pass^k": {}}


# ----------------------------------------------------------------------------- correlations


def test_rankdata_pearson_spearman_match_scipy() -> None:
    rng = np.random.default_rng(3)
    for trial in range(30):
        n = int(rng.integers(3, 60))
        x = rng.integers(0, 6, size=n).astype(float)  # many ties
        y = x * rng.normal() + rng.normal(size=n) if trial % 2 else rng.normal(size=n)
        np.testing.assert_allclose(m.rankdata(x), scipy.stats.rankdata(x))
        if np.ptp(x) == 0:
            assert m.spearman(x.tolist(), y.tolist()) is None
            continue
        assert m.pearson(x.tolist(), y.tolist()) == pytest.approx(
            scipy.stats.pearsonr(x, y).statistic, abs=1e-12
        )
        assert m.spearman(x.tolist(), y.tolist()) == pytest.approx(
            scipy.stats.spearmanr(x, y).statistic, abs=1e-12
        )


def test_correlations_undefined_are_none() -> None:
    assert m.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    assert m.spearman([1.0], [2.0]) is None
    assert m.spearman([3.0, 1.0, 2.0], [30.0, 10.0, 20.0]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([1.0, 2.0, 3.0], [3.0, 2.0, float("nan")]),  # NaN was ranked largest / ignored
        ([1.0, 2.0, 3.0, 4.0], [1.0, float("inf"), 2.0, 3.0]),
        ([float("-inf"), 2.0, 3.0], [1.0, 2.0, 3.0]),
        ([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]),  # constant, but mean-centering leaves 1e-17s
        ([1.0, 2.0, 3.0], [0.7, 0.7, 0.7]),
        ([1e200, -1e200, 3e200], [1.0, 2.0, 3.0]),  # squares overflow
        ([1.0, 2.0], [2.0, 1.0]),  # n < 3: always +-1, says nothing
    ],
)
def test_correlations_refuse_nan_constant_overflow_and_tiny_n(
    x: list[float], y: list[float]
) -> None:
    assert m.pearson(x, y) is None
    if not (len(x) >= 3 and all(np.isfinite(x + y)) and np.ptp(x) and np.ptp(y)):
        assert m.spearman(x, y) is None


# ----------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_deterministic_and_resamples_inputs() -> None:
    values = [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]] * 5
    first = m.bootstrap_ci(values, None, n_boot=500, seed=7)
    assert first == m.bootstrap_ci(values, None, n_boot=500, seed=7)
    assert first != m.bootstrap_ci(values, None, n_boot=500, seed=8)
    lo, hi = first
    assert lo is not None and hi is not None and lo < 7 / 12 < hi

    def pooled(clusters: list[list[float]]) -> float:
        flat = [v for c in clusters for v in c]
        return sum(flat) / len(flat)

    custom = m.bootstrap_ci(values, pooled, n_boot=500, seed=7)
    assert custom == pytest.approx(first, abs=1e-12)
    # Clustered: constant clusters -> resampling inputs, not rollouts, so the interval is as
    # wide as the between-input spread says, wider than an iid resample of 60 rollouts would be.
    clustered = [[1.0] * 3, [0.0] * 3] * 10
    c_lo, c_hi = m.bootstrap_ci(clustered, None, n_boot=2000, seed=0)
    assert c_lo is not None and c_hi is not None
    assert c_hi - c_lo == pytest.approx(2 * 1.96 * math.sqrt(0.25 / 20), rel=0.15)
    assert m.bootstrap_ci([], None) == (None, None)


def test_bootstrap_blocks_change_memory_not_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resamples are drawn in blocks (memory of a 10k-input run); any block size gives
    the interval one draw of every resample gives."""
    import rlenv.metrics.stats as stats

    rng = random.Random(3)
    values = [[float(rng.random() < 0.4) for _ in range(rng.randint(1, 3))] for _ in range(3001)]
    seen = set()
    for block in (10**9, 3001, 3001 * 7 + 5, stats.BOOTSTRAP_BLOCK):
        monkeypatch.setattr(stats, "BOOTSTRAP_BLOCK", block)
        seen.add(m.bootstrap_ci(values, None, n_boot=300, seed=11))
    assert len(seen) == 1 and None not in next(iter(seen))


def test_bootstrap_coverage_is_near_nominal() -> None:
    # Inputs have pass probabilities clip(N(0.6, 0.2), 0, 1); 4 rollouts each, 40 inputs.
    # E[clip(X, 0, 1)] = 0.6 - (0.2 * phi(2) - 0.4 * (1 - Phi(2))) - (negligible lower tail)
    truth = 0.6 - (0.2 * scipy.stats.norm.pdf(2) - 0.4 * scipy.stats.norm.sf(2))
    rng = np.random.default_rng(2024)
    covered, trials = 0, 200
    for t in range(trials):
        per_input_p = np.clip(rng.normal(0.6, 0.2, size=40), 0, 1)
        data = [(rng.random(4) < p).astype(float).tolist() for p in per_input_p]
        lo, hi = m.bootstrap_ci(data, None, n_boot=400, seed=t)
        assert lo is not None and hi is not None
        covered += lo <= truth <= hi
    assert 0.88 <= covered / trials <= 0.99


# ----------------------------------------------------------------------------- noise floor


def test_noise_floor_closed_form() -> None:
    records = []
    rates = [1.0, 0.5, 0.0, 0.75]
    for i, rate in enumerate(rates):
        for r in range(4):
            records.append(rec(f"i{i}", r, passed=r < rate * 4))
    var = np.var(rates, ddof=1) / len(rates)
    z = scipy.stats.norm.ppf(0.975) + scipy.stats.norm.ppf(0.8)
    assert m.noise_floor(records) == pytest.approx(z * math.sqrt(2 * var), rel=1e-9)
    z90 = scipy.stats.norm.ppf(0.995) + scipy.stats.norm.ppf(0.9)
    assert m.noise_floor(records, alpha=0.01, power=0.9) == pytest.approx(
        z90 * math.sqrt(2 * var), rel=1e-9
    )
    assert m.noise_floor(records[:4]) is None  # one input: undefined


def test_noise_floor_shrinks_as_one_over_sqrt_inputs() -> None:
    base = synthetic_run(50, 4, seed=1)
    bigger = [{**r, "input_id": f"{r['input_id']}-copy{c}"} for c in range(4) for r in base]
    small, large = m.noise_floor(base), m.noise_floor(bigger)
    assert small is not None and large is not None and small > 0
    # ddof=1 on replicated inputs: exact ratio sqrt((m - 1) / (4m - 1)) ~ 1/2
    assert large / small == pytest.approx(math.sqrt(49 / 199), rel=1e-9)
    assert m.noise_floor(base, field="reward") is not None


# ----------------------------------------------------------------------------- reward, verifiers


def test_reward_stats_match_numpy() -> None:
    records = synthetic_run(10, 3, seed=5)
    records.append(rec("zz", 0, reward=None))
    records.append(rec("zz", 1, reward=100.0, status="infra_error"))
    stats = m.reward_stats(records)
    rewards = np.array([r["reward"] for r in records[:30]])
    assert stats["count"] == 30 and stats["count_missing"] == 1
    assert stats["mean"] == pytest.approx(rewards.mean())
    assert stats["std"] == pytest.approx(rewards.std())
    assert [stats["min"], stats["q1"], stats["median"], stats["q3"], stats["max"]] == pytest.approx(
        np.quantile(rewards, [0, 0.25, 0.5, 0.75, 1]).tolist()
    )
    counts, edges = np.histogram(rewards, bins=10)
    assert stats["histogram"]["counts"] == counts.tolist()
    assert stats["histogram"]["edges"] == pytest.approx(edges.tolist())
    assert m.reward_stats([])["mean"] is None


def test_verifier_pass_rates() -> None:
    def v(name: str, passed: bool) -> dict[str, Any]:
        return {"name": name, "type": "t", "passed": passed, "score": float(passed), "detail": None}

    records = [
        rec("a", 0, verifiers=[v("exact", True), v("format", True)]),
        rec("a", 1, verifiers=[v("exact", False), v("format", True)]),
        rec("b", 0, verifiers=[v("exact", False)]),
        rec("b", 1, status="infra_error", verifiers=[v("exact", False)]),
    ]
    rates = m.verifier_pass_rates(records)
    assert list(rates) == ["exact", "format"]
    assert rates["exact"]["rate"] == pytest.approx(1 / 3) and rates["exact"]["n"] == 3
    assert rates["format"]["rate"] == 1.0
    assert rates["exact"]["wilson_ci"] == list(m.wilson_interval(1, 3))


# ----------------------------------------------------------------------------- disagreements


def test_disagreements_hand_example_and_order_independence() -> None:
    rewards = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    passed = [True, False, False, True, True, False, True, False, True]
    records = [
        rec(f"i{i // 3}", i % 3, p, reward=r)
        for i, (r, p) in enumerate(zip(rewards, passed, strict=True))
    ]
    result = m.disagreements(records)
    # issue 14: the reference is the median passing reward of the same input (absolute),
    # not the run's 75th percentile, so the share of suspects has no cap
    assert [(d["input_id"], d["rollout"], d["reward"]) for d in result["high_reward_failed"]] == [
        ("i2", 1, 0.7), ("i1", 2, 0.5), ("i0", 2, 0.2), ("i0", 1, 0.1)
    ]  # fmt: skip
    assert result["high_reward_failed"][0]["reference"] == pytest.approx(0.7)
    assert [(d["input_id"], d["rollout"]) for d in result["low_reward_passed"]] == [
        ("i0", 0), ("i1", 0), ("i1", 1), ("i2", 0)
    ]  # fmt: skip
    assert result["suspect_rate"] == pytest.approx(4 / 9)
    shuffled = records[::-1]
    assert m.disagreements(shuffled) == result


def test_disagreements_ties_do_not_flag_a_whole_side() -> None:
    flat = [rec("a", i, i % 2 == 0, reward=1.0) for i in range(6)]
    assert m.disagreements(flat)["high_reward_failed"] == []
    assert m.disagreements(flat)["low_reward_passed"] == []
    binary = [rec("a", i, i != 0, reward=1.0) for i in range(8)] + [rec("b", 0, True, reward=0.0)]
    result = m.disagreements(binary)
    assert [(d["input_id"], d["rollout"]) for d in result["high_reward_failed"]] == [("a", 0)]
    assert [(d["input_id"], d["rollout"]) for d in result["low_reward_passed"]] == [("b", 0)]


# ----------------------------------------------------------------------------- length


def test_length_bias_matches_scipy() -> None:
    records = synthetic_run(15, 4, seed=9)
    for r in records:
        r["reward"] = len(r["answer"].split()) * 0.1 + (r["rollout"] % 2) * 0.3
    result = m.length_bias(records)
    lengths = [len(r["answer"].split()) for r in records]
    rewards = [r["reward"] for r in records]
    assert result["unit"] == "words" and result["n"] == 60
    assert result["spearman"] == pytest.approx(scipy.stats.spearmanr(lengths, rewards).statistic)
    assert result["pearson"] == pytest.approx(scipy.stats.pearsonr(lengths, rewards).statistic)
    buckets = result["buckets"]
    assert sum(b["n"] for b in buckets) == 60
    means = [b["mean_reward"] for b in buckets if b["mean_reward"] is not None]
    assert means == sorted(means)


def test_length_bias_units() -> None:
    records = [
        rec("a", i, reward=float(i), answer="one two", usage={"prompt_tokens": 1,
            "completion_tokens": 10 * i, "total_tokens": 1})
        for i in range(4)
    ]  # fmt: skip
    assert m.length_bias(records)["spearman"] is None  # all answers 2 words: undefined
    by_tokens = m.length_bias(records, length="completion_tokens")
    assert by_tokens["unit"] == "completion_tokens"
    assert by_tokens["spearman"] == pytest.approx(1.0)
    assert by_tokens["mean_length"] == pytest.approx(15.0)


def test_length_explained_gain_is_one_when_reward_is_linear_in_length() -> None:
    def run(lengths: list[int]) -> list[dict[str, Any]]:
        return [
            rec(f"i{j}", 0, reward=0.2 + 0.05 * n, answer=" ".join(["w"] * n))
            for j, n in enumerate(lengths)
        ]

    a, b = run([3, 5, 4, 6]), run([8, 10, 12, 9])
    gain = m.length_explained_gain(a, b)
    assert gain["slope"] == pytest.approx(0.05)
    assert gain["share"] == pytest.approx(1.0) and gain["share_raw"] == pytest.approx(1.0)
    # Same lengths, reward up by 0.5 everywhere: length explains nothing of the gain.
    b_flat = [{**r, "reward": r["reward"] + 0.5} for r in a]
    no_length = m.length_explained_gain(a, b_flat)
    assert no_length["share"] == pytest.approx(0.0)
    assert no_length["actual_gain"] == pytest.approx(0.5)
    # No gain at all: share undefined.
    assert m.length_explained_gain(a, a)["share"] is None


# ----------------------------------------------------------------------------- diversity


def test_distinct_n_hand_examples() -> None:
    records = [rec("a", 0, answer="the cat sat"), rec("a", 1, answer="the cat ran")]
    result = m.diversity(records)
    # unigrams: the cat sat the cat ran -> 4 unique / 6; bigrams: 3 unique / 4
    assert result["distinct"]["1"] == pytest.approx(4 / 6)
    assert result["distinct"]["2"] == pytest.approx(3 / 4)
    # bigram sets {the cat, cat sat} vs {the cat, cat ran}: Jaccard 1/3
    assert result["mean_pairwise_similarity"] == pytest.approx(1 / 3)
    assert result["duplicate_rate"] == 0.0 and result["collapse"] is False

    two_inputs = records + [rec("b", 0, answer="the cat sat"), rec("b", 1, answer="a dog")]
    both = m.diversity(two_inputs, n=(2,))
    assert both["distinct"] == {"2": pytest.approx(4 / 7)}  # bigrams: 2+2+2+1, 4 unique
    assert both["distinct_per_input"]["2"] == pytest.approx((3 / 4 + 1.0) / 2)
    assert both["duplicate_rate_global"] == pytest.approx(1 / 4)  # b/0 repeats a/0


def test_collapse_flagged_on_identical_rollouts_not_on_diverse_ones() -> None:
    same = [rec(f"i{i}", r, answer="I cannot help with that request") for i in range(3)
            for r in range(4)]  # fmt: skip
    collapsed = m.diversity(same)
    assert collapsed["collapse"] is True
    assert collapsed["duplicate_rate"] == pytest.approx(0.75)
    assert collapsed["mean_pairwise_similarity"] == pytest.approx(1.0)
    diverse = m.diversity(synthetic_run(5, 4, seed=3))
    assert diverse["collapse"] is False
    assert diverse["mean_pairwise_similarity"] < 0.5
    # Near-duplicates (not exact) are caught by similarity; threshold is a parameter.
    near = [rec("a", r, answer=f"alpha beta gamma delta epsilon zeta eta theta iota {r}")
            for r in range(3)]  # fmt: skip
    result = m.diversity(near)
    assert result["duplicate_rate"] == 0.0
    assert result["mean_pairwise_similarity"] == pytest.approx(8 / 10)
    assert result["collapse"] is False
    assert m.diversity(near, similarity_threshold=0.75)["collapse"] is True


# ----------------------------------------------------------------------------- alignment


def test_alignment_gap_hand_example() -> None:
    records = [
        rec("a", 0, True, reward=0.0),
        rec("a", 1, False, reward=1.0),
        rec("b", 0, True, reward=2.0),
        rec("b", 1, False, reward=4.0),
    ]
    human = {("a", 0): 0.9, ("a", 1): 0.2, ("b", 0): 0.8, ("b", 1): 0.1, ("zz", 0): 1.0}
    result = m.alignment_gap(records, human)
    # normalised rewards 0, .25, .5, 1 -> mean .4375; human mean .5
    assert result["mean_reward_norm"] == pytest.approx(0.4375)
    assert result["mean_human"] == pytest.approx(0.5)
    assert result["gap"] == pytest.approx(-0.0625)
    assert result["n_labelled"] == 4 and result["n_unmatched"] == 1
    assert result["spearman_reward_human"] == pytest.approx(
        scipy.stats.spearmanr([0, 1, 2, 4], [0.9, 0.2, 0.8, 0.1]).statistic
    )
    assert result["spearman_passed_human"] == pytest.approx(
        scipy.stats.spearmanr([1, 0, 1, 0], [0.9, 0.2, 0.8, 0.1]).statistic
    )
    # top quartile: reward >= q75 = 2.5 -> b/1 (human .1)
    assert result["high_reward_low_human"] == [
        {"input_id": "b", "rollout": 1, "reward": 4.0, "human": 0.1}
    ]
    assert result["preferences"] is None


def test_load_human_scores_and_preferences(tmp_path: Any) -> None:
    path = tmp_path / "human.jsonl"
    lines = [
        {"input_id": "a", "rollout": 0, "score": 1.0},
        {"input_id": "a", "rollout": 0, "score": 0.5},  # second annotator: averaged
        {"input_id": "a", "rollout": 1, "score": 0.0},
        {"input_id": "a", "a": 0, "b": 1, "preferred": "a"},
        {"input_id": "b", "a": 0, "b": 1, "preferred": "a"},
        {"input_id": "b", "a": 0, "b": 1, "preferred": "b"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    labels = load_human(path)
    assert labels.scores == {("a", 0): 0.75, ("a", 1): 0.0}
    assert len(labels.preferences) == 3
    records = [
        rec("a", 0, True, reward=0.9), rec("a", 1, False, reward=0.1),
        rec("b", 0, True, reward=0.5), rec("b", 1, True, reward=0.2),
    ]  # fmt: skip
    prefs = m.alignment_gap(records, labels)["preferences"]
    # reward agrees on a (0.9>0.1) and first b (0.5>0.2), disagrees on second b
    assert prefs == {"n": 3, "reward_agreement": pytest.approx(2 / 3),
                     "verifier_agreement": pytest.approx((1 + 0.5 + 0.5) / 3)}  # fmt: skip

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_id": "a", "rollout": 0, "score": 0.5}\n{"input_id": "a", "score": 2}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        load_human(bad)


# ----------------------------------------------------------------------------- efficiency, flags


def test_sample_efficiency_hand_example() -> None:
    records = [
        rec("a", 0, False, reward=0.1), rec("a", 1, True, reward=0.9), rec("a", 2, False, 0.5),
        rec("b", 2, True, reward=0.3), rec("b", 0, False, reward=0.2), rec("b", 1, False, 0.8),
    ]  # fmt: skip
    rows = m.sample_efficiency(records)
    assert [r["k"] for r in rows] == [1, 2, 3]
    assert [r["pass_any"] for r in rows] == [0.0, 0.5, 1.0]
    assert [r["best_reward"] for r in rows] == pytest.approx([0.15, 0.85, 0.85])


def test_flags_fire_on_each_condition() -> None:
    summary = {
        "counts": {"infra_error": 2},
        "diversity": {"collapse": True, "collapsed_share": 0.1, "collapsed_inputs": ["a"],
                      "thresholds": {"collapsed_share": 0.1}},
        "length_bias": {"n": 12, "spearman": 0.6, "within_strata": {
            "effect_size": 0.4, "p_value": 0.001, "slope_per_100": 2.0}},
        "disagreements": {"suspect_rate": 0.125},
        "kl": {"mean_k1": -0.01},
    }  # fmt: skip
    found = m.flags(summary)
    assert [f["name"] for f in found] == [
        "collapse", "length_bias", "high_suspect_rate", "negative_kl", "infra_errors"
    ]  # fmt: skip
    assert all(
        set(f) == {"name", "kind", "message", "value", "threshold", "fails_run"} for f in found
    )
    # a run's own flags describe it: notes, never evidence (the verdict decides against a
    # reference run); only a failing part is a failure
    assert {f["name"]: f["kind"] for f in found if f["name"] != "infra_errors"} == dict.fromkeys(
        [f["name"] for f in found if f["name"] != "infra_errors"], "note"
    )
    assert not any(f["fails_run"] for f in found), "none of these fails a run"
    quiet = {
        "counts": {"infra_error": 0},
        "diversity": {"collapse": False},
        # a Spearman of 0.9 alone is no length bias: it needs a material, significant effect
        "length_bias": {
            "n": 40,
            "spearman": 0.9,
            "within_strata": {"effect_size": 0.05, "p_value": 0.001, "slope_per_100": 0.1},
        },
        "disagreements": {"suspect_rate": 0.05},
        "kl": {"mean_k1": 0.02},
    }
    assert m.flags(quiet) == []
    not_significant = {
        "length_bias": {"n": 40, "within_strata": {"effect_size": 0.9, "p_value": 0.2}}
    }
    too_few = {"length_bias": {"n": 9, "within_strata": {"effect_size": 0.9, "p_value": 0.001}}}
    assert m.flags(not_significant) == [] and m.flags(too_few) == []


def test_collapse_is_not_flagged_under_greedy_decoding() -> None:
    summary = {"diversity": {"collapse": True}, "counts": {"infra_error": 1}}
    assert m.is_greedy({"temperature": 0}) and not m.is_greedy({"temperature": 0.7})
    assert [f["name"] for f in m.flags(summary, {"temperature": 0})] == ["infra_errors"]
    found = m.flags(summary, {"temperature": 1.0})
    assert [f["name"] for f in found] == ["collapse", "infra_errors"]
    assert m.flags(summary, {}) == found == m.flags(summary)  # a missing temperature samples


def test_compute_all_is_json_clean_and_order_independent() -> None:
    records = synthetic_run(12, 4, seed=11)
    for r in records:
        r["kl"] = {"k1": 0.01 * r["rollout"], "k3": 0.02}
    records[-1] = rec("in011", 3, reward=None, answer=None, status="timeout", passed=False)
    records.append(rec("in999", 0, status="infra_error", answer=None))
    summary = m.compute_all(records, human={("in000", 0): 0.5, ("in000", 1): 1.0})
    text = json.dumps(summary, allow_nan=False, sort_keys=True)
    assert rfc8785.dumps(summary)
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    again = m.compute_all(shuffled, human={("in000", 0): 0.5, ("in000", 1): 1.0})
    assert json.dumps(again, allow_nan=False, sort_keys=True) == text
    assert summary["counts"]["infra_error"] == 1
    assert summary["pass_k"]["pass@k"]["1"] == pytest.approx(summary["pass_rate"]["value"])
    assert summary["kl"]["mean_k1"] == pytest.approx(0.01 * 69 / 47)
    assert [f["name"] for f in summary["flags"]] == ["infra_errors"]
    # Zero-variance rewards: correlations are None, not NaN.
    flat = m.compute_all([rec("a", i, reward=1.0, answer="same words") for i in range(3)])
    assert flat["length_bias"]["spearman"] is None
    json.dumps(flat, allow_nan=False)


# ----------------------------------------------------------------------------- compare runs


def test_compare_runs_flags_proxy_gold_turnover_kl_growth_and_collapse() -> None:
    step0 = synthetic_run(40, 4, seed=21)
    for r in step0:
        r["kl"] = {"k1": 0.01}
    # step1: same pass outcomes, reward much higher, KL tripled, answers collapsed.
    step1 = [
        {**r, "reward": r["reward"] + 2.0, "kl": {"k1": 0.03}, "answer": "great answer " * 3}
        for r in step0
    ]
    result = m.compare_runs([("step0", step0), ("step1", step1)])
    assert [row["name"] for row in result["runs"]] == ["step0", "step1"]
    assert result["runs"][1]["delta_pass_rate"] == 0.0
    assert result["runs"][1]["delta_reward_mean"] == pytest.approx(2.0)
    names = [f["name"] for f in result["flags"]]
    # descriptions of the step, against the first run: notes, never evidence
    assert names == ["kl_growth_without_gain", "diversity_collapse"]
    assert all(f["runs"] == ["step0", "step1"] and f["kind"] == "note" for f in result["flags"])
    json.dumps(result, allow_nan=False)
    # the reward rose at equal verifier outcomes: the verdict's evidence
    judged = judge_series([("step0", step0), ("step1", step1)])
    assert judged["verdict"]["status"] == "reward_hacking"
    assert judged["verdict"]["since"] == "step1"
    assert "proxy_gold_turnover" in [e["signal"] for e in judged["verdict"]["evidence"]]

    # Same run twice: nothing to note.
    assert m.compare_runs([("a", step0), ("b", step0)])["flags"] == []
    # Every answer passes now and is paid what the RM pays a right answer: no turnover.
    better = [{**r, "passed": True, "reward": r["reward"] + (not r["passed"])} for r in step0]
    assert m.compare_runs([("a", step0), ("b", better)])["flags"] == []
    assert judge_series([("a", step0), ("b", better)])["verdict"]["status"] != "reward_hacking"


def test_compare_runs_uses_human_scores_as_gold() -> None:
    step0 = synthetic_run(30, 2, seed=4)
    # every answer passes now and is paid what the RM pays a right answer, but people like
    # the answers less
    step1 = [{**r, "passed": True, "reward": r["reward"] + (not r["passed"])} for r in step0]
    humans = {
        "s0": {(r["input_id"], r["rollout"]): 0.8 for r in step0},
        "s1": {(r["input_id"], r["rollout"]): 0.3 if r["rollout"] else 0.2 for r in step1},
    }
    result = m.compare_runs([("s0", step0), ("s1", step1)], humans=humans)
    assert result["runs"][1]["human_mean"] == pytest.approx(0.25)
    judged = judge_series([("s0", step0), ("s1", step1)], humans=humans)["verdict"]
    turnover = [e for e in judged["evidence"] if e["signal"] == "proxy_gold_turnover"]
    assert judged["status"] == "reward_hacking"
    assert len(turnover) == 1 and turnover[0]["gold"] == "human"
    # without the human labels: better answers, paid for it, not a hack
    assert judge_series([("s0", step0), ("s1", step1)])["verdict"]["status"] != "reward_hacking"


def test_kl_block_pools_per_token_estimates_and_flags_negative_mean() -> None:
    records = [
        rec("a", 0, kl={"k1": [0.1, -0.4], "k3": [0.01, 0.02]}),  # type: ignore[dict-item]
        rec("a", 1, kl={"k1": [-0.2], "k3": [0.03]}),  # type: ignore[dict-item]
        rec("b", 0),
    ]
    summary = m.compute_all(records)
    assert summary["kl"]["mean_k1"] == pytest.approx((0.1 - 0.4 - 0.2) / 3)
    assert summary["kl"]["mean_k3"] == pytest.approx(0.02)
    assert "negative_kl" in [f["name"] for f in summary["flags"]]
    assert m.compute_all([rec("a", 0)])["kl"] is None


def test_kl_block_counts_infinite_tokens_and_keeps_finite_means() -> None:
    # an infinite per-token KL is stored as None in results.jsonl
    records = [
        rec("a", 0, kl={"k1": [-0.1, None, -0.3], "k3": [0.01, None, 0.03]}),  # type: ignore[dict-item]
        rec("a", 1, kl={"k1": [-0.2], "k3": [0.02]}),  # type: ignore[dict-item]
    ]
    summary = m.compute_all(records)
    kl = summary["kl"]
    assert kl["non_finite_tokens"] == 1
    assert kl["mean_k1"] == pytest.approx((-0.1 - 0.3 - 0.2) / 3)
    # GRPO / TRL "kl": mean over sequences of each sequence's per-token mean
    assert kl["mean_seq_mean_k3"] == pytest.approx((0.02 + 0.02) / 2)
    assert "negative_kl" in [f["name"] for f in summary["flags"]]


def test_kl_growth_survives_an_infinite_token() -> None:
    rng = np.random.default_rng(0)
    step0 = [
        rec(
            f"q{i}",
            j,
            passed=bool(rng.random() < 0.5),
            reward=float(rng.random()),
            kl={"k1": [0.01, 0.01], "k3": [0.01, 0.01]},
        )
        for i in range(20)
        for j in range(2)
    ]  # type: ignore[dict-item]
    step1 = [{**r, "kl": {"k1": [0.2, None], "k3": [0.2, None]}} for r in step0]
    names = [f["name"] for f in m.compare_runs([("a", step0), ("b", step1)])["flags"]]
    assert "kl_growth_without_gain" in names


def test_failing_parts_are_flags_with_their_first_error_and_fail_the_run() -> None:
    """A part failing on more than half of its rollouts fails the run; at half it does not;
    a tool is flagged only when every call failed, and never fails the run."""

    def record(input_id: str, rollout: int, **fields: Any) -> dict[str, Any]:
        base = rec(input_id, rollout, True, reward=0.5)
        base.update({"input_index": int(input_id[1:]), "tool_calls": [], **fields})
        return base

    bad_reward = {
        "reward": None,
        "reward_error": "KeyError: 'x'",
        "reward_traceback": ["m.py:3 in f"],
    }
    failing_call = [{"name": "t", "error": "ValueError: no", "ok": False}]
    half = [record("i0", 0, **bad_reward), record("i0", 1), record("i1", 0, **bad_reward),
            record("i1", 1)]  # fmt: skip
    result = m.compute_all(half)
    assert [(r["component"], r["failed"], r["of"]) for r in result["errors"]] == [
        ("reward model", 2, 4)
    ]
    assert result["errors"][0]["first"] == {
        "input_id": "i0", "rollout": 0, "error": "KeyError: 'x'", "traceback": ["m.py:3 in f"]
    }  # fmt: skip
    assert "reward_model_failed" not in {f["name"] for f in result["flags"]}, "half is not more"
    more = [*half[:3], record("i1", 1, **bad_reward)]
    flag = {f["name"]: f for f in m.compute_all(more)["flags"]}["reward_model_failed"]
    assert flag["fails_run"] and flag["value"] == 0.75 and flag["threshold"] == 0.5
    assert flag["first_error"]["error"] == "KeyError: 'x'"
    assert "reward model failed on 3 of 4 rollouts; first (input i0, rollout 0)" in flag["message"]
    tools = [record("i0", 0, tool_calls=failing_call), record("i0", 1, tool_calls=failing_call)]
    flags = {f["name"]: f for f in m.compute_all(tools)["flags"]}
    assert flags["tool_failed"]["fails_run"] is False
    tools[1]["tool_calls"] = [{"name": "t", "ok": False}]  # a bad call by the model: no error
    assert "tool_failed" not in {f["name"] for f in m.compute_all(tools)["flags"]}
    infra = [record("i0", 0, status="infra_error", error="down", passed=None), record("i0", 1)]
    flag = {f["name"]: f for f in m.compute_all(infra)["flags"]}["infra_errors"]
    assert flag["fails_run"] is False and flag["first_error"]["error"] == "down"
    infra[1].update(status="infra_error", error="down", passed=None)
    flag = {f["name"]: f for f in m.compute_all(infra)["flags"]}["infra_errors"]
    assert flag["fails_run"] is True
