"""The reward model on a human scale: a stored monotone map applied to a run's raw rewards.

A calibration (``rlenv rm calibrate``, read by :func:`rlenv.rm.calibration.load_calibration`)
is plain data: ``scale`` [lo, hi], ``knots`` {"raw": [...], "human": [...]} (the isotonic fit,
applied by linear interpolation and clipped at the ends, as scikit-learn's
``IsotonicRegression(out_of_bounds="clip").predict``) and ``band`` {"raw", "lower", "upper"}
(the bootstrap band of the fit). Human labels of a run (:class:`rlenv.results.HumanLabels`) are
in [0, 1] and are put on the calibration's scale as ``lo + score * (hi - lo)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rlenv.metrics._records import Record, _group, _key, _mean, _reward, _scored
from rlenv.metrics.stats import _clustered_variance, bootstrap_ci
from rlenv.results import HumanLabels

Calibration = Mapping[str, Any]


def apply_calibration(
    raw: Sequence[float], calibration: Calibration, curve: str = "fit"
) -> list[float]:
    """Raw reward-model scores on the human scale (``curve``: "fit", "lower" or "upper")."""
    if not raw:
        return []
    if curve == "fit":
        xs, ys = calibration["knots"]["raw"], calibration["knots"]["human"]
    else:
        xs, ys = calibration["band"]["raw"], calibration["band"][curve]
    return [float(v) for v in np.interp(np.asarray(raw, dtype=float), xs, ys)]


def human_on_scale(score: float, calibration: Calibration) -> float:
    """A [0, 1] human label on the calibration's scale."""
    lo, hi = (float(v) for v in calibration["scale"])
    return lo + float(score) * (hi - lo)


def _by_input(records: list[Record], values: Mapping[tuple[str, int], float]) -> list[list[float]]:
    clusters = []
    for _, group in _group(records):
        cluster = [values[_key(r)] for r in group if _key(r) in values]
        if cluster:
            clusters.append(cluster)
    return clusters


def calibrated_reward(
    records: Iterable[Record],
    calibration: Calibration,
    human: Mapping[tuple[str, int], float] | HumanLabels | None = None,
) -> dict[str, Any]:
    """Raw reward and its calibrated human-scale estimate, and (with human labels) the
    alignment gap = calibrated estimate - human score (on the scale), over rollouts with both.

    CIs are cluster-bootstrap intervals over inputs (:func:`bootstrap_ci`); ``*_band`` are the
    same means through the lower and upper curves of the calibration's bootstrap band (its own
    uncertainty). ``gap_variance`` is the clustered variance of per-input mean gaps (for the
    noise floor between checkpoints).
    """
    scored = [r for r in _scored(records) if _reward(r) is not None]
    keys = [_key(r) for r in scored]
    raw = [float(_reward(r)) for r in scored]  # type: ignore[arg-type]
    curves = {name: apply_calibration(raw, calibration, name) for name in ("fit", "lower", "upper")}
    fitted = dict(zip(keys, curves["fit"], strict=True))
    clusters = _by_input(scored, fitted)
    ci = bootstrap_ci(clusters) if clusters else (None, None)
    block: dict[str, Any] = {
        "scale": [float(v) for v in calibration["scale"]],
        "n": len(scored),
        "raw_mean": _mean(raw),
        "calibrated_mean": _mean(curves["fit"]),
        "calibrated_ci": list(ci) if ci[0] is not None else None,
        "calibrated_band": [_mean(curves["lower"]), _mean(curves["upper"])] if raw else None,
        "n_labelled": 0,
        "human_mean": None,
        "gap": None,
        "gap_ci": None,
        "gap_band": None,
        "gap_variance": None,
    }
    if human is None:
        return block
    scores = human.scores if isinstance(human, HumanLabels) else human
    labelled = [(i, key) for i, key in enumerate(keys) if key in scores]
    if not labelled:
        return block
    on_scale = {key: human_on_scale(scores[key], calibration) for _, key in labelled}
    gaps = {key: curves["fit"][i] - on_scale[key] for i, key in labelled}
    gap_clusters = _by_input(scored, gaps)
    gap_ci = bootstrap_ci(gap_clusters)
    band = [
        _mean([curves[name][i] - on_scale[key] for i, key in labelled])
        for name in ("lower", "upper")
    ]
    per_input = [math.fsum(c) / len(c) for c in gap_clusters]
    block.update(
        n_labelled=len(labelled),
        human_mean=_mean(list(on_scale.values())),
        gap=_mean(list(gaps.values())),
        gap_ci=list(gap_ci) if gap_ci[0] is not None else None,
        gap_band=band,
        gap_variance=_clustered_variance(per_input),
    )
    return block
