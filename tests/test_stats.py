"""rlenv.metrics.stats against independent oracles (scipy, math.comb, pair counting, values
from the literature), in process: the mutation run's fast set for the module."""

from __future__ import annotations

import math
import statistics
import warnings
from itertools import product
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from rlenv.metrics.stats import (
    BOOTSTRAP_BLOCK,
    MIN_CORRELATION_N,
    auc,
    bootstrap_ci,
    noise_floor,
    pass_at_k,
    pass_hat_k,
    pass_k_table,
    pass_rate,
    pearson,
    rankdata,
    spearman,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        (5, 10, (0.236593, 0.763407)),
        (0, 10, (0.0, 0.277533)),
        (10, 10, (0.722467, 1.0)),
        (1, 3, (0.061490, 0.792340)),
        (0, 0, (0.0, 1.0)),
    ],
)
def test_wilson_interval(successes: int, n: int, expected: tuple[float, float]) -> None:
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-5)  # z = 1.96


def wilson_oracle(s: int, n: int, z: float) -> tuple[float, float]:
    p = s / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_wilson_interval_other_z_and_errors() -> None:
    assert wilson_interval(3, 7, z=2.5) == pytest.approx(wilson_oracle(3, 7, 2.5))
    assert wilson_interval(1, 2, z=1.0) == pytest.approx(wilson_oracle(1, 2, 1.0))
    for bad in ((-1, 3), (4, 3), (0, -1)):
        with pytest.raises(ValueError, match="need 0 <= successes <= n"):
            wilson_interval(*bad)


def test_pass_at_k_and_pass_hat_k_against_binomials() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at = 1 - math.comb(n - c, k) / math.comb(n, k)
                hat = math.comb(c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12), (n, c, k)
                assert pass_hat_k(n, c, k) == pytest.approx(hat, abs=1e-12), (n, c, k)
    for n, c, k in ((0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)):
        with pytest.raises(ValueError, match="need n >= 1"):
            pass_at_k(n, c, k)
        with pytest.raises(ValueError, match="need n >= 1"):
            pass_hat_k(n, c, k)


@pytest.mark.parametrize(
    "values",
    [[3.0, 1.0, 2.0], [1.0, 1.0, 2.0, 2.0, 2.0, 0.5], [5.0], [], [2.0, 2.0, 2.0], [0, -1, 7, -1]],
)
def test_rankdata_is_scipys_average(values: list[float]) -> None:
    assert rankdata(values).tolist() == scipy_stats.rankdata(values, method="average").tolist()


X = [1.0, 2.0, 3.0, 5.0, 8.0, 8.0]
Y = [2.0, 1.0, 4.0, 3.0, 9.0, 7.0]


def test_pearson_and_spearman_against_scipy() -> None:
    assert pearson(X, Y) == pytest.approx(scipy_stats.pearsonr(X, Y)[0])
    assert spearman(X, Y) == pytest.approx(scipy_stats.spearmanr(X, Y)[0])
    assert pearson(X, [-v for v in Y]) == pytest.approx(-scipy_stats.pearsonr(X, Y)[0])
    assert pearson([1, 2, 3], [2, 4, 6]) == 1.0
    assert pearson([1, 2, 3], [3, 2, 1]) == -1.0
    assert spearman([1, 2, 3], [1, 4, 9]) == pytest.approx(1.0)
    assert MIN_CORRELATION_N == 3


@pytest.mark.parametrize("correlation", [pearson, spearman])
def test_correlations_say_nothing_when_undefined(correlation: Any) -> None:
    assert correlation([1.0, 2.0], [2.0, 1.0]) is None
    assert correlation([1.0, 2.0, float("nan")], [1.0, 2.0, 3.0]) is None
    assert correlation([1.0, 2.0, 3.0], [1.0, float("inf"), 3.0]) is None
    assert correlation([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    assert correlation([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) is None
    with pytest.raises(ValueError, match="same length"):
        correlation([1.0, 2.0, 3.0], [1.0, 2.0])


def test_pearson_overflow_and_clipping() -> None:
    assert pearson([1e200, -1e200, 0.0], [1.0, 2.0, 3.0]) is None
    assert pearson([1e-200, 2e-200, 3e-200], [1.0, 2.0, 3.0]) is None  # sums underflow to 0
    value = pearson([0.1, 0.2, 0.3], [0.3, 0.6, 0.9])
    assert value is not None and -1.0 <= value <= 1.0 and value == pytest.approx(1.0)


def auc_oracle(pos: list[float], neg: list[float]) -> float:
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize(
    ("pos", "neg"),
    [([0.9, 0.8, 0.4], [0.1, 0.5]), ([1.0, 1.0], [1.0, 0.0, 2.0]), ([0.0], [1.0]), ([3], [1])],
)
def test_auc_counts_pairs(pos: list[float], neg: list[float]) -> None:
    assert auc(pos, neg) == pytest.approx(auc_oracle(pos, neg))


def test_auc_undefined() -> None:
    assert auc([], [1.0]) is None and auc([1.0], []) is None
    assert auc([float("nan")], [1.0]) is None and auc([1.0], [float("inf")]) is None


def test_bootstrap_ci_default_statistic() -> None:
    clusters = [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], 1.0, [0.0]]
    lo, hi = bootstrap_ci(clusters, n_boot=2000, seed=3)
    assert lo is not None and hi is not None and 0.0 <= lo < 0.5 < hi <= 1.0
    assert bootstrap_ci(clusters, n_boot=2000, seed=3) == (lo, hi)
    # the pooled mean of resampled clusters, by hand for one resample stream
    rng = np.random.default_rng(3)
    sums = np.array([2.0, 0.0, 1.0, 1.0, 0.0])
    counts = np.array([2.0, 2.0, 2.0, 1.0, 1.0])
    indices = rng.integers(0, 5, size=(2000, 5))
    means = sums[indices].sum(axis=1) / counts[indices].sum(axis=1)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    narrow = bootstrap_ci(clusters, n_boot=2000, seed=3, alpha=0.5)
    assert narrow == pytest.approx(tuple(np.quantile(means, [0.25, 0.75])))
    assert bootstrap_ci([[1.0], [1.0]]) == (1.0, 1.0)
    assert bootstrap_ci([]) == (None, None)
    assert bootstrap_ci([[1.0]], n_boot=0) == (None, None)
    assert bootstrap_ci([[], []]) == (None, None)
    assert BOOTSTRAP_BLOCK == 250_000


def test_bootstrap_blocks_do_not_change_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    clusters = [[float(i % 3 == 0)] * (1 + i % 2) for i in range(40)]
    whole = bootstrap_ci(clusters, n_boot=300, seed=1)
    monkeypatch.setattr("rlenv.metrics.stats.BOOTSTRAP_BLOCK", 40 * 7)
    assert bootstrap_ci(clusters, n_boot=300, seed=1) == whole


def test_bootstrap_ci_custom_statistic() -> None:
    clusters = [[1.0, 2.0], [3.0], [10.0]]

    def largest(resampled: list[Any]) -> float | None:
        values = [v for c in resampled for v in c]
        return max(values) if max(values) < 10 else None

    lo, hi = bootstrap_ci(clusters, statistic=largest, n_boot=500, seed=2)
    assert lo is not None and hi is not None and 2.0 <= lo <= hi <= 3.0
    assert bootstrap_ci(clusters, statistic=lambda _: None, n_boot=50) == (None, None)
    assert bootstrap_ci(clusters, statistic=lambda _: math.inf, n_boot=50) == (None, None)
    seen: list[list[Any]] = []
    bootstrap_ci([[1.0], 2.0], statistic=lambda r: seen.append(r) or 0.0, n_boot=5)
    assert len(seen) == 5 and all(len(r) == 2 for r in seen)
    assert all(c in ([1.0], 2.0) for r in seen for c in r)


def records(outcomes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    rows = []
    for input_id, values in outcomes.items():
        for rollout, value in enumerate(values):
            if value == "infra":
                rows.append({"input_id": input_id, "rollout": rollout, "status": "infra_error"})
            elif isinstance(value, bool):
                rows.append({"input_id": input_id, "rollout": rollout, "passed": value})
            else:
                rows.append({"input_id": input_id, "rollout": rollout, "reward": value})
    return rows


def test_noise_floor() -> None:
    rows = records({"a": [True, True], "b": [True, False], "c": [False, False], "d": [True]})
    means = [1.0, 0.5, 0.0, 1.0]
    var = statistics.variance(means) / 4
    z = statistics.NormalDist().inv_cdf
    assert noise_floor(rows) == pytest.approx((z(0.975) + z(0.8)) * math.sqrt(2 * var))
    assert noise_floor(rows, alpha=0.1, power=0.9) == pytest.approx(
        (z(0.95) + z(0.9)) * math.sqrt(2 * var)
    )
    assert noise_floor(records({"a": [True]})) is None
    assert noise_floor(records({"a": [True], "b": [True]})) == 0.0
    rewards = records({"a": [1.0, 0.0], "b": [0.25], "c": [True]})
    var = statistics.variance([0.5, 0.25]) / 2
    assert noise_floor(rewards, field="reward") == pytest.approx(
        (z(0.975) + z(0.8)) * math.sqrt(2 * var)
    )
    with pytest.raises(ValueError, match="field must be"):
        noise_floor(rows, field="answer")  # type: ignore[arg-type]


def test_pass_rate() -> None:
    rows = records({"a": [True, True], "b": [True, False, "infra"], "c": [False]})
    result = pass_rate(rows)
    assert result["value"] == pytest.approx(3 / 5)
    assert (result["passed"], result["n"], result["n_inputs"]) == (3, 5, 3)
    assert result["wilson_ci"] == pytest.approx(list(wilson_interval(3, 5)))
    assert result["bootstrap_ci"] == pytest.approx(
        list(bootstrap_ci([[1.0, 1.0], [1.0, 0.0], [0.0]]))
    )
    assert pass_rate([]) == {
        "value": None,
        "passed": 0,
        "n": 0,
        "n_inputs": 0,
        "wilson_ci": None,
        "bootstrap_ci": None,
    }
    assert pass_rate([{"input_id": "a", "passed": 1}])["passed"] == 0  # only True passes


def test_pass_k_table() -> None:
    rows = records({"a": [True, False, True], "b": [False, False, "infra"], "c": [True, True]})
    table = pass_k_table(rows)
    counts = [(3, 2), (2, 0), (2, 2)]
    assert sorted(table["pass@k"]) == [1, 2] and sorted(table["pass^k"]) == [1, 2]
    for k in (1, 2):
        assert table["pass@k"][k] == pytest.approx(sum(pass_at_k(n, c, k) for n, c in counts) / 3)
        assert table["pass^k"][k] == pytest.approx(sum(pass_hat_k(n, c, k) for n, c in counts) / 3)
    assert pass_k_table(rows, ks=[2, 5, 0, 2]) == {
        "pass@k": {2: table["pass@k"][2]},
        "pass^k": {2: table["pass^k"][2]},
    }
    assert pass_k_table([]) == {"pass@k": {}, "pass^k": {}}


def test_values_are_read_as_floats() -> None:
    """Whatever array-like comes in is read as float64 (numbers written as text included)."""
    text_x, text_y = ["1", "2", "3", "5"], ["2", "1", "4", "3"]
    floats_x, floats_y = [1.0, 2.0, 3.0, 5.0], [2.0, 1.0, 4.0, 3.0]
    assert pearson(text_x, text_y) == pytest.approx(pearson(floats_x, floats_y))
    assert spearman(text_x, text_y) == pytest.approx(spearman(floats_x, floats_y))
    assert auc(["3", "2"], ["1"]) == 1.0
    assert rankdata(["10", "9"]).tolist() == [2.0, 1.0]
    assert bootstrap_ci([["1", "1"], ["0"]], n_boot=20) == bootstrap_ci(
        [[1.0, 1.0], [0.0]], n_boot=20
    )
    assert noise_floor(records({"a": [True], "b": [False]})) == pytest.approx(
        (statistics.NormalDist().inv_cdf(0.975) + statistics.NormalDist().inv_cdf(0.8))
        * math.sqrt(2 * 0.5 / 2)
    )


def test_exact_messages_and_boundaries() -> None:
    with pytest.raises(ValueError, match="^x and y must have the same length$"):
        pearson([1.0, 2.0, 3.0], [1.0])
    with pytest.raises(ValueError, match="^x and y must have the same length$"):
        spearman([1.0, 2.0, 3.0], [1.0])
    # a y whose sum of squares is exactly 1 is an ordinary y
    assert pearson([1.0, 2.0, 3.0, 4.0], [-0.5, 0.5, -0.5, 0.5]) == pytest.approx(
        scipy_stats.pearsonr([1.0, 2.0, 3.0, 4.0], [-0.5, 0.5, -0.5, 0.5])[0]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pearson([1e200, -1e200, 0.0], [1.0, 2.0, 3.0]) is None
        assert pearson([1e300, -1e300, 1e300], [1.0, 2.0, 3.0]) is None


def test_bootstrap_defaults_and_draws_by_hand() -> None:
    clusters = [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0], [0.0]]
    sums = np.array([2.0, 0.0, 1.0, 1.0, 0.0])
    counts = np.array([2.0, 2.0, 2.0, 1.0, 1.0])

    def by_hand(n_boot: int, seed: int) -> tuple[float, float]:
        indices = np.random.default_rng(seed).integers(0, 5, size=(n_boot, 5))
        means = sums[indices].sum(axis=1) / counts[indices].sum(axis=1)
        lo, hi = np.quantile(means, [0.025, 0.975])
        return float(lo), float(hi)

    assert bootstrap_ci(clusters) == by_hand(1000, 0)
    assert bootstrap_ci(clusters, n_boot=3, seed=5) == by_hand(3, 5)
    assert bootstrap_ci(clusters, n_boot=1, seed=5) == by_hand(1, 5)
    custom = bootstrap_ci(clusters, statistic=lambda r: float(len(r)), n_boot=1)
    assert custom == (5.0, 5.0)
