"""Length bias: does the reward grow with response length, within a run and between runs?

Length is whitespace tokens of ``answer`` (case-sensitive), or ``usage.completion_tokens``
when asked for and present on every rollout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rlenv.metrics._records import LengthUnit, Record, _mean, _passed, _reward, _scored, _words
from rlenv.metrics.stats import pearson, spearman
from rlenv.results import Status


def _length(record: Record, unit: LengthUnit) -> float:
    if unit == "completion_tokens":
        return float((record.get("usage") or {})["completion_tokens"])
    return float(len(_words(record.get("answer"))))


def _resolve_unit(records: Sequence[Record], length: LengthUnit) -> LengthUnit:
    """completion_tokens only when every record has it; otherwise whitespace words."""
    if length not in ("words", "completion_tokens"):
        raise ValueError(f"length must be 'words' or 'completion_tokens', got {length!r}")
    if length == "completion_tokens" and all(
        isinstance((r.get("usage") or {}).get("completion_tokens"), (int, float)) for r in records
    ):
        return "completion_tokens"
    return "words"


PERMUTATIONS = 1000
"""Permutations of the length-bias test (fewer for very large runs, at least 200)."""
_PERMUTATION_BUDGET = 20_000_000
"""Shuffled lengths in all; a 100k-rollout run gets 200 permutations."""


def _stratum_slope(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    return {
        "n": int(x.size),
        "slope_per_100": _slope(x, y, per=100.0),
        "pearson": pearson(x, y),
    }


def _slope(x: np.ndarray, y: np.ndarray, per: float = 100.0) -> float | None:
    """Least-squares slope of y on x times ``per`` (reward per 100 length units)."""
    if x.size < 2:
        return None
    xc = x - x.mean()
    sxx = float(np.dot(xc, xc))
    if not sxx > 0.0:
        return None
    return per * float(np.dot(xc, y - y.mean())) / sxx


def within_strata(
    lengths: Sequence[float],
    rewards: Sequence[float],
    strata: Sequence[bool],
    n_permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> dict[str, Any]:
    """Does the reward pay for length among equally correct answers?

    Lengths and rewards are centred within each stratum (verifier passed / failed), so a
    reward that is higher for right answers which happen to be longer is not length bias.
    ``slope_per_100``: pooled within-strata least-squares slope, reward per 100 length units.
    ``effect_size``: what +20 % length (at the run's mean length) buys by that slope, in
    standard deviations of the run's reward (``reward_per_20pct_length`` in reward units) --
    a length term that only breaks ties between otherwise equal rewards buys almost nothing.
    ``share_of_variance``: the reward variance that slope explains, as a share of the run's
    total reward variance (the effect size: a length term that only breaks ties between equal
    rewards explains almost none of it). ``partial_r2``: the same as a share of the variance
    left within strata. ``p_value``: two-sided permutation test of the within-strata
    covariance, lengths shuffled within strata, ``numpy.random.default_rng(seed)``; its
    smallest value is 1 / (permutations + 1).
    """
    x = np.asarray(lengths, dtype=float)
    y = np.asarray(rewards, dtype=float)
    s = np.asarray(strata, dtype=bool)
    out: dict[str, Any] = {
        "slope_per_100": None,
        "reward_per_20pct_length": None,
        "effect_size": None,
        "share_of_variance": None,
        "partial_r2": None,
        "p_value": None,
        "permutations": 0,
        "strata": [],
    }
    if x.size < 3:
        return out
    parts = []
    for passed in (True, False):
        mask = s == passed
        if mask.sum() >= 2:
            xs, ys = x[mask], y[mask]
            parts.append((xs - xs.mean(), ys - ys.mean()))
            out["strata"].append({"passed": passed, **_stratum_slope(xs, ys)})
    sxx = math.fsum(float(np.dot(a, a)) for a, _ in parts)
    syy = math.fsum(float(np.dot(b, b)) for _, b in parts)
    sxy = math.fsum(float(np.dot(a, b)) for a, b in parts)
    total = float(np.dot(y - y.mean(), y - y.mean()))
    if not (sxx > 0.0 and syy > 0.0 and total > 0.0):
        return out
    explained = sxy * sxy / sxx
    per_20pct = (sxy / sxx) * 0.2 * float(x.mean())
    count = max(200, min(n_permutations, _PERMUTATION_BUDGET // max(1, x.size)))
    out.update(
        slope_per_100=100.0 * sxy / sxx,
        reward_per_20pct_length=per_20pct,
        effect_size=per_20pct / math.sqrt(total / x.size),
        share_of_variance=min(1.0, explained / total),
        partial_r2=min(1.0, explained / syy),
        p_value=_permutation_p(parts, abs(sxy), count, seed),
        permutations=count,
    )
    return out


def _permutation_p(
    parts: list[tuple[np.ndarray, np.ndarray]], observed: float, count: int, seed: int
) -> float:
    """Share of within-strata shuffles whose |covariance| reaches the observed one (+1 both)."""
    rng = np.random.default_rng(seed)
    size = sum(a.size for a, _ in parts)
    block = max(1, min(count, 2_000_000 // max(1, size)))
    tolerance = 1e-12 * max(1.0, observed)
    reached = 0
    for start in range(0, count, block):
        rows = min(block, count - start)
        total = np.zeros(rows)
        for a, b in parts:
            shuffled = rng.permuted(np.broadcast_to(a, (rows, a.size)), axis=1)
            total += shuffled @ b
        reached += int((np.abs(total) >= observed - tolerance).sum())
    return (reached + 1) / (count + 1)


def length_bias(
    records: Iterable[Record],
    length: LengthUnit = "words",
    n_permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> dict[str, Any]:
    """Does the reward grow with response length? Correlations, effect sizes, a permutation
    test within verifier-pass strata and per-quartile means.

    Model outcomes with a reward count (fixture misses, like infra errors, are left out: their
    answer is not the model's whole say). Length is whitespace tokens of ``answer``, or
    ``usage.completion_tokens`` when asked for and present on every rollout (``unit`` says
    which was used). ``slope_per_100``: reward per
    100 length units (least squares over the run); ``share_explained``: the share of reward
    variance length explains over the run (Pearson squared). ``within_strata``
    (:func:`within_strata`): the same among equally correct answers, with a p-value. Quartile
    buckets split at the length quartiles; bucket i holds lengths in (edge_i, edge_i+1], the
    first bucket also its lower edge, so equal lengths share a bucket (buckets may be empty).
    """
    scored = [
        r
        for r in _scored(records)
        if _reward(r) is not None and r.get("status") != Status.FIXTURE_MISS
    ]
    unit = _resolve_unit(scored, length)
    lengths = [_length(r, unit) for r in scored]
    rewards = [_reward(r) or 0.0 for r in scored]
    r = pearson(lengths, rewards)
    out: dict[str, Any] = {
        "n": len(scored),
        "unit": unit,
        "mean_length": _mean(lengths),
        "pearson": r,
        "spearman": spearman(lengths, rewards),
        "slope_per_100": _slope(np.asarray(lengths, dtype=float), np.asarray(rewards)),
        "share_explained": None if r is None else r * r,
        "within_strata": within_strata(
            lengths, rewards, [_passed(x) for x in scored], n_permutations, seed
        ),
        "buckets": [],
    }
    if not scored:
        return out
    edges = np.quantile(np.asarray(lengths, dtype=float), [0.0, 0.25, 0.5, 0.75, 1.0])
    bucket_of = np.searchsorted(edges[1:-1], np.asarray(lengths, dtype=float), side="left")
    for b in range(4):
        members = [i for i in range(len(scored)) if bucket_of[i] == b]
        out["buckets"].append(
            {
                "bucket": b + 1,
                "length_lo": float(edges[b]),
                "length_hi": float(edges[b + 1]),
                "n": len(members),
                "mean_reward": _mean([rewards[i] for i in members]),
                "pass_rate": _mean([1.0 if _passed(scored[i]) else 0.0 for i in members]),
            }
        )
    return out


def length_explained_gain(
    run_a: Iterable[Record], run_b: Iterable[Record], length: LengthUnit = "words"
) -> dict[str, Any]:
    """Share of the reward gain from run a to run b that the change in length predicts.

    Fit reward = intercept + slope * length by least squares on both runs' rollouts pooled;
    predicted gain = slope * (mean length b - mean length a); actual gain = mean reward b -
    mean reward a. ``share_raw`` = predicted / actual; ``share`` is it clipped to [0, 1]
    (length cannot explain less than none or more than all of the gain). Both are None when
    the actual gain is zero (|gain| <= 1e-12) or a run has no rewards. When all pooled lengths
    are equal the slope is undefined (None) and length explains none of the gain (share 0).
    """
    a = [r for r in _scored(run_a) if _reward(r) is not None]
    b = [r for r in _scored(run_b) if _reward(r) is not None]
    unit = _resolve_unit(a + b, length)
    out: dict[str, Any] = {
        "unit": unit,
        "slope": None,
        "intercept": None,
        "mean_length_a": None,
        "mean_length_b": None,
        "predicted_gain": None,
        "actual_gain": None,
        "share_raw": None,
        "share": None,
    }
    if not a or not b:
        return out
    len_a = [_length(r, unit) for r in a]
    len_b = [_length(r, unit) for r in b]
    rew_a = [_reward(r) or 0.0 for r in a]
    rew_b = [_reward(r) or 0.0 for r in b]
    x = np.asarray(len_a + len_b, dtype=float)
    y = np.asarray(rew_a + rew_b, dtype=float)
    xc = x - x.mean()
    sxx = float(np.dot(xc, xc))
    mean_len_a = math.fsum(len_a) / len(len_a)
    mean_len_b = math.fsum(len_b) / len(len_b)
    actual = math.fsum(rew_b) / len(rew_b) - math.fsum(rew_a) / len(rew_a)
    if sxx > 0.0:
        slope = float(np.dot(xc, y - y.mean())) / sxx
        intercept = float(y.mean()) - slope * float(x.mean())
        predicted = slope * (mean_len_b - mean_len_a)
        out.update(slope=slope, intercept=intercept)
    else:
        predicted = 0.0
    out.update(
        mean_length_a=mean_len_a,
        mean_length_b=mean_len_b,
        predicted_gain=predicted,
        actual_gain=actual,
    )
    if abs(actual) > 1e-12:
        ratio = predicted / actual
        out.update(share_raw=ratio, share=min(1.0, max(0.0, ratio)))
    return out
