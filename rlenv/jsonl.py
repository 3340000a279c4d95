"""Reading user JSONL files (inputs, replays, preferences) with one-line file:line errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlenv.errors import UserError


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
