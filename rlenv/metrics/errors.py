"""What failed in a run, part by part: the errors section of the summary, the console and the
report, and the ground of the flags that fail a run (:mod:`rlenv.metrics.flagging`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlenv.metrics._records import Record
from rlenv.results import components

# pipeline order: the endpoint answers, the policy and its tools run, then the graders
_ORDER = ("endpoint", "policy", "model output", "timeout", "fixtures", "tool", "verifier")


def _rank(component: str) -> tuple[int, str]:
    for rank, prefix in enumerate(_ORDER):
        if component == prefix or component.startswith(prefix + " "):
            return rank, component
    return len(_ORDER), component


def errors(records: Iterable[Record]) -> list[dict[str, Any]]:
    """One row per part of the env that failed at least once, in pipeline order:
    ``{"component", "failed", "of", "unit", "share", "first"}``.

    ``of`` counts the rollouts that exercised the part (``calls`` of a tool), ``first`` is the
    first failure in (input, rollout) order: ``{"input_id", "rollout", "error", "traceback"}``
    (traceback: the env's own frames, innermost last). Parts are those of
    :func:`rlenv.results.components`; records compacted by ``compact_for_metrics`` carry them.
    """
    tally = ErrorTally()
    for record in records:
        tally.add(record)
    return tally.rows()


class ErrorTally:
    """:func:`errors`, fed one record at a time in any order: per part a count of the rollouts
    that exercised it and of its failures, and its first failure in (input, rollout) order."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        self._first_key: dict[str, tuple[int, str, int]] = {}

    def add(self, record: Record) -> None:
        key = (
            int(record.get("input_index", 0)),
            str(record.get("input_id")),
            int(record["rollout"]),
        )
        ran, failed = record["components"] if "components" in record else components(record)
        rows = self._rows
        for name in ran:
            row = rows.get(name)
            if row is None:
                row = rows[name] = {"component": name, "failed": 0, "of": 0, "first": None}
            row["of"] += 1
        for failure in failed:
            name = failure["component"]
            row = rows.setdefault(name, {"component": name, "failed": 0, "of": 0, "first": None})
            row["failed"] += 1
            # the earliest record's first failure of the part (a tie: the one added first)
            if row["first"] is None or key < self._first_key[name]:
                self._first_key[name] = key
                row["first"] = {
                    "input_id": str(record.get("input_id")),
                    "rollout": int(record["rollout"]),
                    "error": failure["error"],
                    "traceback": failure["traceback"],
                }

    def rows(self) -> list[dict[str, Any]]:
        """The rows of :func:`errors` (pipeline order, failed parts only)."""
        out = []
        for name in sorted(self._rows, key=_rank):
            row = dict(self._rows[name])
            if not row["failed"]:
                continue
            row["of"] = max(row["of"], row["failed"])
            row["unit"] = "calls" if name.startswith("tool ") else "rollouts"
            row["share"] = row["failed"] / row["of"]
            out.append(row)
        return out
