"""Reading user JSONL files (inputs, replays, preferences, human labels) with one-line
file:line errors."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.results import HumanLabels


def read_objects(
    path: Path, *, what: str, error: type[UserError] = UserError
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ("file:line", object) for every non-blank line; raise `error` on anything else."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text", where=str(path)) from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"invalid JSON: {exc.msg}", where=where) from None
        if not isinstance(data, dict):
            raise error("expected a JSON object per line", where=where)
        yield where, data


class HumanLabelError(UserError, ValueError):
    """A malformed human-label line: a one-line user error naming file:line (and a ValueError,
    as the label reader has always raised)."""


def load_human(path: str | Path) -> HumanLabels:
    """Human labels from JSONL: score lines ``{"input_id", "rollout", "score"}`` and preference
    lines ``{"input_id", "a", "b", "preferred"}``. Several scores for one rollout (several
    annotators) are averaged. A malformed line raises HumanLabelError naming its file:line."""
    collected: dict[tuple[str, int], list[float]] = {}
    preferences: list[dict[str, Any]] = []
    for where, item in read_objects(Path(path), what="human labels", error=HumanLabelError):
        try:
            if "preferred" in item:
                preferences.append(_preference(item))
                continue
            score = float(item["score"])
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"score {score} is outside [0, 1]")
            key = (str(item["input_id"]), int(item["rollout"]))
            collected.setdefault(key, []).append(score)
        except (ValueError, KeyError, TypeError) as exc:
            raise HumanLabelError(f"bad human label: {exc}", where=where) from exc
    scores = {key: math.fsum(v) / len(v) for key, v in sorted(collected.items())}
    return HumanLabels(scores=scores, preferences=preferences)


def _preference(item: dict[str, Any]) -> dict[str, Any]:
    if item["preferred"] not in ("a", "b"):
        raise ValueError("'preferred' must be 'a' or 'b'")
    return {
        "input_id": str(item["input_id"]),
        "a": int(item["a"]),
        "b": int(item["b"]),
        "preferred": item["preferred"],
    }
