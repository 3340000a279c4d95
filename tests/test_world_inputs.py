"""The inputs file as a frozen-world worker holds it (rlenv.worker.inputs.WorldInputs): the
records the orchestrator checked, by the same index, whatever the file's line endings, blank
lines or non-ASCII text; held as the file's bytes (issue 30's peak memory), not a string a
line."""

from __future__ import annotations

import json
import pickle
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlenv.errors import SpecError
from rlenv.inputs import load_inputs
from rlenv.worker.inputs import WorldInputs

LINES = [
    json.dumps({"id": "a", "prompt": "plain"}),
    "",
    "   ",
    "\u3000",  # a line of unicode whitespace only: blank, as `str.strip` says
    json.dumps(
        {"id": "b", "prompt": "caf\u00e9 \u2028 and \u0085 inside a string"}, ensure_ascii=False
    ),
    json.dumps({"id": 3, "prompt": "crlf line"}) + "\r",
    json.dumps({"id": "d", "prompt": "\U0001f600 wide"}, ensure_ascii=False),
]


def test_the_worker_reads_the_records_the_orchestrator_checked(tmp_path: Path) -> None:
    for ending in ("\n", ""):
        path = tmp_path / "inputs.jsonl"
        path.write_bytes(("\n".join(LINES) + ending).encode())
        checked = load_inputs(path)
        held = WorldInputs(path, templated=False)
        assert len(held) == len(checked) == 4
        assert list(held) == checked
        assert [held[n] for n in (3, 0, 3)] == [checked[3], checked[0], checked[3]]
        assert held[1:3] == checked[1:3]


def _small_inputs(tmp_path: Path, count: int) -> Path:
    """An inputs file of `count` small records (~70 bytes a line)."""
    path = tmp_path / "inputs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"i{n:07d}", "prompt": f"echo k{n:07d}", "answer": f"v{n:07d}"})
            + "\n"
            for n in range(count)
        )
    )
    return path


def _held(path: Path, load: Callable[[Path], Any]) -> tuple[Any, int]:
    """What `load` made of `path`, and the bytes it holds (tracemalloc)."""
    tracemalloc.start()
    try:
        held = load(path)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held, size


def test_the_worker_holds_the_inputs_as_the_files_bytes(tmp_path: Path) -> None:
    """10,000 small records (~70 bytes a line) take less than 100 bytes a record; a list of a
    string a line took ~115."""
    count = 10_000
    held, size = _held(_small_inputs(tmp_path, count), lambda p: WorldInputs(p, templated=False))
    assert len(held) == count and held[count - 1].id == f"i{count - 1:07d}"
    assert size < 100 * count, size / count


def test_the_orchestrator_holds_each_input_as_its_line(tmp_path: Path) -> None:
    """`load_inputs` keeps each JSONL record's line, parsed again when its data is read: 10,000
    small records take less than 300 bytes each (parsed, ~430), and read the same."""
    count = 10_000
    records, size = _held(_small_inputs(tmp_path, count), load_inputs)
    assert size < 300 * count, size / count
    last = records[count - 1]
    assert (last.index, last.id) == (count - 1, f"i{count - 1:07d}")
    assert last.data == {"id": last.id, "prompt": f"echo k{count - 1:07d}", "answer": "v0009999"}
    assert last.messages(None) == [{"role": "user", "content": "echo k0009999"}]
    assert pickle.loads(pickle.dumps(last)) == last
    with pytest.raises(AttributeError):
        last.id = "other"  # type: ignore[misc]


def test_inputs_the_checks_refuse_are_refused_as_before(tmp_path: Path) -> None:
    path = tmp_path / "inputs.jsonl"
    for text, message in (
        ('{"id": "a", "prompt": "x"}\n[1]\n', "expected a JSON object per line"),
        ('{"id": "a", "prompt": "x"}\n{"id": \n', "invalid JSON"),
        ('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": NaN}\n', "invalid JSON"),
    ):
        path.write_text(text)
        with pytest.raises(SpecError, match=message) as caught:
            load_inputs(path)
        assert caught.value.where == f"{path}:2"
    path.write_bytes(b'{"id": "a", "prompt": "\xff"}\n')
    with pytest.raises(SpecError, match="not UTF-8"):
        load_inputs(path)
