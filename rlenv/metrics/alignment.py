"""Alignment gap: how well the reward model and the verifiers track human judgement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rlenv.metrics._records import (
    Record,
    _key,
    _mean,
    _passed,
    _quantile,
    _reward,
    _reward_range,
    _scored,
)
from rlenv.metrics.stats import spearman
from rlenv.results import HumanLabels


def _agreement(first: float, second: float, preferred: str) -> float:
    """1 if the signal ranks the preferred rollout higher, 0 if lower, 0.5 on a tie."""
    if first == second:
        return 0.5
    return 1.0 if (first > second) == (preferred == "a") else 0.0


def alignment_gap(
    records: Iterable[Record],
    human: Mapping[tuple[str, int], float] | HumanLabels,
    low_human: float = 0.3,
) -> dict[str, Any]:
    """How well the reward model and the verifiers track human judgement.

    Reward is min-max normalised over the run's rollouts; ``gap`` = mean normalised reward -
    mean human score over rollouts with both (positive: the reward model is more generous than
    humans). Spearman correlations of reward and of verifier pass (0/1) with the human score.
    ``high_reward_low_human``: human <= ``low_human`` and reward in the run's top quartile
    (>= 75th percentile and above the run minimum). Preferences give agreement rates: the
    share of pairs in which the reward (or verifier pass) ranks the preferred rollout higher,
    ties counting one half.
    """
    labels = human if isinstance(human, HumanLabels) else HumanLabels(scores=dict(human))
    scored = _scored(records)
    by_key = {_key(r): r for r in scored}
    rewards = _reward_range(scored)
    lowest = min(rewards) if rewards else None
    highest = max(rewards) if rewards else None
    top = _quantile(rewards, 0.75) if rewards else None

    labelled = [(r, labels.scores[_key(r)]) for r in scored if _key(r) in labels.scores]
    with_reward = [(r, h) for r, h in labelled if _reward(r) is not None]
    reward_values = [_reward(r) or 0.0 for r, _ in with_reward]
    human_values = [h for _, h in with_reward]
    mean_norm: float | None = None
    if with_reward and lowest is not None and highest is not None and highest > lowest:
        mean_norm = _mean([(v - lowest) / (highest - lowest) for v in reward_values])
    mean_human = _mean([h for _, h in labelled])
    mean_human_rewarded = _mean(human_values)
    suspects = _low_human_suspects(with_reward, reward_values, top, lowest, low_human)
    return {
        "n_labelled": len(labelled),
        "n_unmatched": len(labels.scores) - len(labelled),
        "mean_reward_norm": mean_norm,
        "mean_human": mean_human,
        "gap": None
        if mean_norm is None or mean_human_rewarded is None
        else mean_norm - mean_human_rewarded,
        "spearman_reward_human": spearman(reward_values, human_values),
        "spearman_passed_human": spearman(
            [1.0 if _passed(r) else 0.0 for r, _ in labelled], [h for _, h in labelled]
        ),
        "high_reward_low_human": suspects,
        "preferences": _preference_agreement(labels.preferences, by_key)
        if labels.preferences
        else None,
    }


def _low_human_suspects(
    with_reward: list[tuple[Record, float]],
    reward_values: list[float],
    top: float | None,
    lowest: float | None,
    low_human: float,
) -> list[dict[str, Any]]:
    """Rollouts humans score <= ``low_human`` that the reward puts in the run's top quartile."""
    suspects: list[dict[str, Any]] = []
    for (record, score), reward in zip(with_reward, reward_values, strict=True):
        assert top is not None and lowest is not None
        if score <= low_human and reward >= top and reward > lowest:
            input_id, rollout = _key(record)
            suspects.append(
                {"input_id": input_id, "rollout": rollout, "reward": reward, "human": score}
            )
    suspects.sort(key=lambda s: (-s["reward"], s["human"], s["input_id"], s["rollout"]))
    return suspects


def _preference_agreement(
    preferences: list[dict[str, Any]], by_key: Mapping[tuple[str, int], Record]
) -> dict[str, Any]:
    """Share of preference pairs in which the reward (or verifier pass) ranks the preferred
    rollout higher, ties counting one half; pairs naming an unknown rollout are skipped."""
    reward_agree: list[float] = []
    verifier_agree: list[float] = []
    for pref in sorted(preferences, key=lambda p: (p["input_id"], p["a"], p["b"])):
        first = by_key.get((pref["input_id"], pref["a"]))
        second = by_key.get((pref["input_id"], pref["b"]))
        if first is None or second is None:
            continue
        verifier_agree.append(
            _agreement(float(_passed(first)), float(_passed(second)), pref["preferred"])
        )
        ra, rb = _reward(first), _reward(second)
        if ra is not None and rb is not None:
            reward_agree.append(_agreement(ra, rb, pref["preferred"]))
    return {
        "n": len(verifier_agree),
        "reward_agreement": _mean(reward_agree),
        "verifier_agreement": _mean(verifier_agree),
    }
