"""The run-level KL summary (`aggregate`): per-rollout KL estimates (``rlenv.policy_shift``'s
per-token k1, k3, exact KL and entropy) pooled into the numbers summary.json carries. Pure
numbers, no model: the metrics read it, and `rlenv.policy_shift` computes what it pools.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def json_float(value: float | np.floating | None) -> float | None:
    """A float that JSON can carry: NaN and infinities become None."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _per_token(record: dict[str, Any], key: str) -> np.ndarray | None:
    """Read a per-token list from a policy_shift() result or from a flat record."""
    source = record.get("per_token", record)
    values = source.get(key)
    if values is None:
        return None
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _pooled_mean(arrays: Iterable[np.ndarray]) -> float | None:
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return None
    return float(np.concatenate(arrays).mean())


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def aggregate(per_rollout: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-level KL summary over rollouts, in nats, JSON-serialisable (NaN/inf -> None).

    Each rollout is a ``policy_shift()`` result (or a flat dict) with per-token lists ``k1``,
    ``k3``, ``entropy`` and, when full distributions were available, ``kl``; an ``estimator`` key
    says where the policy logprobs came from. Per-token means are token-weighted (pooled over all
    tokens of all rollouts); sequence means average each rollout's per-token sum. The sequence KL
    uses the exact KL when every rollout has it, otherwise k3 (unbiased under pure sampling,
    never negative). ``estimator`` is "exact" when every rollout has exact KL, else
    "server_logprobs" if any rollout's policy logprobs came from a server, else "sampled_k1_k3".

    Non-finite per-token values (an infinite KL is stored as None) are left out of every mean
    and the token positions holding one are counted in ``non_finite_tokens``: one infinite
    token does not void the run's means.
    ``mean_seq_mean_k1``/``_k3`` average each rollout's per-token mean (GRPO style);
    ``grpo_kl`` (= ``mean_seq_mean_k3``) lines up with TRL's GRPOTrainer ``kl`` log.
    """
    kls, k1s, k3s, entropies, estimators = [], [], [], [], []
    non_finite = 0
    for record in per_rollout:
        arrays = [_per_token(record, name) for name in ("kl", "k1", "k3", "entropy")]
        present = [a for a in arrays if a is not None]
        bad = np.zeros(max((a.size for a in present), default=0), dtype=bool)
        for a in present:
            bad[: a.size] |= ~np.isfinite(a)
        non_finite += int(bad.sum())
        kl_t, k1_t, k3_t, ent_t = (None if a is None else a[np.isfinite(a)] for a in arrays)
        kls.append(kl_t)
        k1s.append(k1_t)
        k3s.append(k3_t)
        entropies.append(ent_t)
        estimators.append(record.get("estimator"))

    have_exact = bool(per_rollout) and all(a is not None for a in kls)
    if have_exact:
        estimator = "exact"
    elif "server_logprobs" in estimators:
        estimator = "server_logprobs"
    else:
        estimator = "sampled_k1_k3"

    k1_arrays = [a for a in k1s if a is not None]
    k3_arrays = [a for a in k3s if a is not None]
    kl_arrays = [a for a in kls if a is not None] if have_exact else []
    ent_arrays = [a for a in entropies if a is not None]
    tokens = sum(a.size for a in k1_arrays)

    seq_source = kl_arrays if have_exact else k3_arrays
    k1_pooled = np.concatenate(k1_arrays) if k1_arrays and tokens else np.zeros(0)
    k1_stderr = (
        float(k1_pooled.std(ddof=1) / math.sqrt(k1_pooled.size)) if k1_pooled.size > 1 else None
    )
    summary = {
        "unit": "nats",
        "estimator": estimator,
        "rollouts": len(per_rollout),
        "tokens": int(tokens),
        "mean_sequence_kl": _mean([float(a.sum()) for a in seq_source]),
        "mean_token_kl": _pooled_mean(kl_arrays) if have_exact else _pooled_mean(k3_arrays),
        "mean_k1": _pooled_mean(k1_arrays),
        "mean_k3": _pooled_mean(k3_arrays),
        "mean_sequence_k1": _mean([float(a.sum()) for a in k1_arrays]),
        "mean_sequence_k3": _mean([float(a.sum()) for a in k3_arrays]),
        "mean_seq_mean_k1": _mean([float(a.mean()) for a in k1_arrays if a.size]),
        "mean_seq_mean_k3": _mean([float(a.mean()) for a in k3_arrays if a.size]),
        "k1_stderr": k1_stderr,
        "mean_entropy": _pooled_mean(ent_arrays),
        "non_finite_tokens": non_finite,
    }
    # what TRL's GRPOTrainer logs as ``kl``: k3 per token, averaged per sequence, then over them
    summary["grpo_kl"] = summary["mean_seq_mean_k3"]
    return {k: json_float(v) if isinstance(v, float) else v for k, v in summary.items()}


__all__ = ["aggregate", "json_float"]
