"""KL, its sampled estimators and entropy, in nats, in pure numpy (no torch).

Conventions: ``logp`` is the policy, ``logq`` the reference (base) model. Full distributions are
arrays ``[T, V]`` of next-token log-probabilities (float64); sampled values are arrays ``[T]`` of
the log-probability each model gives the token that was actually sampled.

The sampled estimators (Schulman, "Approximating KL divergence") are unbiased for the per-token
KL(p||q) only when the token was drawn from p itself, i.e. pure sampling at the temperature used
for scoring, with no top-k / top-p / min-length truncation:

* k1 = log p(x) - log q(x): unbiased, high variance, can be negative per token;
* k3 = q(x)/p(x) - 1 - log(q(x)/p(x)): unbiased, lower variance, never negative.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

ESTIMATORS = ("exact", "sampled_k1_k3", "server_logprobs")


def exact_kl(logp_full: np.ndarray, logq_full: np.ndarray) -> np.ndarray:
    """Per-position KL(p||q) = sum_v p(v) (log p(v) - log q(v)) over the last axis.

    Entries where p is 0 contribute 0; where p > 0 and q is 0 the KL is +inf. Tiny negative
    values from floating-point rounding are clipped to 0 (the divergence is never negative).
    """
    logp = np.asarray(logp_full, dtype=np.float64)
    logq = np.asarray(logq_full, dtype=np.float64)
    if logp.shape != logq.shape:
        raise ValueError(f"shape mismatch: policy {logp.shape} vs reference {logq.shape}")
    p = np.exp(logp)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(p > 0, p * (logp - logq), 0.0)
    return np.maximum(terms.sum(axis=-1), 0.0)


def k1(logp: np.ndarray | Sequence[float], logq: np.ndarray | Sequence[float]) -> np.ndarray:
    """k1 = log p(x) - log q(x) at the sampled tokens."""
    return np.asarray(logp, dtype=np.float64) - np.asarray(logq, dtype=np.float64)


def k3(logp: np.ndarray | Sequence[float], logq: np.ndarray | Sequence[float]) -> np.ndarray:
    """k3 = r - 1 - log r with r = q(x)/p(x), computed as expm1(log r) - log r for accuracy."""
    log_ratio = np.asarray(logq, dtype=np.float64) - np.asarray(logp, dtype=np.float64)
    return np.expm1(log_ratio) - log_ratio


def entropy(logp_full: np.ndarray) -> np.ndarray:
    """Per-position entropy -sum_v p(v) log p(v) over the last axis."""
    logp = np.asarray(logp_full, dtype=np.float64)
    p = np.exp(logp)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * logp, 0.0)
    return -terms.sum(axis=-1)


def to_bits(nats: Any) -> Any:
    """Convert nats to bits (a float, a sequence or an array; None stays None)."""
    if nats is None:
        return None
    if isinstance(nats, int | float):
        return float(nats) / math.log(2.0)
    return np.asarray(nats, dtype=np.float64) / math.log(2.0)


def _json_float(value: float | np.floating | None) -> float | None:
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
    return {k: _json_float(v) if isinstance(v, float) else v for k, v in summary.items()}


def shift_record(estimator: str, per_token: Mapping[str, np.ndarray | None]) -> dict[str, Any]:
    """One completion's shift record: per-token lists and per-sequence sums and means."""
    tokens = len(per_token["k1"]) if per_token["k1"] is not None else 0
    sequence: dict[str, float | None] = {}
    for name in ("kl", "k1", "k3", "entropy"):
        values = per_token[name]
        if values is None:
            sequence[f"{name}_sum"] = sequence[f"{name}_mean"] = None
            continue
        total = float(np.sum(values))
        sequence[f"{name}_sum"] = _json_float(total)
        sequence[f"{name}_mean"] = _json_float(total / tokens) if tokens else None
    return {
        "unit": "nats",
        "estimator": estimator,
        "tokens": tokens,
        "per_token": {
            name: None if values is None else [_json_float(float(v)) for v in values]
            for name, values in per_token.items()
        },
        "sequence": sequence,
    }


def merge_shift_records(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Join the per-turn shift records of one rollout into one (token lists concatenated)."""
    if len(parts) == 1:
        return parts[0]
    names = ("kl", "k1", "k3", "entropy", "logprob", "ref_logprob")
    per_token: dict[str, np.ndarray | None] = {}
    for name in names:
        pieces = [part["per_token"].get(name) for part in parts]
        per_token[name] = (
            None
            if any(piece is None for piece in pieces)
            else np.asarray([value for piece in pieces for value in piece], dtype=np.float64)
        )
    estimators = {part.get("estimator") for part in parts}
    # pragma: {"exact"} alone sorts to "exact" too, so mutants of the test are equivalent
    named = sorted(e for e in estimators if e)
    estimator = "exact" if estimators == {"exact"} else named[0]  # pragma: no mutate
    return shift_record(estimator, per_token)
