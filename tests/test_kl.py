"""rlenv.policy_shift.kl against values worked out by hand (plain math, no numpy in the oracle),
in process: the mutation run's fast set for the module."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

from rlenv.policy_shift.kl import (
    ESTIMATORS,
    aggregate,
    entropy,
    exact_kl,
    k1,
    k3,
    merge_shift_records,
    shift_record,
    to_bits,
)

P = [0.5, 0.25, 0.25]
Q = [0.25, 0.25, 0.5]


def logs(values: list[float]) -> list[float]:
    return [math.log(v) if v > 0 else -math.inf for v in values]


def test_exact_kl_entropy_and_estimators() -> None:
    expected = sum(p * (math.log(p) - math.log(q)) for p, q in zip(P, Q, strict=True))
    got = exact_kl(np.array([logs(P), logs(Q)]), np.array([logs(Q), logs(Q)]))
    assert got.tolist() == pytest.approx([expected, 0.0])
    assert entropy(np.array([logs(P)])).tolist() == pytest.approx(
        [-sum(p * math.log(p) for p in P)]
    )
    # p = 0 contributes nothing; p > 0 where q = 0 is infinite
    assert exact_kl(np.array([logs([1.0, 0.0])]), np.array([logs([0.5, 0.5])])).tolist() == (
        pytest.approx([math.log(2.0)])
    )
    assert exact_kl(np.array([logs([0.5, 0.5])]), np.array([logs([1.0, 0.0])]))[0] == math.inf
    assert entropy(np.array([logs([1.0, 0.0])])).tolist() == [0.0]
    # rounding never makes it negative
    assert exact_kl(np.array([[math.log(1.0 + 1e-16)]]), np.array([[0.0]])).tolist() == [0.0]
    with pytest.raises(ValueError, match="shape mismatch"):
        exact_kl(np.zeros((2, 3)), np.zeros((2, 4)))
    lp, lq = [math.log(0.5), math.log(0.2)], [math.log(0.25), math.log(0.4)]
    assert k1(lp, lq).tolist() == pytest.approx([math.log(2.0), math.log(0.5)])
    assert k3(lp, lq).tolist() == pytest.approx([0.5 - 1 - math.log(0.5), 2.0 - 1 - math.log(2.0)])
    assert ESTIMATORS == ("exact", "sampled_k1_k3", "server_logprobs")


def test_to_bits() -> None:
    assert to_bits(None) is None
    assert to_bits(math.log(2.0)) == pytest.approx(1.0)
    assert to_bits(1) == pytest.approx(1 / math.log(2.0))
    assert isinstance(to_bits(1), float)
    assert to_bits([math.log(2.0), 2 * math.log(2.0)]).tolist() == pytest.approx([1.0, 2.0])


def test_shift_record_and_merge() -> None:
    per_token = {"kl": np.array([0.5, 1.5]), "k1": np.array([1.0, -0.5]), "k3": None,
                 "entropy": np.array([math.inf, 1.0])}  # fmt: skip
    record = shift_record("exact", per_token)
    assert record == {
        "unit": "nats",
        "estimator": "exact",
        "tokens": 2,
        "per_token": {"kl": [0.5, 1.5], "k1": [1.0, -0.5], "k3": None, "entropy": [None, 1.0]},
        "sequence": {
            "kl_sum": 2.0,
            "kl_mean": 1.0,
            "k1_sum": 0.5,
            "k1_mean": 0.25,
            "k3_sum": None,
            "k3_mean": None,
            "entropy_sum": None,
            "entropy_mean": None,
        },
    }
    empty = shift_record("sampled_k1_k3", {"kl": None, "k1": None, "k3": None, "entropy": None})
    assert empty["tokens"] == 0 and empty["sequence"]["k1_sum"] is None
    none_long = shift_record("x", {"kl": None, "k1": np.zeros(0), "k3": np.zeros(0),
                                   "entropy": None})  # fmt: skip
    assert none_long["sequence"]["k1_sum"] == 0.0 and none_long["sequence"]["k1_mean"] is None
    assert merge_shift_records([record]) is record
    second = shift_record("sampled_k1_k3", {"kl": None, "k1": np.array([2.0]),
                                            "k3": np.array([0.5]), "entropy": None})  # fmt: skip
    first = shift_record("server_logprobs", {"kl": None, "k1": np.array([1.0]),
                                             "k3": np.array([0.25]), "entropy": None})  # fmt: skip
    merged = merge_shift_records([first, second])
    assert merged["estimator"] == "sampled_k1_k3"
    assert merged["per_token"]["k1"] == [1.0, 2.0] and merged["per_token"]["k3"] == [0.25, 0.5]
    assert merged["per_token"]["kl"] is None and merged["tokens"] == 2
    assert merged["sequence"]["k1_mean"] == 1.5
    exact = shift_record("exact", {"kl": np.array([1.0]), "k1": np.array([1.0]),
                                   "k3": np.array([1.0]), "entropy": np.array([1.0])})  # fmt: skip
    assert merge_shift_records([exact, exact])["estimator"] == "exact"
    assert merge_shift_records([exact, exact])["per_token"]["kl"] == [1.0, 1.0]


def test_aggregate_sampled() -> None:
    rollouts = [
        {"k1": [1.0, 3.0], "k3": [0.5, 1.5], "entropy": [2.0, 2.0], "estimator": "sampled_k1_k3"},
        {"k1": [-1.0], "k3": [1.0], "entropy": [1.0]},
    ]
    summary = aggregate(rollouts)
    pooled_k1 = [1.0, 3.0, -1.0]
    mean = sum(pooled_k1) / 3
    stderr = math.sqrt(sum((v - mean) ** 2 for v in pooled_k1) / 2) / math.sqrt(3)
    assert summary == pytest.approx(
        {
            "unit": "nats",
            "estimator": "sampled_k1_k3",
            "rollouts": 2,
            "tokens": 3,
            "mean_sequence_kl": (2.0 + 1.0) / 2,
            "mean_token_kl": 3.0 / 3,
            "mean_k1": 1.0,
            "mean_k3": 1.0,
            "mean_sequence_k1": (4.0 - 1.0) / 2,
            "mean_sequence_k3": 1.5,
            "mean_seq_mean_k1": (2.0 - 1.0) / 2,
            "mean_seq_mean_k3": (1.0 + 1.0) / 2,
            "k1_stderr": stderr,
            "mean_entropy": 5.0 / 3,
            "non_finite_tokens": 0,
            "grpo_kl": 1.0,
        }
    )
    assert aggregate([*rollouts, {"k1": [0.0], "estimator": "server_logprobs"}])["estimator"] == (
        "server_logprobs"
    )


def test_aggregate_exact_and_non_finite() -> None:
    rollouts = [
        {"per_token": {"kl": [0.5, None], "k1": [1.0, 2.0], "k3": [0.1, 0.3]}},
        {"per_token": {"kl": [1.5], "k1": [3.0], "k3": [0.2]}},
    ]
    summary = aggregate(rollouts)
    assert summary["estimator"] == "exact"
    assert summary["non_finite_tokens"] == 1
    assert summary["mean_sequence_kl"] == pytest.approx((0.5 + 1.5) / 2)
    assert summary["mean_token_kl"] == pytest.approx(1.0)
    assert summary["mean_k3"] == pytest.approx(0.2)
    assert summary["tokens"] == 3
    assert summary["mean_entropy"] is None
    one = aggregate([{"k1": [2.0], "k3": [math.inf]}])
    assert one["k1_stderr"] is None and one["mean_k3"] is None and one["non_finite_tokens"] == 1
    assert one["mean_token_kl"] is None and one["mean_sequence_kl"] == 0.0
    empty = aggregate([])
    assert empty["estimator"] == "sampled_k1_k3" and empty["tokens"] == 0
    assert empty["mean_k1"] is None and empty["mean_sequence_kl"] is None
    assert empty["rollouts"] == 0 and empty["non_finite_tokens"] == 0
    mixed = aggregate([{"kl": [1.0], "k1": [1.0], "k3": [2.0]}, {"k1": [1.0], "k3": [4.0]}])
    assert mixed["estimator"] == "sampled_k1_k3" and mixed["mean_token_kl"] == pytest.approx(3.0)


def test_float64_whatever_comes_in_and_no_numpy_warnings() -> None:
    """Integer inputs are read as float64; infinities and empty inputs raise no warning (they
    are handled, not stumbled on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert k1([1], [0]).dtype == np.float64 and k3([0], [1]).dtype == np.float64
        assert exact_kl(np.array([[0, -1]]), np.array([[0, 0]])).dtype == np.float64
        assert entropy(np.array([[0, -1]])).dtype == np.float64
        assert to_bits([1, 2]).dtype == np.float64
        minus_inf = np.array([[-math.inf, 0.0]])
        assert exact_kl(minus_inf, minus_inf).tolist() == [0.0]
        assert exact_kl(np.array([[0.0, -math.inf]]), np.array([[-math.inf, 0.0]]))[0] == math.inf
        assert entropy(minus_inf).tolist() == [0.0]
        one = aggregate([{"k1": [2.0], "k3": [1.0]}])
        assert one["k1_stderr"] is None
        assert aggregate([{}])["tokens"] == 0
        assert aggregate([{"k1": [], "k3": []}])["mean_seq_mean_k1"] is None
        assert aggregate([{"k1": [1, 2], "k3": [1, 1]}])["mean_k1"] == 1.5


def test_last_axis_of_batched_distributions() -> None:
    batch = np.array([[logs(P), logs(Q)], [logs(Q), logs(Q)]])  # [B, T, V]
    reference = np.array([[logs(Q), logs(Q)], [logs(Q), logs(Q)]])
    expected = sum(p * (math.log(p) - math.log(q)) for p, q in zip(P, Q, strict=True))
    got = exact_kl(batch, reference)
    assert got.shape == (2, 2)
    assert got.ravel().tolist() == pytest.approx([expected, 0.0, 0.0, 0.0])
    assert entropy(batch).shape == (2, 2)


def test_two_tokens_have_a_standard_error_and_sums_that_overflow_are_none() -> None:
    two = aggregate([{"k1": [1.0, 3.0], "k3": [0.0, 0.0]}])
    assert two["k1_stderr"] == pytest.approx(math.sqrt(2.0) / math.sqrt(2.0))
    with np.errstate(over="ignore"):
        huge = aggregate([{"k1": [1e308, 1e308], "k3": [1e308, 1e308]}])
    assert huge["mean_sequence_k1"] is None and huge["mean_sequence_kl"] is None


def test_merge_keeps_the_logprobs() -> None:
    def part(logprob: list[float]) -> dict[str, Any]:
        values = np.array(logprob)
        tokens = {"kl": None, "k1": values, "k3": values, "entropy": None}
        record = shift_record("sampled_k1_k3", tokens)
        record["per_token"]["logprob"] = logprob
        record["per_token"]["ref_logprob"] = [v - 1 for v in logprob]
        return record

    merged = merge_shift_records([part([-1.0]), part([-2.0, -3.0])])
    assert merged["per_token"]["logprob"] == [-1.0, -2.0, -3.0]
    assert merged["per_token"]["ref_logprob"] == [-2.0, -3.0, -4.0]
