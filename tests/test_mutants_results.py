"""The results file in process (rlenv.results), where mutmut found the tests blind: the line
written on each of encode_line's paths is json.dumps's line, a big integer reads back as an
integer, a write cut short by the disk is cut back off, the reader's repair and its message,
the streaming reader's stops, and the parts a failed rollout blames with their frames.
In the fast set of rlenv/results.py (bench/mutants.py)."""

from __future__ import annotations

import enum
import json
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlenv.errors import UserError
from rlenv.result_lines import _reference_line
from rlenv.results import (
    CompactRecord,
    ResultsWriter,
    components,
    decode_line,
    encode_line,
    iter_results,
    read_results,
    record_digest,
    seal,
)


class Level(enum.IntEnum):
    LOW = 1


class Colour(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("record", "line"),
    [
        # a tiny float sends each field its own way: nested keys still sorted
        ({"b": {"z": 1, "a": 2}, "t": 1e-05}, b'{"b":{"a":2,"z":1},"t":1e-05}'),
        # an exponent orjson writes unlike repr, in a field of the field-by-field path
        ({"t": [1e-05, 1e16], "a": 1}, b'{"a":1,"t":[1e-05,1e+16]}'),
        # a key that is not a string: orjson refuses the record, fast_json writes it as json.dumps
        ({1: 1e16, "a": "é"}, '{"1":1e+16,"a":"é"}'.encode()),
        # a str subclass orjson passes through: fast_json writes the record as json.dumps
        ({"status": Colour.RED, "f": 1e16}, b'{"f":1e+16,"status":"red"}'),
        # a subclass orjson passes through: the whole record by fast_json, as json.dumps
        ({"level": Level.LOW, "f": 1e16, "é": "é"}, '{"f":1e+16,"level":1,"é":"é"}'.encode()),
        # an integer past 64 bits (orjson refuses it), non-ASCII kept, keys sorted
        (
            {"z": 2**70, "a": "é", "m": [1.5]},
            '{"a":"é","m":[1.5],"z":1180591620717411303424}'.encode(),
        ),
        # past 2**53 and a key out of UTF-16 order: the reference serialiser itself
        (
            {"\U00010000": 2**64 + 1, "\uffff": {"b": 1, "a": None}},
            '{"\uffff":{"a":null,"b":1},"\U00010000":18446744073709551617}'.encode(),
        ),
    ],
)
def test_every_path_writes_the_line_json_dumps_writes(record: dict[str, Any], line: bytes) -> None:
    assert encode_line(record) == line
    assert _reference_line(record) == line
    assert json.loads(line) == json.loads(json.dumps(record, default=int))


def test_the_reference_line_is_strict_sorted_compact_and_unescaped() -> None:
    assert _reference_line({"b": "é", "a": [1, 2]}) == '{"a":[1,2],"b":"é"}'.encode()
    assert _reference_line({"x": float("nan"), "y": float("-inf")}) == b'{"x":null,"y":null}'


def test_an_integer_past_64_bits_reads_back_as_that_integer() -> None:
    for line in (b'{"n": 18446744073709551617}', '{"n": 18446744073709551617}'):
        value = decode_line(line)
        assert type(value["n"]) is int and value["n"] == 2**64 + 1
    assert repr(decode_line(b'{"n": 1234567890123456789012}')) == "{'n': 1234567890123456789012}"


def test_a_line_nested_too_deeply_is_refused_as_not_json() -> None:
    with pytest.raises(ValueError, match=r"^nested too deeply$"):
        decode_line(b"[" * 100_000 + b"]" * 100_000)


def test_each_line_is_on_disk_when_write_returns(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    writer = ResultsWriter(path)
    writer.write({"input_id": "a", "rollout": 0})
    sealed = f'{{"digest":"{record_digest({"input_id": "a", "rollout": 0})}",'
    # before close: not buffered
    assert path.read_bytes() == sealed.encode() + b'"input_id":"a","rollout":0}\n'

    writer.write({"input_id": "a", "rollout": 1})
    assert path.read_bytes().count(b"\n") == 2
    writer.close()


@pytest.fixture
def file_size_limit() -> Iterator[Any]:
    """Set the file size limit (RLIMIT_FSIZE: the disk is full past it); restored after."""
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a signal
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def limit(size: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))

    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)


def test_a_write_cut_short_is_cut_back_off(tmp_path: Path, file_size_limit: Any) -> None:
    path = tmp_path / "results.jsonl"
    seen: list[bytes] = []
    writer = ResultsWriter(path, on_line=lambda written: seen.append(written.line))
    writer.write({"input_id": "a", "rollout": 0})
    whole = path.read_bytes()
    file_size_limit(len(whole) + 100)  # room for part of the next line only
    try:
        with pytest.raises(OSError) as caught:
            writer.write({"input_id": "b", "rollout": 0, "answer": "x" * 1000})
        assert caught.value.errno == 27  # EFBIG: the disk refused the rest
    finally:
        file_size_limit(resource.RLIM_INFINITY)
    assert path.read_bytes() == whole  # no torn line left behind
    assert seen == [whole.rstrip(b"\n")]  # only a line written whole is given on
    writer.write({"input_id": "c", "rollout": 0})
    writer.close()
    assert [r["input_id"] for r in read_results(path)] == ["a", "c"]


def test_repair_cuts_a_torn_last_line_even_when_it_is_the_only_one(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"input_id": "a", "rol')
    assert read_results(path) == []
    assert path.read_bytes() == b'{"input_id": "a", "rol'
    assert read_results(path, repair=True) == []
    assert path.read_bytes() == b""


def test_a_changed_line_is_named_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [json.dumps(seal({"input_id": n, "rollout": 0})) + "\n" for n in "abc"]
    path.write_text(lines[0] + "changed\n" + lines[2])
    with pytest.raises(UserError) as caught:
        read_results(path, repair=True)
    assert str(caught.value) == (
        f"{path}:2: not a JSON record, and not the last line (a write cut short is always"
        " last): the file was changed after the run wrote it"
    )
    assert path.read_text() == lines[0] + "changed\n" + lines[2]  # nothing cut
    # the same line last is a torn write: cut
    path.write_text(lines[0] + lines[1] + "changed\n")
    assert [r["input_id"] for r in read_results(path, repair=True)] == ["a", "b"]
    assert path.read_text() == lines[0] + lines[1]


def test_iter_results_stops_at_a_torn_or_bad_line_and_at_the_end_given(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    assert list(iter_results(path)) == []
    lines = [json.dumps({"input_id": n, "rollout": 0}) + "\n" for n in "abc"]
    path.write_text("".join(lines))
    assert [r["input_id"] for r in iter_results(path)] == ["a", "b", "c"]
    first_two = len(lines[0]) + len(lines[1])
    assert [r["input_id"] for r in iter_results(path, end=first_two)] == ["a", "b"]
    assert [r["input_id"] for r in iter_results(path, end=first_two - 1)] == ["a"]
    assert [r["input_id"] for r in iter_results(path, end=0)] == []
    path.write_text(lines[0] + lines[1] + '{"input_id": "c"')
    assert [r["input_id"] for r in iter_results(path)] == ["a", "b"]
    path.write_text(lines[0] + "not json\n" + lines[2])
    assert [r["input_id"] for r in iter_results(path)] == ["a"]


def test_a_failure_keeps_the_frames_of_the_part_it_blames() -> None:
    frames = ["env/tools.py:3 in f: raise"]
    for status, part in (("policy_error", "policy"), ("timeout", "timeout")):
        ran, failed = components({"status": status, "error": "E", "traceback": frames})
        assert failed == [{"component": part, "error": "E", "traceback": frames}]
    crashed = {"status": "tool_error", "error": "tool search: KeyError: 'b'", "traceback": frames}
    ran, failed = components(crashed)
    assert ran[-1] == "tool search"
    assert failed == [{"component": "tool search", "error": crashed["error"], "traceback": frames}]


def test_a_crashed_verifier_keeps_its_frames() -> None:
    frames = ["env/grade.py:9 in check: sys.exit(3)"]
    crashed = {
        "status": "verifier_error",
        "error": "verifier exact: SystemExit: 3",
        "traceback": frames,
    }
    ran, failed = components(crashed)
    assert ran[-1] == "verifier exact"
    assert failed == [
        {"component": "verifier exact", "error": crashed["error"], "traceback": frames}
    ]


def test_an_ungraded_verifier_is_skipped_not_the_rest() -> None:
    record = {
        "status": "ok",
        "verifiers": [
            {"name": "judge", "passed": None, "detail": "verifier error: x"},
            {"name": "exact", "passed": True, "detail": None},
            {"name": "late", "passed": False, "detail": "verifier error: KeyError: 'b'"},
        ],
    }
    ran, failed = components(record)
    assert ran[-2:] == ("verifier exact", "verifier late")
    assert "verifier judge" not in ran
    assert [f["component"] for f in failed] == ["verifier late"]


def test_a_compact_row_refuses_a_key_it_does_not_hold_by_name() -> None:
    with pytest.raises(KeyError) as caught:
        CompactRecord()["nothing"]
    assert caught.value.args == ("nothing",)


def test_the_reader_reads_what_the_writer_wrote_with_repair(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    writer = ResultsWriter(path)
    records = [seal({"input_id": "a", "rollout": n, "t": 7e-06}) for n in range(2)]
    for record in records:
        writer.write(record)
    writer.close()
    size = os.path.getsize(path)
    assert read_results(path, repair=True) == records
    assert os.path.getsize(path) == size


@pytest.mark.parametrize("came_with", ["f" * 64, "", None])
def test_the_writer_seals_each_line_from_its_content(tmp_path: Path, came_with: Any) -> None:
    """A worker's batch sends its records unsealed, and in-world code could forge a digest:
    the line's digest is made where it is written, from what the line holds, whatever the
    record came with (the fast path and the reference path alike)."""
    record: dict[str, Any] = {"input_id": "a", "rollout": 0, "answer": "x", "reward": 0.25}
    if came_with is not None:
        record["digest"] = came_with
    odd = {**record, "input_id": "b", "extra": {"n": 2**60}}  # the reference path
    path = tmp_path / "results.jsonl"
    writer = ResultsWriter(path)
    writer.write(record)
    writer.write(odd)
    writer.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["digest"] == record_digest(first) != came_with
    assert second["digest"] == (came_with or "")  # canonical JSON cannot hold 2**60: as it came
