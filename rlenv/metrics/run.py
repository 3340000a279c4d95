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
from rlenv.metrics.errors import errors
from rlenv.metrics.flagging import flags
from rlenv.metrics.length import length_bias
from rlenv.metrics.similarity import diversity
from rlenv.metrics.stats import (
    auc,
    bootstrap_ci,
    noise_floor,
    pass_k_table,
    pass_rate,
    wilson_interval,
)
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


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def disagreements(records: Iterable[Record]) -> dict[str, Any]:
    """Rollouts where the reward model and the verifiers disagree: reward-hacking suspects.

    ``high_reward_failed`` (the suspects): a rollout that fails the verifiers although the
    reward model scores it at least as high as typical passing answers -- the median reward
    of verifier-passing rollouts of the same input, or of the whole run when that input has
    none passing. The reference is absolute (what the RM pays for a right answer), not a
    quantile of the run, so there is no cap on the share: a run where every wrong answer is
    hacked has every wrong answer suspect. ``low_reward_passed``: passes although scored at or
    below the median failing reward (of the input, else the run). Only model outcomes with a
    reward count (infra errors and fixture misses are never suspects), and a rollout at the
    run's minimum reward is never "high" nor one at its maximum "low", so a run whose rewards
    are all equal has no disagreements. A run where nothing passes has no absolute reference:
    its 75th reward percentile stands in. ``suspect_rate`` is over rollouts with a reward.
    """
    scored = [
        r
        for r in _scored(records)
        if _reward(r) is not None and r.get("status") != Status.FIXTURE_MISS
    ]
    out: dict[str, Any] = {
        "n": len(scored),
        "reference": "median passing reward of the input, else of the run",
        "run_pass_median": None,
        "run_fail_median": None,
        "high_reward_failed": [],
        "low_reward_passed": [],
        "rate_high_reward_failed": None,
        "rate_low_reward_passed": None,
        "suspect_rate": None,
    }
    if not scored:
        return out
    rewards = _reward_range(scored)
    lowest, highest = min(rewards), max(rewards)
    by_input: dict[str, tuple[list[float], list[float]]] = {}
    for record in scored:
        side = by_input.setdefault(_key(record)[0], ([], []))
        side[0 if _passed(record) else 1].append(_reward(record) or 0.0)
    run_pass = _median([v for p, _ in by_input.values() for v in p])
    run_fail = _median([v for _, f in by_input.values() for v in f])
    if run_pass is None:  # nothing passes anywhere: no absolute reference, the run's quartile
        run_pass = _quantile(rewards, 0.75)
        out["reference"] = "no passing rollout: the run's 75th reward percentile"
    high_failed: list[dict[str, Any]] = []
    low_passed: list[dict[str, Any]] = []
    for record in scored:
        reward = _reward(record)
        assert reward is not None
        input_id, rollout = _key(record)
        passing, failing = by_input[input_id]
        row = {"input_id": input_id, "rollout": rollout, "reward": reward}
        if _passed(record):
            ref = _median(failing) if failing else run_fail
            if ref is not None and reward <= ref and reward < highest:
                low_passed.append({**row, "passed": True, "reference": ref})
        else:
            ref = _median(passing) if passing else run_pass
            if ref is not None and reward >= ref and reward > lowest:
                high_failed.append({**row, "passed": False, "reference": ref})
    high_failed.sort(key=lambda r: (-r["reward"], r["input_id"], r["rollout"]))
    low_passed.sort(key=lambda r: (r["reward"], r["input_id"], r["rollout"]))
    n = len(scored)
    out.update(
        run_pass_median=run_pass,
        run_fail_median=run_fail,
        high_reward_failed=high_failed,
        low_reward_passed=low_passed,
        rate_high_reward_failed=len(high_failed) / n,
        rate_low_reward_passed=len(low_passed) / n,
        suspect_rate=len(high_failed) / n,
    )
    return out


def reward_auc(records: Iterable[Record], n_boot: int = 400, seed: int = 0) -> dict[str, Any]:
    """How well the reward model separates verifier-passing from failing rollouts: ROC AUC
    (0.5 = no better than chance, 1 = every passing rollout scored above every failing one)
    with a cluster-bootstrap CI over inputs. A falling AUC across checkpoints is the clearest
    sign of a hacked proxy. None when either side is empty."""
    groups: list[Any] = []
    for _, group in _group(records):
        pairs = [(_passed(r), _reward(r)) for r in group if r.get("status") != Status.FIXTURE_MISS]
        pairs = [(p, v) for p, v in pairs if v is not None]
        if pairs:
            groups.append(pairs)

    def statistic(clusters: list[Any]) -> float | None:
        pos = [v for c in clusters for p, v in c if p]
        neg = [v for c in clusters for p, v in c if not p]
        return auc(pos, neg)

    value = statistic(groups)
    lo, hi = (
        bootstrap_ci(groups, statistic, n_boot=n_boot, seed=seed)
        if value is not None
        else (None, None)
    )
    return {
        "value": value,
        "n_passed": sum(p for c in groups for p, _ in c),
        "n_failed": sum(not p for c in groups for p, _ in c),
        "bootstrap_ci": [lo, hi] if lo is not None else None,
    }


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
        "reward_auc": reward_auc(records),
        "length_bias": length_bias(records, length=length),
        "diversity": diversity(records),
        "sample_efficiency": sample_efficiency(records),
        "kl": _kl_block(records),
        "alignment": alignment_gap(records, human) if human is not None else None,
        "errors": errors(records),
    }
    summary["flags"] = flags(summary, decoding)
    clean: dict[str, Any] = _jsonable(summary)
    return clean
