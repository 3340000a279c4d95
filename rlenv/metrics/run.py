"""Per-run diagnostics: reward and verifier statistics, reward-model/verifier disagreements,
sample efficiency, KL, and :func:`compute_all`, every diagnostic of one run in one dict."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rlenv.metrics._records import (
    Record,
    _group,
    _key,
    _mean,
    _passed,
    _quantile,
    _reward,
    _reward_range,
    _scored,
)
from rlenv.metrics.stats import (
    auc,
    bootstrap_ci,
    pass_rate,
    pass_rate_rows,
)
from rlenv.results import Status

HISTOGRAM_BINS = 10


def component_stats(records: Iterable[Record]) -> dict[str, Any] | None:
    """Mean and cluster-bootstrap CI (over inputs) of each composite-reward component and the
    total, over scored rollouts; None when no record carries components."""
    scored = [r for r in _scored(records) if isinstance(r.get("rewards"), Mapping)]
    if not scored:
        return None
    names = sorted({name for r in scored for name in r["rewards"]} - {"total"}) + ["total"]
    out: dict[str, Any] = {}
    for name in names:
        by_input: dict[str, list[float]] = {}
        for record in scored:
            value = record["rewards"].get(name)
            if isinstance(value, int | float) and math.isfinite(value):
                by_input.setdefault(str(record.get("input_id")), []).append(float(value))
        values = [v for group in by_input.values() for v in group]
        low, high = bootstrap_ci(list(by_input.values())) if values else (None, None)
        out[name] = {
            "mean": math.fsum(values) / len(values) if values else None,
            "n": len(values),
            "bootstrap_ci": [low, high] if low is not None else None,
        }
    return out


def group_stats(records: Iterable[Record], labels: Mapping[str, Any]) -> dict[str, Any]:
    """Pass rate (Wilson and bootstrap CIs) and mean reward per value of an input field.

    `labels` maps input id -> the field's value (inputs without it are grouped as "(none)");
    groups are keyed by the value as text, in sorted order.
    """
    by_group: dict[str, list[Record]] = {}
    for record in records:
        value = labels.get(str(record.get("input_id")))
        key = "(none)" if value is None else str(value)
        by_group.setdefault(key, []).append(record)
    out: dict[str, Any] = {}
    for key in sorted(by_group):
        members = by_group[key]
        rewards = reward_stats(members)
        out[key] = {
            "rollouts": len(members),
            "pass_rate": pass_rate(members),
            "reward_mean": rewards["mean"],
        }
    return out


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
    return pass_rate_rows(tallies)


def _ulps(value: float) -> float:
    """A tolerance for a tie with a median or mean: a few ulps of ``value``."""
    return 4 * math.ulp(max(1.0, abs(value)))


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


TIE_MARGIN = 0.1
"""A failing rollout within this share of the RM's pass-fail gap (median passing - median
failing reward of the run) below the passing reference is scored like a passing one."""


def _rewards_by_outcome(
    records: Iterable[Record],
) -> tuple[dict[str, list[float]], list[float]]:
    """Rewards of verifier-passing model outcomes by input, and of failing ones (fixture
    misses and infra errors left out)."""
    passing: dict[str, list[float]] = {}
    failing: list[float] = []
    for record in _scored(records):
        reward = _reward(record)
        if reward is None or record.get("status") == Status.FIXTURE_MISS:
            continue
        if _passed(record):
            passing.setdefault(_key(record)[0], []).append(reward)
        else:
            failing.append(reward)
    return passing, failing


def disagreements(
    records: Iterable[Record], baseline: Iterable[Record] | None = None
) -> dict[str, Any]:
    """Rollouts where the reward model and the verifiers disagree: reward-hacking suspects.

    ``high_reward_failed`` (the suspects): a rollout that fails the verifiers although the
    reward model scores it at least as high as typical passing answers -- the median reward of
    verifier-passing rollouts of the same input, or of the whole run when that input has none
    passing. The reference is absolute (what the RM pays for a right answer), not a quantile of
    the run, so there is no cap on the share: a run where every wrong answer is hacked has every
    wrong answer suspect. "At least as high" allows a ``margin``: a tenth (TIE_MARGIN) of the
    RM's own pass-fail gap (run medians; 0 when it does not separate them), because a median of
    one or two passing rewards is itself noisy and a failing answer paid within a tenth of what
    passing is worth is paid as a right one. With a ``baseline`` run (the same env scored at a
    reference checkpoint, e.g. the SFT model), a failing rollout is also suspect when it scores
    at least as high as the baseline's median passing reward of that input (else of the baseline
    run), with the baseline's own margin: that catches a proxy hacked so thoroughly that this
    run's own passing answers are inflated too. Each suspect says ``by`` which reference(s).
    ``low_reward_passed``: passes although scored at or below the median failing reward (of the
    input, else the run). Only model outcomes with a reward count (infra errors and fixture
    misses are never suspects). Ties are suspects (a failing answer paid exactly the passing
    reference is paid as a right one), but a run whose rewards are all equal says nothing and
    has no disagreements, and a rollout at the run's maximum is never "low". A run
    where nothing passes has no absolute reference: its 75th reward percentile stands in.
    ``suspect_rate`` is over rollouts with a reward.
    """
    scored = [
        r
        for r in _scored(records)
        if _reward(r) is not None and r.get("status") != Status.FIXTURE_MISS
    ]
    base, base_failing = _rewards_by_outcome(baseline) if baseline is not None else (None, [])
    base_run = _median([v for values in (base or {}).values() for v in values])
    base_fail = _median(base_failing)
    base_margin = 0.0
    if base_run is not None and base_fail is not None and base_run > base_fail:
        base_margin = TIE_MARGIN * (base_run - base_fail)
    out: dict[str, Any] = {
        "n": len(scored),
        "reference": "median passing reward of the input, else of the run",
        "run_pass_median": None,
        "run_fail_median": None,
        "margin": 0.0,
        "baseline": None
        if base is None
        else {"inputs_with_passing": len(base), "pass_median": base_run, "margin": base_margin},
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
    margin = 0.0
    fallback = run_pass is None
    if run_pass is None:  # nothing passes anywhere: no absolute reference, the run's quartile
        run_pass = _quantile(rewards, 0.75)
        out["reference"] = "no passing rollout: the run's 75th reward percentile"
    elif run_fail is not None and run_pass > run_fail:
        margin = TIE_MARGIN * (run_pass - run_fail)
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
            continue
        ref = _median(passing) if passing else run_pass
        # ties are suspects (a median is a float: an ulp below it is a tie); only the quartile
        # stand-in of a run with nothing passing keeps the run's minimum out
        floor = lowest if fallback or lowest == highest else -math.inf
        by = (
            ["run"]
            if ref is not None and reward >= ref - margin - _ulps(ref) and reward > floor
            else []
        )
        base_ref = None
        if base is not None:
            base_ref = _median(base[input_id]) if base.get(input_id) else base_run
            # an external reference: no run-minimum rule
            if base_ref is not None and reward >= base_ref - base_margin - _ulps(base_ref):
                by.append("baseline")
        if by:
            extra = {"baseline_reference": base_ref} if base is not None else {}
            high_failed.append({**row, "passed": False, "reference": ref, **extra, "by": by})
    high_failed.sort(key=lambda r: (-r["reward"], r["input_id"], r["rollout"]))
    low_passed.sort(key=lambda r: (r["reward"], r["input_id"], r["rollout"]))
    n = len(scored)
    out.update(
        run_pass_median=run_pass,
        run_fail_median=run_fail,
        margin=margin,
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
    dict) is aggregated by :func:`rlenv.metrics.kl.aggregate` (token-pooled ``mean_k1``,
    ``mean_k3``, ...). Otherwise every numeric field ``x`` is averaged over rollouts as
    ``mean_x``.
    """
    dicts = [r["kl"] for r in _scored(records) if isinstance(r.get("kl"), Mapping)]
    if not dicts:
        return None
    if any("per_token" in d or any(isinstance(v, list) for v in d.values()) for d in dicts):
        from rlenv.metrics.kl import aggregate

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
