"""Per-run diagnostics: reward and verifier statistics, reward-model/verifier disagreements,
sample efficiency, KL, and :func:`compute_all`, every diagnostic of one run in one dict."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rlenv.metrics._records import (
    LengthUnit,
    Record,
    _group,
    _jsonable,
    _key,
    _mean,
    _passed,
    _quantile,
    _reward,
    _reward_range,
    _scored,
)
from rlenv.metrics.alignment import alignment_gap
from rlenv.metrics.flagging import flags
from rlenv.metrics.length import length_bias
from rlenv.metrics.similarity import diversity
from rlenv.metrics.stats import noise_floor, pass_k_table, pass_rate, wilson_interval
from rlenv.results import HumanLabels, Status

HISTOGRAM_BINS = 10


def reward_stats(records: Iterable[Record]) -> dict[str, Any]:
    """Reward-model score distribution: moments, quartiles and a 10-bin histogram.

    ``std`` is the population standard deviation (ddof=0). ``count_missing`` counts scored
    rollouts without a reward (e.g. timeouts).
    """
    scored = _scored(records)
    rewards = [v for v in (_reward(r) for r in scored) if v is not None]
    stats: dict[str, Any] = {"count": len(rewards), "count_missing": len(scored) - len(rewards)}
    if not rewards:
        for name in ("mean", "std", "min", "q1", "median", "q3", "max", "histogram"):
            stats[name] = None
        return stats
    values = np.asarray(rewards, dtype=float)
    q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
    counts, edges = np.histogram(values, bins=HISTOGRAM_BINS)
    stats.update(
        mean=math.fsum(rewards) / len(rewards),
        std=float(values.std()),
        min=float(values.min()),
        q1=float(q1),
        median=float(median),
        q3=float(q3),
        max=float(values.max()),
        histogram={"counts": [int(c) for c in counts], "edges": [float(e) for e in edges]},
    )
    return stats


def verifier_pass_rates(records: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """Pass rate of each verifier by name (sorted), with a Wilson interval."""
    tallies: dict[str, list[int]] = {}
    for record in _scored(records):
        for verifier in record.get("verifiers") or []:
            if verifier.get("passed") is None:  # not graded (sampled out or deferred)
                continue
            tally = tallies.setdefault(str(verifier.get("name")), [0, 0])
            tally[0] += verifier.get("passed") is True
            tally[1] += 1
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


def disagreements(
    records: Iterable[Record],
    reward_threshold: float | None = None,
    low_threshold: float | None = None,
) -> dict[str, Any]:
    """Rollouts where the reward model and the verifiers disagree: reward-hacking suspects.

    ``high_reward_failed``: reward >= ``reward_threshold`` (default: the run's 75th percentile)
    but the verifiers failed -- the reward model likes what the verifiers reject.
    ``low_reward_passed``: reward <= ``low_threshold`` (default: 25th percentile) but passed.
    A rollout at the run's minimum reward is never "high" and one at its maximum never "low",
    so ties (e.g. binary rewards) do not flag a whole side; a run whose rewards are all equal
    has no disagreements. Rates are over scored rollouts with a reward; ``suspect_rate`` is the
    rate of ``high_reward_failed``.
    """
    scored = [r for r in _scored(records) if _reward(r) is not None]
    rewards = _reward_range(scored)
    out: dict[str, Any] = {
        "n": len(scored),
        "high_threshold": None,
        "low_threshold": None,
        "high_reward_failed": [],
        "low_reward_passed": [],
        "rate_high_reward_failed": None,
        "rate_low_reward_passed": None,
        "suspect_rate": None,
    }
    if not scored:
        return out
    lowest, highest = min(rewards), max(rewards)
    high = _quantile(rewards, 0.75) if reward_threshold is None else float(reward_threshold)
    low = _quantile(rewards, 0.25) if low_threshold is None else float(low_threshold)
    high_failed: list[dict[str, Any]] = []
    low_passed: list[dict[str, Any]] = []
    for record in scored:
        reward = _reward(record)
        assert reward is not None
        input_id, rollout = _key(record)
        row = {"input_id": input_id, "rollout": rollout, "reward": reward}
        if reward >= high and reward > lowest and not _passed(record):
            high_failed.append({**row, "passed": False})
        if reward <= low and reward < highest and _passed(record):
            low_passed.append({**row, "passed": True})
    high_failed.sort(key=lambda r: (-r["reward"], r["input_id"], r["rollout"]))
    low_passed.sort(key=lambda r: (r["reward"], r["input_id"], r["rollout"]))
    n = len(scored)
    out.update(
        high_threshold=high,
        low_threshold=low,
        high_reward_failed=high_failed,
        low_reward_passed=low_passed,
        rate_high_reward_failed=len(high_failed) / n,
        rate_low_reward_passed=len(low_passed) / n,
        suspect_rate=len(high_failed) / n,
    )
    return out


def sample_efficiency(records: Iterable[Record]) -> list[dict[str, Any]]:
    """For k = 1..K (smallest per-input rollout count): share of inputs where any of the first
    k rollouts passed, and mean over inputs of the best reward among the first k (inputs with
    no reward among them are skipped; None if none has one)."""
    groups = [group for _, group in _group(records)]
    if not groups:
        return []
    rows = []
    for k in range(1, min(len(g) for g in groups) + 1):
        any_pass = [1.0 if any(_passed(r) for r in g[:k]) else 0.0 for g in groups]
        best = []
        for g in groups:
            rewards = [v for v in (_reward(r) for r in g[:k]) if v is not None]
            if rewards:
                best.append(max(rewards))
        rows.append({"k": k, "pass_any": _mean(any_pass), "best_reward": _mean(best)})
    return rows


def _kl_block(records: Iterable[Record]) -> dict[str, Any] | None:
    """Run-level KL from the records' ``kl`` dicts; None when no record has one.

    Per-token data (``policy_shift()`` results: lists ``k1``, ``k3``, ... or a ``per_token``
    dict) is aggregated by :func:`rlenv.policy_shift.kl.aggregate` (token-pooled ``mean_k1``,
    ``mean_k3``, ...). Otherwise every numeric field ``x`` is averaged over rollouts as
    ``mean_x``.
    """
    dicts = [r["kl"] for r in _scored(records) if isinstance(r.get("kl"), Mapping)]
    if not dicts:
        return None
    if any("per_token" in d or any(isinstance(v, list) for v in d.values()) for d in dicts):
        from rlenv.policy_shift.kl import aggregate

        return aggregate([dict(d) for d in dicts])
    values: dict[str, list[float]] = {}
    for kl in dicts:
        for name, value in kl.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and math.isfinite(value):
                values.setdefault(str(name), []).append(float(value))
    block: dict[str, Any] = {"n": len(dicts)}
    for name in sorted(values):
        block[f"mean_{name}"] = _mean(values[name])
    return block


def compute_all(
    records: Iterable[Record],
    human: Mapping[tuple[str, int], float] | HumanLabels | None = None,
    *,
    length: LengthUnit = "words",
    alpha: float = 0.05,
    power: float = 0.8,
    decoding: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every diagnostic for one run, as one JSON-serialisable dict (summary.json, report).

    ``flags`` is the run's one list of flags (:func:`rlenv.metrics.flagging.flags`), given the
    run's ``decoding`` (temperature 0: no collapse flag); every output reads it from here.

    Dict keys are strings (pass@k tables are keyed "1", "2", ...); undefined values are None.
    """
    records = list(records)
    statuses: dict[str, int] = {}
    for record in records:
        status = str(record.get("status", Status.OK))
        statuses[status] = statuses.get(status, 0) + 1
    table = pass_k_table(records)
    summary: dict[str, Any] = {
        "counts": {
            "records": len(records),
            "inputs": len({_key(r)[0] for r in records}),
            "scored": len(_scored(records)),
            Status.INFRA_ERROR.value: statuses.get(Status.INFRA_ERROR, 0),
            "by_status": {s: statuses[s] for s in sorted(statuses)},
        },
        "pass_rate": {
            **pass_rate(records),
            "noise_floor": noise_floor(records, alpha, power, field="passed"),
        },
        "pass_k": {name: {str(k): v for k, v in t.items()} for name, t in table.items()},
        "reward": {
            **reward_stats(records),
            "noise_floor": noise_floor(records, alpha, power, field="reward"),
        },
        "verifiers": verifier_pass_rates(records),
        "disagreements": disagreements(records),
        "length_bias": length_bias(records, length=length),
        "diversity": diversity(records),
        "sample_efficiency": sample_efficiency(records),
        "kl": _kl_block(records),
        "alignment": alignment_gap(records, human) if human is not None else None,
    }
    summary["flags"] = flags(summary, decoding)
    clean: dict[str, Any] = _jsonable(summary)
    return clean
