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


def length_bias(records: Iterable[Record], length: LengthUnit = "words") -> dict[str, Any]:
    """Does the reward grow with response length? Correlations and per-quartile means.

    Length is whitespace tokens of ``answer``, or ``usage.completion_tokens`` when asked for
    and present on every rollout (``unit`` says which was used). Quartile buckets split at the
    length quartiles; bucket i holds lengths in (edge_i, edge_i+1], the first bucket also its
    lower edge, so equal lengths share a bucket (buckets may be empty).
    """
    scored = [r for r in _scored(records) if _reward(r) is not None]
    unit = _resolve_unit(scored, length)
    lengths = [_length(r, unit) for r in scored]
    rewards = [_reward(r) or 0.0 for r in scored]
    out: dict[str, Any] = {
        "n": len(scored),
        "unit": unit,
        "mean_length": _mean(lengths),
        "pearson": pearson(lengths, rewards),
        "spearman": spearman(lengths, rewards),
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
