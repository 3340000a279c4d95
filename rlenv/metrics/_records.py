"""What every metric needs from a result record: its key, whether it is scored, its outcome.

Records with status ``infra_error`` are infrastructure failures, not model outcomes, and are
left out of every score (:func:`_scored`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from rlenv.results import Status

if TYPE_CHECKING:
    import numpy as np

Record = Mapping[str, Any]
LengthUnit = Literal["words", "completion_tokens"]
Numbers: TypeAlias = "Sequence[float] | np.ndarray"
# numpy is imported by the measures that compute with it, not here: a run folds its records
# (rlenv.metrics.tally) without it, and imports it only to summarise


def _key(record: Record) -> tuple[str, int]:
    return (str(record.get("input_id", "")), int(record.get("rollout", 0)))


def _scored(records: Iterable[Record]) -> list[Record]:
    """Model outcomes (everything but infra errors), sorted by (input_id, rollout)."""
    return sorted((r for r in records if r.get("status") != Status.INFRA_ERROR), key=_key)


def _group(records: Iterable[Record]) -> list[tuple[str, list[Record]]]:
    """Scored records grouped by input_id, inputs sorted, rollouts in index order."""
    groups: dict[str, list[Record]] = {}
    for record in _scored(records):
        groups.setdefault(_key(record)[0], []).append(record)
    return [(input_id, groups[input_id]) for input_id in sorted(groups)]


def _passed(record: Record) -> bool:
    return record.get("passed") is True


def _reward(record: Record) -> float | None:
    """The proxy reward the diagnostics read: the reward model's score, or, in an env without
    one, its composite reward's ``total`` (what a trainer given the spec's components would
    optimise). None when there is neither, or a reward part failed (never a partial total)."""
    value = record.get("reward")
    if value is None and not record.get("reward_error"):
        value = (record.get("rewards") or {}).get("total")
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _reward_range(scored: Sequence[Record]) -> list[float]:
    return [v for v in (_reward(r) for r in scored) if v is not None]


def _mean(values: Sequence[float]) -> float | None:
    """Exactly rounded mean (math.fsum), None for no values."""
    return math.fsum(values) / len(values) if values else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _quantile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.quantile(np.asarray(values, dtype=float), q))


def _words(text: str | None) -> list[str]:
    return text.split() if text else []


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _jsonable(obj: Any) -> Any:
    """Plain JSON types only: numpy scalars unwrapped, NaN/inf to None, tuples to lists."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    np = sys.modules.get("numpy")  # no numpy value exists before numpy is imported
    if np is None:
        if isinstance(obj, bool):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return _finite(float(obj))
        return obj
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _finite(float(obj))
    return obj
