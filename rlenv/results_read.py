"""Reading results.jsonl back: whole (`read_results`, which `--resume` repairs a torn last line
with) or a record at a time (`iter_results`). `rlenv.results` gives both under its name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.result_lines import decode_line

RolloutRecord = Any
"""A record as read (`rlenv.results.RolloutRecord`, which is above this module)."""


def read_results(path: Path, *, repair: bool = False) -> list[RolloutRecord]:
    """Read results.jsonl; a torn last line (crash mid-write) is dropped, and cut off if repair.

    With `repair` (`--resume`), a line that does not parse with lines after it is no torn
    write but a change made after the run wrote it: UserError naming it, nothing cut (cutting
    there would lose every record after it)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records: list[RolloutRecord] = []
    good_end = 0
    position = 0
    lines = data.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        end = position + len(line)
        if line.endswith(b"\n"):
            try:
                records.append(decode_line(line))
                good_end = end
            except json.JSONDecodeError:
                if repair and number < len(lines):
                    raise UserError(
                        "not a JSON record, and not the last line (a write cut short is"
                        " always last): the file was changed after the run wrote it",
                        where=f"{path}:{number}",
                    ) from None
                break
        position = end
    if repair and good_end < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
    return records


def iter_results(path: Path, end: int | None = None) -> Iterator[RolloutRecord]:
    """Records of results.jsonl one at a time, stopping at a torn last line (and, given `end`,
    at that byte offset: the lines that were there before a run appended its own)."""
    if not path.exists():
        return
    with open(path, "rb") as handle:
        position = 0
        for line in handle:
            position += len(line)
            if not line.endswith(b"\n") or (end is not None and position > end):
                return
            try:
                yield decode_line(line)
            except json.JSONDecodeError:
                return
