"""Checkpoints side by side: one metric row per run and flags between neighbouring runs.

A difference counts only when it exceeds the noise: (z_{1-alpha/2} + z_{power}) *
sqrt(var_prev + var_cur), from the two runs' clustered variances (see :func:`noise_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlenv.metrics._records import (
    LengthUnit,
    Record,
    _group,
    _jsonable,
    _key,
    _mean,
    _scored,
)
from rlenv.metrics.calibration import calibrated_reward
from rlenv.metrics.flagging import Flag
from rlenv.metrics.length import length_bias, length_explained_gain
from rlenv.metrics.run import _kl_block, disagreements, reward_stats
from rlenv.metrics.similarity import diversity
from rlenv.metrics.stats import (
    _clustered_variance,
    _detectable_difference,
    _per_input_means,
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
) -> tuple[dict[str, Any], dict[str, float | None]]:
    passed_means = _per_input_means(records, "passed")
    reward_means = _per_input_means(records, "reward")
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
        per_input: list[float] = []
        for _, group in _group(records):
            values = [scores[_key(r)] for r in group if _key(r) in scores]
            if values:
                per_input.append(math.fsum(values) / len(values))
        all_scores = [scores[_key(r)] for r in _scored(records) if _key(r) in scores]
        human_mean = _mean(all_scores)
        variances["human"] = _clustered_variance(per_input)
    rate = pass_rate(records)
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
        "distinct_2": diversity(records, n=(2,))["distinct"]["2"],
        "mean_length": length_bias(records, length=length)["mean_length"],
        "suspect_rate": disagreements(records)["suspect_rate"],
    }
    return row, variances


def compare_runs(
    runs: Sequence[tuple[str, Iterable[Record]]],
    humans: Mapping[str, Mapping[tuple[str, int], float] | HumanLabels] | None = None,
    *,
    length: LengthUnit = "words",
    alpha: float = 0.05,
    power: float = 0.8,
    kl_growth: float = 0.5,
    distinct_drop: float = 0.3,
    calibrations: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Metric rows per run, in the given (training-step) order, and flags between neighbours.

    A difference is beyond the noise when it exceeds (z_{1-alpha/2} + z_{power}) *
    sqrt(var_prev + var_cur), the two runs' clustered variances (see :func:`noise_floor`);
    flags needing it are skipped when a run has fewer than 2 inputs. Flags:

    - ``proxy_gold_turnover``: reward mean rises beyond the noise while the verifier pass rate
      (or the human score, when ``humans`` has both runs) does not rise beyond the noise.
    - ``kl_growth_without_gain``: mean k1 KL rises by more than ``kl_growth`` (relative, from a
      positive value) while the pass rate does not rise beyond the noise.
    - ``diversity_collapse``: distinct-2 drops by more than ``distinct_drop`` relative.
    - ``alignment_gap_growth``: with ``calibrations`` (a run's reward-model calibration) and
      human labels for both runs, the calibrated alignment gap grows beyond the noise while
      the reward mean rises (:func:`alignment_gap_growth`).

    Each row after the first also has deltas and ``length_explained_gain`` (share) vs the
    previous run.
    """
    materialised = [(name, list(records)) for name, records in runs]
    rows: list[dict[str, Any]] = []
    variances: list[Variances] = []
    for name, records in materialised:
        row, var = _run_row(name, records, (humans or {}).get(name), length, alpha, power)
        rows.append(row)
        variances.append(var)
    found: list[Flag] = []
    for i in range(1, len(rows)):
        gain = length_explained_gain(materialised[i - 1][1], materialised[i][1], length=length)
        found.extend(
            _neighbour_flags(
                rows[i - 1],
                rows[i],
                (variances[i - 1], variances[i]),
                gain["share"],
                alpha=alpha,
                power=power,
                kl_growth=kl_growth,
                distinct_drop=distinct_drop,
            )
        )
    if calibrations:
        found.extend(
            _calibrated(materialised, rows, calibrations, humans or {}, alpha=alpha, power=power)
        )
    clean: dict[str, Any] = _jsonable({"runs": rows, "flags": found})
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
            found.append(flag)
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


def _neighbour_flags(
    prev: dict[str, Any],
    cur: dict[str, Any],
    variances: tuple[Variances, Variances],
    length_share: float | None,
    *,
    alpha: float,
    power: float,
    kl_growth: float,
    distinct_drop: float,
) -> list[Flag]:
    """Write ``cur``'s deltas and noise against ``prev`` into ``cur``; return the flags
    raised between the two runs."""
    pair = [prev["name"], cur["name"]]

    def delta(metric: str) -> Any:
        if prev[metric] is None or cur[metric] is None:
            return None
        return cur[metric] - prev[metric]

    def noise(field_name: str) -> float | None:
        return _detectable_difference(
            variances[0][field_name], variances[1][field_name], alpha, power
        )

    d_pass, d_reward, d_human = delta("pass_rate"), delta("reward_mean"), delta("human_mean")
    n_pass, n_reward, n_human = noise("passed"), noise("reward"), noise("human")
    cur.update(
        delta_pass_rate=d_pass,
        delta_reward_mean=d_reward,
        delta_human_mean=d_human,
        noise_pass_rate=n_pass,
        noise_reward_mean=n_reward,
        length_explained_gain=length_share,
    )
    found = [
        _proxy_gold_turnover(pair, (d_reward, n_reward), (d_pass, n_pass), (d_human, n_human)),
        _kl_growth_without_gain(
            pair, prev["kl_mean_k1"], cur["kl_mean_k1"], (d_pass, n_pass), kl_growth
        ),
        _diversity_collapse(pair, prev["distinct_2"], cur["distinct_2"], distinct_drop),
    ]
    return [flag for flag in found if flag is not None]


Change = tuple[Any, float | None]
"""A metric's (delta vs the previous run, noise threshold); either may be None."""


def _flat(change: Change) -> bool:
    """The metric did not rise beyond the noise (and both numbers are known)."""
    value, noise = change
    return value is not None and noise is not None and value <= noise


def _proxy_gold_turnover(
    pair: list[Any], reward: Change, passed: Change, human: Change
) -> Flag | None:
    d_reward, n_reward = reward
    if d_reward is None or n_reward is None or not d_reward > n_reward:
        return None
    flat_gold = []
    if _flat(passed):
        flat_gold.append("pass_rate")
    if _flat(human):
        flat_gold.append("human")
    if not flat_gold:
        return None
    return {
        "name": "proxy_gold_turnover",
        "runs": pair,
        "message": f"reward mean rose by {d_reward:.3g} (noise {n_reward:.3g})"
        f" while {' and '.join(flat_gold)} did not rise beyond the noise",
        "value": {
            "delta_reward_mean": d_reward,
            "delta_pass_rate": passed[0],
            "delta_human_mean": human[0],
            "gold": flat_gold,
        },
        "threshold": n_reward,
    }


def _kl_growth_without_gain(
    pair: list[Any], kl_prev: Any, kl_cur: Any, passed: Change, kl_growth: float
) -> Flag | None:
    if (
        kl_prev is not None
        and kl_cur is not None
        and kl_prev > 0
        and kl_cur > kl_prev * (1 + kl_growth)
        and _flat(passed)
    ):
        return {
            "name": "kl_growth_without_gain",
            "runs": pair,
            "message": f"mean KL grew {kl_cur / kl_prev - 1:.0%} while the pass rate"
            " did not rise beyond the noise",
            "value": {"kl_prev": kl_prev, "kl_cur": kl_cur, "delta_pass_rate": passed[0]},
            "threshold": kl_growth,
        }
    return None


def _diversity_collapse(
    pair: list[Any], d2_prev: Any, d2_cur: Any, distinct_drop: float
) -> Flag | None:
    if d2_prev is not None and d2_cur is not None and d2_prev > 0:
        drop = (d2_prev - d2_cur) / d2_prev
        if drop > distinct_drop:
            return {
                "name": "diversity_collapse",
                "runs": pair,
                "message": f"distinct-2 dropped {drop:.0%} ({d2_prev:.3f} -> {d2_cur:.3f})",
                "value": drop,
                "threshold": distinct_drop,
            }
    return None
