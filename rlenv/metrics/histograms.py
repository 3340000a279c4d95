"""Reward, reward-component and length distributions by stage: histograms of several runs on
shared bins."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rlenv.metrics._records import Record, _reward, _scored, _words

COMPONENT_PREFIX = "rewards/"
"""Key of a composite reward's component histogram: ``rewards/<name>`` (TRL's naming)."""


def _values(records: list[Record], field: str) -> list[float]:
    if field == "reward":
        return [float(v) for v in (_reward(r) for r in records) if v is not None]
    if field.startswith(COMPONENT_PREFIX):
        name = field[len(COMPONENT_PREFIX) :]
        found = [(r.get("rewards") or {}).get(name) for r in records]
        return [float(v) for v in found if isinstance(v, int | float) and not isinstance(v, bool)]
    return [float(len(_words(r.get("answer")))) for r in records]


def _component_names(runs: Sequence[tuple[str, list[Record]]]) -> list[str]:
    """Names of the composite reward's components any record carries ("total" is the reward)."""
    names = {
        str(name)
        for _, records in runs
        for r in records
        if isinstance(r.get("rewards"), Mapping)
        for name in r["rewards"]
    }
    return sorted(names - {"total"})


def stage_histograms(
    runs: Sequence[tuple[str, Iterable[Record]]], bins: int = 20
) -> dict[str, Any]:
    """Per field ("reward", "length", and ``rewards/<name>`` for each component of a composite
    reward the records carry): bin ``edges`` shared by every run (over all their values) and
    each run's ``counts`` and summary (``min``, ``max``, ``num``, ``sum``, ``sum_squares``, as
    TensorBoard histograms want); None for a field no run has values of."""
    materialised = [(name, _scored(list(records))) for name, records in runs]
    out: dict[str, Any] = {}
    components = [COMPONENT_PREFIX + name for name in _component_names(materialised)]
    for field in ("reward", "length", *components):
        per_run = {name: _values(records, field) for name, records in materialised}
        pooled = [v for values in per_run.values() for v in values if math.isfinite(v)]
        if not pooled:
            out[field] = None
            continue
        low, high = min(pooled), max(pooled)
        if low == high:
            low, high = low - 0.5, high + 0.5
        edges = np.linspace(low, high, bins + 1)
        runs_out = {}
        for name, values in per_run.items():
            array = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
            counts = np.histogram(array, bins=edges)[0] if array.size else np.zeros(bins)
            runs_out[name] = {
                "counts": [int(c) for c in counts],
                "min": float(array.min()) if array.size else None,
                "max": float(array.max()) if array.size else None,
                "num": int(array.size),
                "sum": float(array.sum()),
                "sum_squares": float((array**2).sum()),
            }
        out[field] = {"edges": [float(e) for e in edges], "runs": runs_out}
    return out
