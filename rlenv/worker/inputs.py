"""The inputs file as a frozen-world worker reads it (`WorldInputs`): a record parsed when a
call asks for it."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import overload

from rlenv.errors import SpecError
from rlenv.inputs import EnvInput, load_inputs


class WorldInputs(Sequence[EnvInput]):
    """The inputs file's records as a worker reads them: a JSONL line is parsed when a call
    asks for its record (the orchestrator has checked the whole file already). A worker that
    held every parsed record paid for them at its start (~7 ms per 1,000 small inputs) and in
    every rollout's fork of it (~0.8 MB per 1,000); the lines kept are the file's size. A CSV
    file is parsed whole, as before.

    The lines are kept as the file's bytes and where each record's line starts and ends: as a
    list of strings, 10,000 small inputs took 1.1 MB of every worker (an object each, with
    its allocation overhead), on heap pages shared with its template and every rollout's
    child (issue 30's peak memory); as bytes, the file's size and 16 bytes a line."""

    def __init__(self, path: Path, *, templated: bool, rows: bool = False) -> None:
        self._parsed: list[EnvInput] | None = None
        self._text = b""
        self._starts = array("Q")  # of each record's line in `_text` (blank lines have none)
        self._ends = array("Q")
        self._last: EnvInput | None = None  # a rollout asks for its record several times
        if path.suffix.lower() == ".csv":
            self._parsed = load_inputs(path, templated=templated, rows=rows)
            return
        try:
            self._text = path.read_bytes()
            self._text.decode("utf-8")
        except (OSError, UnicodeDecodeError):  # said in one line, as the checks say it
            self._parsed = load_inputs(path, templated=templated, rows=rows)
            return
        self._index_lines()
        if not self._starts:
            raise SpecError("inputs file has no records", where=str(path))
        self._path = path
        self._rows = rows  # a datasets split's canonical rows (`rlenv.inputs.load_inputs`)

    def _index_lines(self) -> None:
        """Where each record's line is: the lines `rlenv.jsonl.json_lines` gives (split on
        newlines only, a trailing carriage return dropped), those that are not blank."""
        start, text = 0, self._text
        while start <= len(text):
            end = text.find(b"\n", start)
            end = len(text) if end < 0 else end
            stop = end - 1 if end > start and text[end - 1] == 0x0D else end
            if text[start:stop].decode("utf-8").strip():
                self._starts.append(start)
                self._ends.append(stop)
            start = end + 1

    def _line(self, index: int) -> str:
        return self._text[self._starts[index] : self._ends[index]].decode("utf-8")

    def __len__(self) -> int:
        return len(self._parsed) if self._parsed is not None else len(self._starts)

    @overload
    def __getitem__(self, index: int) -> EnvInput: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[EnvInput]: ...

    def __getitem__(self, index: int | slice) -> EnvInput | Sequence[EnvInput]:
        if isinstance(index, slice):
            return [self[number] for number in range(*index.indices(len(self)))]
        if self._parsed is not None:
            return self._parsed[index]
        if not 0 <= index < len(self._starts):
            raise IndexError(f"input index {index} out of range")
        last = self._last
        if last is not None and last.index == index:
            return last
        from rlenv.jsonl import parse_json_line

        try:
            data = parse_json_line(self._line(index), own_file=self._rows)
            record = EnvInput(index=index, id=str(data["id"]), data=data)
        except (ValueError, TypeError, KeyError):  # the file changed since it was checked
            raise SpecError(
                f"input {index} is not the checked record any more", where=str(self._path)
            ) from None
        self._last = record
        return record
