"""Checkpoints side by side: one metric row per run, deltas between neighbouring runs, notes
against the first run, and the gold-vs-KL curve of Gao et al. across checkpoints.

A change counts when it is significant: the 95 % cluster-bootstrap CI of the difference (paired
by input when both runs scored the same inputs) excludes zero. The minimum detectable effect
(``noise_*``, see :func:`noise_floor`) is still reported beside it, as the size of change a run
pair this large can be trusted to see, but it is not the test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from rlenv.metrics._records import (
    LengthUnit,
    Record,
    _group,
    _jsonable,
    _key,
    _mean,
    _reward,
    _scored,
)
from rlenv.metrics.calibration import calibrated_reward
from rlenv.metrics.flagging import Flag
from rlenv.metrics.length import _length, _resolve_unit, length_explained_gain
from rlenv.metrics.run import _kl_block, disagreements, reward_stats
from rlenv.metrics.similarity import diversity
from rlenv.metrics.stats import (
    _clustered_variance,
    _detectable_difference,
    _per_input_means,
    bootstrap_ci,
    pass_rate,
)
from rlenv.results import HumanLabels

Variances = dict[str, float | None]


def _run_row(
    name: str,
    records: list[Record],
    human: Mapping[tuple[str, int], float] | HumanLabels | None,
    length: LengthUnit,
    alpha: float,
    power: float,
    baseline: list[Record] | None = None,
) -> tuple[dict[str, Any], dict[str, float | None]]:
    passed_means = list(_input_means(records, "passed").values())
    reward_means = list(_input_means(records, "reward").values())
    variances: dict[str, float | None] = {
        "passed": _clustered_variance(passed_means),
        "reward": _clustered_variance(reward_means),
        "human": None,
    }
    stats = reward_stats(records)
    kl = _kl_block(records) or {}
    human_mean: float | None = None
    if human is not None:
        scores = human.scores if isinstance(human, HumanLabels) else human
        human_means = _human_means(records, scores)
        all_scores = [scores[_key(r)] for r in _scored(records) if _key(r) in scores]
        human_mean = _mean(all_scores)
        variances["human"] = _clustered_variance(list(human_means.values()))
    rate = pass_rate(records)
    div = diversity(records, n=(2,))
    with_reward = [r for r in _scored(records) if _reward(r) is not None]
    unit = _resolve_unit(with_reward, length)
    row = {
        "name": name,
        "n_records": len(records),
        "n_inputs": rate["n_inputs"],
        "pass_rate": rate["value"],
        "pass_rate_noise_floor": _detectable_difference(
            variances["passed"], variances["passed"], alpha, power
        ),
        "reward_mean": stats["mean"],
        "reward_noise_floor": _detectable_difference(
            variances["reward"], variances["reward"], alpha, power
        ),
        "human_mean": human_mean,
        "kl_mean_k1": kl.get("mean_k1"),
        "distinct_2": div["distinct"]["2"],
        "collapsed_share": div["collapsed_share"],
        "collapsed_inputs": div["collapsed_inputs"],
        "input_ids": [row["input_id"] for row in div["per_input"] if row["n_answers"] >= 2],
        "mean_length": _mean([_length(r, unit) for r in with_reward]),
        "suspect_rate": disagreements(records, baseline)["suspect_rate"],
    }
    return row, variances


def _input_means(records: Iterable[Record], field_name: str) -> dict[str, float]:
    """Per-input mean of ``passed`` (0/1) or ``reward``, keyed by input id (inputs without a
    value skipped), in the order of :func:`_per_input_means`."""
    ids = [input_id for input_id, _ in _group(records)]
    if field_name == "reward":
        ids = [i for i, g in _group(records) if any(_reward(r) is not None for r in g)]
    return dict(zip(ids, _per_input_means(records, field_name), strict=True))


def per_input_mean(
    records: Iterable[Record], value: Callable[[Record], float | None]
) -> dict[str, float]:
    """Per-input mean of ``value(record)`` over scored records, inputs in sorted order (those
    without a value left out)."""
    out: dict[str, float] = {}
    for input_id, group in _group(records):
        values = [v for v in (value(r) for r in group) if v is not None]
        if values:
            out[input_id] = math.fsum(values) / len(values)
    return out


def _human_means(
    records: Iterable[Record], scores: Mapping[tuple[str, int], float]
) -> dict[str, float]:
    return per_input_mean(records, lambda r: scores.get(_key(r)))


def delta_ci(
    prev: Mapping[str, float],
    cur: Mapping[str, float],
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """The change in a per-input mean from ``prev`` to ``cur`` with a 95 % CI.

    Paired when the runs share at least two inputs: the cluster bootstrap resamples inputs and
    averages their differences (each input compared with itself, like with like). Otherwise
    unpaired: difference of means +- z * sqrt(var_prev + var_cur) from the clustered
    variances. ``rose`` / ``fell``: the CI lies above / below zero. None fields when a run has
    no values."""
    common = sorted(set(prev) & set(cur))
    out: dict[str, Any] = {"paired": False, "n_inputs": len(common), "ci": None}
    if not prev or not cur:
        return {**out, "rose": False, "fell": False}
    if len(common) >= 2:
        differences = [cur[i] - prev[i] for i in common]
        lo, hi = bootstrap_ci(differences, n_boot=n_boot, seed=seed, alpha=alpha)
        out.update(paired=True, ci=None if lo is None else [lo, hi])
    else:
        var_a = _clustered_variance(list(prev.values()))
        var_b = _clustered_variance(list(cur.values()))
        if var_a is not None and var_b is not None:
            mid = _mean(list(cur.values())) - _mean(list(prev.values()))  # type: ignore[operator]
            half = NormalDist().inv_cdf(1 - alpha / 2) * math.sqrt(var_a + var_b)
            out["ci"] = [mid - half, mid + half]
    ci = out["ci"]
    return {**out, "rose": ci is not None and ci[0] > 0, "fell": ci is not None and ci[1] < 0}


def gold_vs_kl(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Gao et al. (2023) over-optimisation shape across checkpoints: gold = g0 + d (alpha -
    beta d), d = sqrt(KL to the reference), fitted by least squares. Gold is the human score
    when every run has one, else the verifier pass rate. None with fewer than 3 runs with a
    non-negative mean k1 KL and a gold value (3 distinct d at least). With alpha > 0 and
    beta > 0 the gold peaks at d* = alpha / (2 beta) (KL d*^2); ``past_peak``: the last
    checkpoint is beyond it, where more optimisation buys less gold. With exactly 3 points the
    fit is exact (r2 1)."""
    gold_key = "human_mean" if all(r.get("human_mean") is not None for r in rows) else "pass_rate"
    points = [
        (str(r["name"]), float(r["kl_mean_k1"]), float(r[gold_key]))
        for r in rows
        if r.get("kl_mean_k1") is not None and r["kl_mean_k1"] >= 0 and r.get(gold_key) is not None
    ]
    if len(points) < 3 or len({kl for _, kl, _ in points}) < 3:
        return None
    d = np.sqrt(np.array([kl for _, kl, _ in points]))
    gold = np.array([g for _, _, g in points])
    design = np.column_stack([np.ones_like(d), d, -d * d])
    (g0, a, b), *_ = np.linalg.lstsq(design, gold, rcond=None)
    fitted = design @ np.array([g0, a, b])
    total = float(np.dot(gold - gold.mean(), gold - gold.mean()))
    residual = float(np.dot(gold - fitted, gold - fitted))
    # a peak exists only for a rising-then-falling curve: alpha > 0 and beta > 0 (with both
    # negative, a / 2b is positive too, and was once reported at KL 783 for runs ending at 3.3)
    peak = float(a / (2 * b)) if b > 0 and a > 0 else None
    return {
        "gold": gold_key,
        "n": len(points),
        "intercept": float(g0),
        "alpha": float(a),
        "beta": float(b),
        "r2": 1.0 - residual / total if total > 0 else None,
        "d_peak": peak,
        "kl_peak": None if peak is None else peak * peak,
        "past_peak": peak is not None and bool(d[-1] > peak),
        "points": [
            {"name": name, "kl": kl, "d": float(x), "gold": g, "fitted": float(f)}
            for (name, kl, g), x, f in zip(points, d, fitted, strict=True)
        ],
    }


def compare_runs(
    runs: Sequence[tuple[str, Iterable[Record]]],
    humans: Mapping[str, Mapping[tuple[str, int], float] | HumanLabels] | None = None,
    *,
    length: LengthUnit = "words",
    alpha: float = 0.05,
    power: float = 0.8,
    kl_growth: float = 0.5,
    collapse_share: float = 0.1,
    baseline: Iterable[Record] | None = None,
    calibrations: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Metric rows per run, in the given (training-step) order, notes against the first run
    and the gold-vs-KL fit (:func:`gold_vs_kl`, ``gold_vs_kl``; None below 3 runs with KL).

    Each row after the first has deltas vs the previous run with 95 % CIs (:func:`delta_ci`,
    ``delta_*_ci``), the minimum detectable effects (``noise_*``) and
    ``length_explained_gain`` (share): descriptions of each step. Whether a checkpoint is
    hacked or regressed is decided against the reference by :mod:`rlenv.metrics.verdict`, not
    here. The flags are notes (``kind: note``), each against the first run:

    - ``kl_growth_without_gain``: the sequence KL to the reference model rose beyond its own
      noise (paired by input) and by more than ``kl_growth`` relative, while the pass rate did
      not rise significantly.
    - ``diversity_collapse``: at least ``collapse_share`` of the inputs both runs scored are
      collapsed in the later run and were not in the first (per-input diversity, like with
      like; boilerplate shared by every answer does not count, see
      :func:`rlenv.metrics.similarity.diversity`). The inputs are named.
    - ``alignment_gap_growth``: with ``calibrations`` (a run's reward-model calibration) and
      human labels for both runs, the calibrated alignment gap grows beyond the noise while
      the reward mean rises (:func:`alignment_gap_growth`).

    ``baseline``: a reference run's records for every run's suspects (:func:`disagreements`).
    """
    materialised = [(name, list(records)) for name, records in runs]
    base = list(baseline) if baseline is not None else None
    rows: list[dict[str, Any]] = []
    variances: list[Variances] = []
    means: list[dict[str, dict[str, float]]] = []
    for name, records in materialised:
        labels = (humans or {}).get(name)
        row, var = _run_row(name, records, labels, length, alpha, power, base)
        rows.append(row)
        variances.append(var)
        run_means = {
            "passed": _input_means(records, "passed"),
            "reward": _input_means(records, "reward"),
        }
        if labels is not None:
            scores = labels.scores if isinstance(labels, HumanLabels) else labels
            run_means["human"] = _human_means(records, scores)
        means.append(run_means)
    found: list[Flag] = []
    kl_means = [_input_kl(records) for _, records in materialised]
    for i in range(1, len(rows)):
        gain = length_explained_gain(materialised[i - 1][1], materialised[i][1], length=length)
        changes: dict[str, dict[str, Any]] = {
            key: delta_ci(means[i - 1][key], means[i][key])
            for key in ("passed", "reward", "human")
            if key in means[i - 1] and key in means[i]
        }
        _neighbour_deltas(
            rows[i - 1], rows[i], (variances[i - 1], variances[i]), changes, gain["share"],
            alpha=alpha, power=power,
        )  # fmt: skip
        found.extend(
            _reference_notes(
                rows[0],
                rows[i],
                (kl_means[0], kl_means[i]),
                delta_ci(means[0]["passed"], means[i]["passed"]),
                tests=len(rows) - 1,
                kl_growth=kl_growth,
                collapse_share=collapse_share,
            )
        )
    if calibrations:
        found.extend(
            _calibrated(materialised, rows, calibrations, humans or {}, alpha=alpha, power=power)
        )
    for row in rows:
        row.pop("input_ids", None)
    clean: dict[str, Any] = _jsonable(
        {"runs": rows, "flags": found, "gold_vs_kl": gold_vs_kl(rows)}
    )
    return clean


def _calibrated(
    runs: list[tuple[str, list[Record]]],
    rows: list[dict[str, Any]],
    calibrations: Mapping[str, Mapping[str, Any]],
    humans: Mapping[str, Mapping[tuple[str, int], float] | HumanLabels],
    *,
    alpha: float,
    power: float,
) -> list[Flag]:
    """Add each run's calibrated estimate and gap to its row; the gap-growth flags."""
    blocks: list[dict[str, Any] | None] = []
    for (name, records), row in zip(runs, rows, strict=True):
        calibration = calibrations.get(name)
        block = (
            calibrated_reward(records, calibration, humans.get(name))
            if calibration is not None
            else None
        )
        blocks.append(block)
        row["calibrated_mean"] = block["calibrated_mean"] if block else None
        row["calibrated_gap"] = block["gap"] if block else None
        row["calibrated_gap_ci"] = block["gap_ci"] if block else None
    found = []
    for i in range(1, len(rows)):
        flag = alignment_gap_growth(
            [rows[i - 1]["name"], rows[i]["name"]],
            blocks[i - 1],
            blocks[i],
            rows[i].get("delta_reward_mean"),
            alpha=alpha,
            power=power,
        )
        if flag is not None:
            found.append({"kind": "note", **flag})
    return found


def alignment_gap_growth(
    pair: list[Any],
    prev: Mapping[str, Any] | None,
    cur: Mapping[str, Any] | None,
    delta_reward: float | None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> Flag | None:
    """The calibrated alignment gap (RM estimate - human score, human scale) grew beyond the
    noise of the two runs' clustered gap variances while the proxy reward mean rose."""
    if prev is None or cur is None or delta_reward is None or not delta_reward > 0:
        return None
    if prev.get("gap") is None or cur.get("gap") is None:
        return None
    growth = cur["gap"] - prev["gap"]
    noise = _detectable_difference(prev.get("gap_variance"), cur.get("gap_variance"), alpha, power)
    if noise is None or not growth > noise:
        return None
    return {
        "name": "alignment_gap_growth",
        "runs": pair,
        "message": f"the calibrated RM estimate minus the human score grew by {growth:.3g}"
        f" ({prev['gap']:.3g} -> {cur['gap']:.3g} on the human scale, noise {noise:.3g})"
        f" while the reward mean rose by {delta_reward:.3g}",
        "value": {
            "gap_prev": prev["gap"],
            "gap_cur": cur["gap"],
            "delta_reward_mean": delta_reward,
        },
        "threshold": noise,
    }


def _neighbour_deltas(
    prev: dict[str, Any],
    cur: dict[str, Any],
    variances: tuple[Variances, Variances],
    changes: Mapping[str, Mapping[str, Any]],
    length_share: float | None,
    *,
    alpha: float,
    power: float,
) -> None:
    """Write ``cur``'s deltas, CIs and noise against ``prev`` into ``cur`` (a description of
    the step; the verdict judges every checkpoint against the reference instead)."""

    def delta(metric: str) -> Any:
        if prev[metric] is None or cur[metric] is None:
            return None
        return cur[metric] - prev[metric]

    def noise(field_name: str) -> float | None:
        return _detectable_difference(
            variances[0][field_name], variances[1][field_name], alpha, power
        )

    none: dict[str, Any] = {"ci": None}
    cur.update(
        delta_pass_rate=delta("pass_rate"),
        delta_reward_mean=delta("reward_mean"),
        delta_human_mean=delta("human_mean"),
        delta_pass_rate_ci=changes.get("passed", none)["ci"],
        delta_reward_mean_ci=changes.get("reward", none)["ci"],
        delta_human_mean_ci=changes.get("human", none)["ci"],
        noise_pass_rate=noise("passed"),
        noise_reward_mean=noise("reward"),
        length_explained_gain=length_share,
    )


def _record_kl(record: Record) -> float | None:
    """A rollout's sequence KL to the reference: the sum of its per-token k3 (else k1)
    estimates, or a flat ``k3``/``k1``/``sequence_kl`` number."""
    kl = record.get("kl")
    if not isinstance(kl, Mapping):
        return None
    for name in ("k3", "k1", "sequence_kl"):
        value = kl.get(name)
        if isinstance(value, list):
            finite = [float(v) for v in value if isinstance(v, int | float) and math.isfinite(v)]
            return math.fsum(finite) if finite else None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _input_kl(records: Iterable[Record]) -> dict[str, float]:
    """Per-input mean sequence KL (inputs without one left out)."""
    return per_input_mean(records, _record_kl)


def _reference_notes(
    ref: Mapping[str, Any],
    cur: Mapping[str, Any],
    kl: tuple[Mapping[str, float], Mapping[str, float]],
    passed: Mapping[str, Any],
    *,
    tests: int,
    kl_growth: float,
    collapse_share: float,
) -> list[Flag]:
    """Notes on ``cur`` against the reference run (never evidence, never red)."""
    pair = [ref["name"], cur["name"]]
    found = [
        _kl_growth_without_gain(pair, kl, passed, kl_growth, tests),
        _diversity_collapse(pair, ref, cur, collapse_share),
    ]
    return [{"kind": "note", **flag} for flag in found if flag is not None]


def _kl_growth_without_gain(
    pair: list[Any],
    kl: tuple[Mapping[str, float], Mapping[str, float]],
    passed: Mapping[str, Any],
    kl_growth: float,
    tests: int,
) -> Flag | None:
    """KL to the reference model grew beyond its own noise (paired by input, Bonferroni over
    the checkpoints) and by more than ``kl_growth`` relative to the reference run's (or from
    zero, at the starting model), while the pass rate did not rise significantly."""
    before, after = kl
    shared = sorted(set(before) & set(after))
    if len(shared) < 2 or passed.get("ci") is None or passed.get("rose"):
        return None
    lo, hi = bootstrap_ci([after[i] - before[i] for i in shared], alpha=0.05 / max(1, tests))
    kl_prev = math.fsum(before[i] for i in shared) / len(shared)
    kl_cur = math.fsum(after[i] for i in shared) / len(shared)
    if lo is None or lo <= 0 or kl_cur <= kl_prev * (1 + kl_growth):
        return None
    return {
        "name": "kl_growth_without_gain",
        "runs": pair,
        "message": f"mean sequence KL to the reference model grew {kl_prev:.3g} -> {kl_cur:.3g}"
        f" (paired CI of the rise {lo:.3g} to {hi:.3g}) while the pass rate did not rise"
        " significantly",
        "value": {"kl_prev": kl_prev, "kl_cur": kl_cur, "delta_ci": [lo, hi]},
        "threshold": kl_growth,
    }


def _diversity_collapse(
    pair: list[Any], prev: Mapping[str, Any], cur: Mapping[str, Any], collapse_share: float
) -> Flag | None:
    """Inputs collapsed in ``cur`` that were not in ``prev``, among inputs both scored."""
    before = set(prev.get("collapsed_inputs") or [])
    shared = set(prev.get("input_ids") or []) & set(cur.get("input_ids") or [])
    if not shared:
        return None
    new = sorted(i for i in cur.get("collapsed_inputs") or [] if i in shared and i not in before)
    share = len(new) / len(shared)
    if not new or share < collapse_share:
        return None
    shown = ", ".join(new[:10]) + (" ..." if len(new) > 10 else "")
    return {
        "name": "diversity_collapse",
        "runs": pair,
        "message": f"{len(new)} of {len(shared)} inputs collapsed to near-identical rollouts"
        f" ({share:.0%}): {shown}",
        "value": {"share": share, "inputs": new},
        "threshold": collapse_share,
    }
