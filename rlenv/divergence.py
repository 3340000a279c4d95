"""Where two runs differ: the first (input, rollout, turn, field) whose stable content is not
the same (`rlenv verify`), and the outcome comparison of `rlenv check RUN --against OTHER`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rlenv.canonical import canonical_bytes
from rlenv.results import (
    MODEL_SCORES,
    SCORE_TOLERANCE,
    RolloutRecord,
    order_key,
    outcome,
    stable,
)

TRAJECTORY_ORDER = ("messages", "tool_calls", "answer", "verifiers", "passed", "reward", "status")


def _keys_in_order(keys: set[str], top: bool) -> list[str]:
    """Top-level fields in trajectory order (what happened first is reported first)."""
    if not top:
        return sorted(keys)
    first = [key for key in TRAJECTORY_ORDER if key in keys]
    return first + sorted(keys - set(first))


def first_difference(
    left: Any, right: Any, path: str = "", *, float_tolerance: float = 0.0
) -> tuple[str, Any, Any] | None:
    """(dotted path, left's value, right's) where the two first differ; None when equal. With
    `float_tolerance`, two floats that close (relative) are equal: figures a summary computed
    through NumPy, whose last bits differ with its version and the CPU's vector unit."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in _keys_in_order(set(left) | set(right), top=not path):
            found = first_difference(
                left.get(key),
                right.get(key),
                f"{path}.{key}" if path else key,
                float_tolerance=float_tolerance,
            )
            if found:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        for index in range(max(len(left), len(right))):
            a = left[index] if index < len(left) else "<missing>"
            b = right[index] if index < len(right) else "<missing>"
            found = first_difference(a, b, f"{path}[{index}]", float_tolerance=float_tolerance)
            if found:
                return found
        return None
    if float_tolerance and _close_floats(left, right, float_tolerance):
        return None
    if canonical_bytes(left) != canonical_bytes(right):
        return path, left, right
    return None


def _close_floats(left: Any, right: Any, tolerance: float) -> bool:
    kinds = {type(left), type(right)}
    if not kinds <= {float, int} or float not in kinds:  # a bool or an integer is exact
        return False
    return math.isclose(left, right, rel_tol=tolerance, abs_tol=tolerance * 1e-3)


def first_divergence(
    run_a: Sequence[RolloutRecord], run_b: Sequence[RolloutRecord]
) -> dict[str, Any] | None:
    """The first (input, rollout, turn, field) where two runs differ, or None if identical."""
    a = {(r["input_id"], r["rollout"]): stable(r) for r in run_a}
    b = {(r["input_id"], r["rollout"]): stable(r) for r in run_b}
    ordered = sorted(
        set(a) | set(b),
        key=lambda key: order_key(a.get(key) or b.get(key)),  # type: ignore[arg-type]
    )
    for key in ordered:
        left, right = a.get(key), b.get(key)
        if left is None or right is None:
            return {
                "input_id": key[0],
                "rollout": key[1],
                "turn": None,
                "field": "(record)",
                "a": "present" if left else "missing",
                "b": "present" if right else "missing",
            }
        found = first_difference(left, right)
        if found:
            field, value_a, value_b = found
            return {
                "input_id": key[0],
                "rollout": key[1],
                "turn": _turn_of(field, left),
                "field": field,
                "a": value_a,
                "b": value_b,
            }
    return None


def _turn_of(field: str, record: dict[str, Any]) -> int | None:
    """Which model turn a differing field belongs to (assistant messages before it)."""
    if field.startswith("messages["):
        index = int(field[len("messages[") : field.index("]")])
        return (
            sum(
                1
                for message in record.get("messages", [])[: index + 1]
                if message.get("role") == "assistant"
            )
            - 1
            if index < len(record.get("messages", []))
            else None
        )
    if field.startswith("tool_calls["):
        index = int(field[len("tool_calls[") : field.index("]")])
        calls = record.get("tool_calls", [])
        return calls[index].get("turn") if index < len(calls) else None
    return None


def first_outcome_difference(
    run_a: Iterable[RolloutRecord], run_b: Iterable[RolloutRecord]
) -> dict[str, Any] | None:
    """Where two runs of the same policy outputs stop agreeing (``rlenv check --against``):
    the first (input, rollout) in run order whose outcome differs (``kind`` "outcome": a
    field of :func:`rlenv.results.outcome`, compared exactly), else the first model score
    (``kind`` "score": :data:`rlenv.results.MODEL_SCORES`) that differs by more than
    :data:`rlenv.results.SCORE_TOLERANCE`; None when the runs agree."""
    a = {(str(r["input_id"]), int(r["rollout"])): r for r in run_a}
    b = {(str(r["input_id"]), int(r["rollout"])): r for r in run_b}
    ordered = sorted(set(a) | set(b), key=lambda key: order_key(a.get(key) or b[key]))
    score: dict[str, Any] | None = None
    for key in ordered:
        left, right = a.get(key), b.get(key)
        where = {"input_id": key[0], "rollout": key[1]}
        if left is None or right is None:
            return {
                **where,
                "kind": "outcome",
                "field": "(record)",
                "a": "present" if left is not None else "missing",
                "b": "present" if right is not None else "missing",
            }
        found = first_difference(outcome(left), outcome(right))
        if found:
            return {**where, "kind": "outcome", "field": found[0], "a": found[1], "b": found[2]}
        if score is None:
            for name in MODEL_SCORES:
                apart = _scores_apart(left.get(name), right.get(name), name)
                if apart:
                    score = {
                        **where,
                        "kind": "score",
                        "field": apart[0],
                        "a": apart[1],
                        "b": apart[2],
                    }
                    break
    return score


def scores_close(a: float, b: float) -> bool:
    """Equal within :data:`rlenv.results.SCORE_TOLERANCE`: relative, or absolute near zero."""
    return math.isclose(a, b, rel_tol=SCORE_TOLERANCE, abs_tol=SCORE_TOLERANCE)


def _scores_apart(left: Any, right: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first number of two model-score values further apart than the tolerance (or a
    difference of shape: a score on one side only, another key, another length)."""
    numbers = (int, float)
    if isinstance(left, numbers) and isinstance(right, numbers):
        if isinstance(left, bool) or isinstance(right, bool):
            return None if left == right else (path, left, right)
        return None if scores_close(float(left), float(right)) else (path, left, right)
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right), key=str):
            found = _scores_apart(left.get(key), right.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        if len(left) != len(right):
            return (f"{path}.length", len(left), len(right))
        for index, (x, y) in enumerate(zip(left, right, strict=True)):
            found = _scores_apart(x, y, f"{path}[{index}]")
            if found:
                return found
        return None
    return None if canonical_bytes(left) == canonical_bytes(right) else (path, left, right)
