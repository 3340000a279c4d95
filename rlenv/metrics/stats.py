"""Statistics: binomial and bootstrap intervals, correlations, pass@k, the noise floor.

Percentiles use numpy's default linear interpolation. Bootstrap draws come from a seeded
``numpy.random.default_rng``, so every interval is a pure function of its arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from rlenv.metrics._records import Numbers, Record, _group, _passed, _reward


def pass_rate_rows(tallies: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """Each name's [passed, n] tally as a pass rate with its Wilson interval (names sorted)."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(tallies):
        passed, n = tallies[name]
        out[name] = {
            "passed": passed,
            "n": n,
            "rate": passed / n,
            "wilson_ci": list(wilson_interval(passed, n)),
        }
    return out


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well-behaved at 0 and n).

    ``(0.0, 1.0)`` when ``n == 0``: nothing observed, nothing excluded.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, center - half)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return (lo, hi)


def _check_nck(n: int, c: int, k: int) -> None:
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k).

    Chance that at least one of k rollouts drawn without replacement from n (c correct) passes.
    Computed as 1 - prod_{i=n-c+1..n} (1 - k/i), which never forms a large binomial.
    """
    _check_nck(n, c, k)
    # pragma: a shortcut; the product below has the factor 1 - k/k = 0 in this case too
    if n - c < k:  # pragma: no mutate
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_hat_k(n: int, c: int, k: int) -> float:
    """tau-bench pass^k: C(c, k) / C(n, k), the chance that all k drawn rollouts pass.

    Computed as prod_{i=0..k-1} (c - i) / (n - i).
    """
    _check_nck(n, c, k)
    if c < k:
        return 0.0
    product = 1.0
    for i in range(k):
        product *= (c - i) / (n - i)
    return product


def rankdata(values: Numbers) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as scipy.stats.rankdata 'average')."""
    x = np.asarray(values, dtype=float)
    # pragma: the order within a run of ties does not change its average rank
    order = np.argsort(x, kind="mergesort")  # pragma: no mutate
    ordered = x[order]
    new_value = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = np.empty(len(x), dtype=np.intp)
    dense[order] = np.cumsum(new_value)
    bounds = np.r_[np.flatnonzero(new_value), len(x)]
    ranks: np.ndarray = 0.5 * (bounds[dense] + bounds[dense - 1] + 1)
    return ranks


MIN_CORRELATION_N = 3
"""Fewer points than this give a correlation of +-1 or nothing: reported as None."""


def pearson(x: Numbers, y: Numbers) -> float | None:
    """Pearson correlation; None when it says nothing: fewer than 3 points, a NaN or infinity
    anywhere, a constant x or y (all values equal) or sums that overflow a float."""
    if len(x) != len(y):
        raise ValueError("x and y must have the same length")
    if len(x) < MIN_CORRELATION_N:
        return None
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        return None
    if xa.min() == xa.max() or ya.min() == ya.max():
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        xc = xa - xa.mean()
        yc = ya - ya.mean()
        sxx = float(np.dot(xc, xc))
        syy = float(np.dot(yc, yc))
        sxy = float(np.dot(xc, yc))
    if not (math.isfinite(sxx) and math.isfinite(syy) and math.isfinite(sxy)):
        return None
    if sxx == 0.0 or syy == 0.0:
        return None
    r = sxy / math.sqrt(sxx * syy)
    if not math.isfinite(r):
        return None
    return max(-1.0, min(1.0, r))


def spearman(x: Numbers, y: Numbers) -> float | None:
    """Spearman rank correlation (Pearson of average ranks); None when undefined, as
    :func:`pearson` (NaN or infinity anywhere: None, never ranked)."""
    if len(x) != len(y):
        raise ValueError("x and y must have the same length")
    if len(x) < MIN_CORRELATION_N:
        return None
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        return None
    return pearson(rankdata(xa), rankdata(ya))


def auc(positives: Numbers, negatives: Numbers) -> float | None:
    """Area under the ROC curve: P(a positive scores above a negative), ties counting half
    (the Mann-Whitney U / (n_pos * n_neg)). None when either side is empty or not finite."""
    pos = np.asarray(positives, dtype=float)
    neg = np.asarray(negatives, dtype=float)
    if pos.size == 0 or neg.size == 0:
        return None
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        return None
    ranks = rankdata(np.concatenate([pos, neg]))
    u = float(ranks[: pos.size].sum()) - pos.size * (pos.size + 1) / 2.0
    return u / (pos.size * neg.size)


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


BOOTSTRAP_BLOCK = 250_000
"""Resampled cluster indices drawn at once by `bootstrap_ci`: three arrays of this many 8-byte
values live at a time (at 10k inputs, 2 million of them took 48 MB of a run's orchestrator)."""


def bootstrap_ci(
    values_per_input: Sequence[Sequence[float] | float],
    statistic: Callable[[list[Any]], float | None] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float] | tuple[None, None]:
    """Percentile confidence interval from a cluster bootstrap over inputs.

    Inputs (clusters) are resampled with replacement, never single rollouts, because rollouts
    of one input are correlated. ``values_per_input[i]`` is input i's rollout values (a scalar
    is a cluster of one). ``statistic`` gets the list of resampled clusters; the default is the
    pooled mean of all their values (pass rate for 0/1 values). Bootstrap draws come from
    ``numpy.random.default_rng(seed)``, so the interval is a pure function of its arguments.
    Resamples where ``statistic`` returns None are skipped; ``(None, None)`` if none remain.
    """
    clusters: list[Any] = [
        v if isinstance(v, (int, float, np.number)) else list(v) for v in values_per_input
    ]
    if not clusters or n_boot < 1:
        return (None, None)
    if statistic is None:
        arrays = [np.atleast_1d(np.asarray(c, dtype=float)) for c in clusters]
        return bootstrap_means(
            [float(a.sum()) for a in arrays], [a.size for a in arrays], n_boot, seed, alpha
        )
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, len(clusters), size=(n_boot, len(clusters)))
    results = (statistic([clusters[i] for i in row]) for row in indices.tolist())
    estimates = np.array([float(r) for r in results if r is not None], dtype=float)
    estimates = estimates[np.isfinite(estimates)]
    return _percentiles(estimates, alpha)


def bootstrap_means(
    sums: Sequence[float],
    counts: Sequence[int],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float] | tuple[None, None]:
    """:func:`bootstrap_ci` of the pooled mean, from each cluster's sum and count alone (what a
    streamed run keeps of an input): the same draws, the same interval."""
    if not sums or n_boot < 1:
        return (None, None)
    rng = np.random.default_rng(seed)
    sum_of = np.array(sums, dtype=float)
    count_of = np.array(counts, dtype=float)
    # resamples drawn in blocks so memory stays small for many inputs: the draws are the
    # same whatever the block (int64 draws take whole words of the stream)
    block = max(1, min(n_boot, BOOTSTRAP_BLOCK // len(sums)))
    parts = []
    for start in range(0, n_boot, block):
        indices = rng.integers(0, len(sums), size=(min(block, n_boot - start), len(sums)))
        total = count_of[indices].sum(axis=1)
        keep = total > 0
        parts.append(sum_of[indices].sum(axis=1)[keep] / total[keep])
    return _percentiles(np.concatenate(parts), alpha)


def _percentiles(estimates: np.ndarray, alpha: float) -> tuple[float, float] | tuple[None, None]:
    if estimates.size == 0:
        return (None, None)
    lo, hi = np.quantile(estimates, [alpha / 2, 1 - alpha / 2])
    return (float(lo), float(hi))


def _per_input_means(records: Iterable[Record], field_name: str) -> list[float]:
    """Per-input mean of ``passed`` (as 0/1) or ``reward`` (inputs without rewards skipped)."""
    means: list[float] = []
    for _, group in _group(records):
        if field_name == "passed":
            values = [1.0 if _passed(r) else 0.0 for r in group]
        elif field_name == "reward":
            values = [v for v in (_reward(r) for r in group) if v is not None]
        else:
            raise ValueError(f"field must be 'passed' or 'reward', got {field_name!r}")
        if values:
            means.append(math.fsum(values) / len(values))
    return means


def _clustered_variance(per_input_means: Sequence[float]) -> float | None:
    """Variance of the run mean: sample variance (ddof=1) of per-input means / inputs."""
    if len(per_input_means) < 2:
        return None
    return float(np.var(np.asarray(per_input_means, dtype=float), ddof=1)) / len(per_input_means)


def _detectable_difference(
    var_a: float | None, var_b: float | None, alpha: float, power: float
) -> float | None:
    if var_a is None or var_b is None:
        return None
    return (_z(1 - alpha / 2) + _z(power)) * math.sqrt(var_a + var_b)


def noise_floor(
    records: Iterable[Record],
    alpha: float = 0.05,
    power: float = 0.8,
    field: Literal["passed", "reward"] = "passed",
) -> float | None:
    """Smallest difference in mean ``field`` between two runs of this size that is detectable.

    Minimum detectable effect of a two-sided two-sample z-test between two runs with the same
    number of inputs m and rollouts, each with this run's clustered variance:

        var = s^2 / m, s^2 = sample variance (ddof=1) of the per-input means (pass rates)
        MDE = (z_{1-alpha/2} + z_{power}) * sqrt(2 * var)

    A smaller difference between two such runs is within sampling noise. Shrinks as 1/sqrt(m).
    None with fewer than 2 inputs; 0.0 when every input has the same mean.
    """
    return noise_floor_of_means(_per_input_means(records, field), alpha, power)


def noise_floor_of_means(
    per_input_means: Sequence[float], alpha: float = 0.05, power: float = 0.8
) -> float | None:
    """:func:`noise_floor` from the per-input means (inputs sorted by id)."""
    var = _clustered_variance(per_input_means)
    return _detectable_difference(var, var, alpha, power)


def pass_rate(records: Iterable[Record]) -> dict[str, Any]:
    """Rollout-level verifier pass rate with Wilson and cluster-bootstrap intervals."""
    return pass_rate_of_counts(
        [(len(group), sum(_passed(r) for r in group)) for _, group in _group(records)]
    )


def pass_rate_of_counts(counts: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """:func:`pass_rate` from (scored rollouts, passed) of each input (inputs sorted by id)."""
    n = sum(size for size, _ in counts)
    passed = sum(c for _, c in counts)
    lo, hi = wilson_interval(passed, n)
    boot = bootstrap_means([float(c) for _, c in counts], [size for size, _ in counts])
    return {
        "value": passed / n if n else None,
        "passed": passed,
        "n": n,
        "n_inputs": len(counts),
        "wilson_ci": [lo, hi] if n else None,
        # pragma: both ends are None together, or neither
        "bootstrap_ci": list(boot) if boot[0] is not None else None,  # pragma: no mutate
    }


def pass_k_table(
    records: Iterable[Record], ks: Iterable[int] | None = None
) -> dict[str, dict[int, float]]:
    """pass@k and pass^k averaged over inputs, for k = 1 .. smallest per-input rollout count.

    Infra errors are left out before counting n per input. Requested ks outside that range are
    dropped (the estimators are undefined for k > n).
    """
    counts = [(len(group), sum(_passed(r) for r in group)) for _, group in _group(records)]
    return pass_k_of_counts(counts, ks)


def pass_k_of_counts(
    counts: Sequence[tuple[int, int]], ks: Iterable[int] | None = None
) -> dict[str, dict[int, float]]:
    """:func:`pass_k_table` from (scored rollouts, passed) of each input (inputs sorted by id)."""
    if not counts:
        return {"pass@k": {}, "pass^k": {}}
    k_max = min(n for n, _ in counts)
    wanted = (
        list(range(1, k_max + 1))
        if ks is None
        else sorted({int(k) for k in ks if 1 <= int(k) <= k_max})
    )
    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    for k in wanted:
        at_k[k] = math.fsum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
        hat_k[k] = math.fsum(pass_hat_k(n, c, k) for n, c in counts) / len(counts)
    return {"pass@k": at_k, "pass^k": hat_k}
