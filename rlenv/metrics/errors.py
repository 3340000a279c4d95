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
    ordered = sorted(
        records,
        key=lambda r: (int(r.get("input_index", 0)), str(r.get("input_id")), int(r["rollout"])),
    )
    rows: dict[str, dict[str, Any]] = {}
    for record in ordered:
        ran, failed = record["components"] if "components" in record else components(record)
        for name in ran:
            rows.setdefault(name, {"component": name, "failed": 0, "of": 0, "first": None})
            rows[name]["of"] += 1
        for failure in failed:
            row = rows.setdefault(
                failure["component"],
                {"component": failure["component"], "failed": 0, "of": 0, "first": None},
            )
            row["failed"] += 1
            if row["first"] is None:
                row["first"] = {
                    "input_id": str(record.get("input_id")),
                    "rollout": int(record["rollout"]),
                    "error": failure["error"],
                    "traceback": failure["traceback"],
                }
    out = []
    for name in sorted(rows, key=_rank):
        row = rows[name]
        if not row["failed"]:
            continue
        row["of"] = max(row["of"], row["failed"])
        row["unit"] = "calls" if name.startswith("tool ") else "rollouts"
        row["share"] = row["failed"] / row["of"]
        out.append(row)
    return out
