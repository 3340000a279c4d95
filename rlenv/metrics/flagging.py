"""Warnings worth a line each, and the one rule for greedy decoding.

Every flag is a dict ``{"name", "message", "value", "threshold"}``: what was seen, the number
that raised it and the threshold it crossed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlenv.results import Status

Flag = dict[str, Any]


def flags(
    summary_metrics: Mapping[str, Any],
    decoding: Mapping[str, Any] | None = None,
    *,
    spearman_threshold: float = 0.5,
    min_length_n: int = 10,
    suspect_threshold: float = 0.10,
) -> list[dict[str, Any]]:
    """A run's flags, the ONE source for summary.json, metrics.json, report.html,
    ``report --json`` and ``compare`` (all read :func:`compute_all`'s ``flags``).

    Warnings worth a line each, from a :func:`compute_all` dict (missing blocks skipped):
    collapse, length bias, high reward-hacking suspect rate, negative mean KL, infra errors.
    ``collapse`` is never raised under greedy decoding (``decoding`` temperature 0), where
    identical rollouts are expected."""
    found = [
        None if is_greedy(decoding or {}) else _collapse(summary_metrics.get("diversity") or {}),
        _length_bias(summary_metrics.get("length_bias") or {}, spearman_threshold, min_length_n),
        _suspect_rate(summary_metrics.get("disagreements") or {}, suspect_threshold),
        _negative_kl(summary_metrics.get("kl") or {}),
        _infra_errors(summary_metrics.get("counts") or {}),
    ]
    return [flag for flag in found if flag is not None]


def is_greedy(decoding: Mapping[str, Any]) -> bool:
    """Greedy decoding (temperature 0): identical rollouts of an input are expected."""
    return decoding.get("temperature") == 0


def _collapse(div: Mapping[str, Any]) -> Flag | None:
    if not div.get("collapse"):
        return None
    thresholds = div.get("thresholds") or {}
    return {
        "name": "collapse",
        "message": "rollouts of an input are near-identical (mode collapse)",
        "value": {
            "mean_pairwise_similarity": div.get("mean_pairwise_similarity"),
            "duplicate_rate": div.get("duplicate_rate"),
        },
        "threshold": {
            "similarity": thresholds.get("similarity"),
            "duplicate_rate": thresholds.get("duplicate_rate"),
        },
    }


def _length_bias(bias: Mapping[str, Any], threshold: float, min_n: int) -> Flag | None:
    rho = bias.get("spearman")
    if rho is not None and abs(rho) >= threshold and bias.get("n", 0) >= min_n:
        return {
            "name": "length_bias",
            "message": f"reward correlates with response length (Spearman {rho:.2f})",
            "value": rho,
            "threshold": threshold,
        }
    return None


def _suspect_rate(disagreements: Mapping[str, Any], threshold: float) -> Flag | None:
    rate = disagreements.get("suspect_rate")
    if rate is not None and rate >= threshold:
        return {
            "name": "high_suspect_rate",
            "message": f"{rate:.0%} of rollouts have high reward but fail the verifiers",
            "value": rate,
            "threshold": threshold,
        }
    return None


def _negative_kl(kl: Mapping[str, Any]) -> Flag | None:
    mean_k1 = kl.get("mean_k1")
    if mean_k1 is not None and mean_k1 < 0:
        return {
            "name": "negative_kl",
            "message": "mean k1 KL estimate is negative: logprobs of policy and reference"
            " do not match the sampled tokens, or too few samples",
            "value": mean_k1,
            "threshold": 0.0,
        }
    return None


def _infra_errors(counts: Mapping[str, Any]) -> Flag | None:
    infra = counts.get(Status.INFRA_ERROR, 0)
    if not infra:
        return None
    return {
        "name": "infra_errors",
        "message": f"{infra} rollouts failed on infrastructure (excluded from scores)",
        "value": infra,
        "threshold": 0,
    }
