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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlenv.metrics.kl import aggregate as aggregate  # the run-level summary, a metric
from rlenv.metrics.kl import json_float as _json_float

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
    estimator = "exact" if estimators == {"exact"} else sorted(e for e in estimators if e)[0]
    return shift_record(estimator, per_token)
