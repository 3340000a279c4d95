"""The record digest and the results file through the public functions of rlenv.results and
rlenv.audit, in process (the mutation run's fast set for both).

Issue 27: a mutant that no longer left `output` out of the digest was caught only by a test
file not run with results.py; here it is caught beside the module."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rlenv.audit import TamperedRun, audited_records, numbered_records
from rlenv.canonical import canonical_bytes
from rlenv.errors import UserError
from rlenv.results import (
    VOLATILE_FIELDS,
    ResultsWriter,
    WrittenLine,
    decode_line,
    digest_in_order,
    encode_line,
    order_key,
    outcome_digest,
    read_results,
    record_digest,
    run_digest,
    seal,
    stable,
)


def record(input_id: str = "q1", rollout: int = 0, index: int = 0, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "input_id": input_id,
        "input_index": index,
        "rollout": rollout,
        "seed": 7,
        "answer": "42",
        "passed": True,
        "reward": 1.0,
        "status": "ok",
        "verifiers": [{"name": "exact", "passed": True, "score": 1.0}],
    }
    return {**base, **extra}


def test_volatile_fields_are_left_out_of_the_digest() -> None:
    assert set(VOLATILE_FIELDS) == {"timing", "digest", "output"}
    plain = record()
    noisy = record(
        timing={"wall_s": 1.5},
        output={"stdout": "printed\n", "stderr": "", "truncated": False},
        digest="0" * 64,
    )
    assert stable(noisy) == plain
    assert record_digest(noisy) == record_digest(plain)
    other_output = record(output={"stdout": "something else", "stderr": "x", "truncated": True})
    assert record_digest(other_output) == record_digest(plain)


def test_the_digest_is_sha256_of_the_canonical_stable_record() -> None:
    plain = record()
    expected = hashlib.sha256(canonical_bytes(plain)).hexdigest()
    assert record_digest(plain) == expected
    assert record_digest(record(timing={"a": 1})) == expected
    sealed = seal(record(timing={"a": 1}))
    assert sealed["digest"] == expected and sealed["timing"] == {"a": 1}


@pytest.mark.parametrize(
    "change",
    [
        {"answer": "43"},
        {"passed": False},
        {"reward": 0.5},
        {"status": "model_error"},
        {"verifiers": [{"name": "exact", "passed": False, "score": 1.0}]},
        {"seed": 8},
        {"extra_field": None},
    ],
)
def test_every_other_field_is_digested(change: dict[str, Any]) -> None:
    assert record_digest(record(**change)) != record_digest(record())


def test_order_key_and_run_digest_order() -> None:
    assert order_key(record("b", 1, 3)) == (3, "b", 1)
    assert order_key({"input_id": 5, "rollout": "2"}) == (0, "5", 2)
    records = [record("a", 0, 0), record("a", 1, 0), record("b", 0, 1), record("c", 0, 2)]
    digests = [record_digest(r) for r in records]
    expected = hashlib.sha256("\n".join(digests).encode()).hexdigest()
    assert digest_in_order(digests) == expected
    assert run_digest(records) == expected
    assert run_digest(reversed(records)) == expected  # any order in, (input, rollout) order out
    assert run_digest(records[:3]) != expected
    sealed = [seal(dict(r)) for r in records]
    assert run_digest(sealed) == expected
    # a stored digest is what the run digest takes (rlenv.audit verifies it against content)
    forged = [{**sealed[0], "digest": "f" * 64}, *sealed[1:]]
    assert run_digest(forged) != expected
    assert run_digest([]) == hashlib.sha256(b"").hexdigest()


def test_encode_and_decode_lines() -> None:
    sealed = seal(record(timing={"wall_s": 7e-06}, output={"stdout": "é"}))
    line = encode_line(sealed)
    assert b"\n" not in line
    assert decode_line(line) == sealed
    assert decode_line(line.decode()) == sealed
    assert list(json.loads(line)) == sorted(sealed)
    assert b"7e-06" in line
    assert encode_line({"reward": float("nan"), "b": float("inf")}) == b'{"b":null,"reward":null}'
    big = {"n": 2**70, "k": 12345678901234567890}
    assert decode_line(encode_line(big)) == big
    assert decode_line(b'{"x": NaN}') == {"x": pytest.approx(float("nan"), nan_ok=True)}
    with pytest.raises(ValueError):
        decode_line(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError):
        decode_line(b"not json")


def test_writer_and_reader(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    given: list[WrittenLine] = []
    writer = ResultsWriter(path, on_line=given.append)
    records = [seal(record("a", n)) for n in range(3)]
    for r in records:
        writer.write(r)
    writer.close()
    seen = [written.line for written in given]
    assert seen == [encode_line(r) for r in records]
    assert [written.outcome for written in given] == [outcome_digest(r) for r in records]
    assert path.read_bytes() == b"".join(line + b"\n" for line in seen)
    assert read_results(path) == records
    assert read_results(tmp_path / "missing.jsonl") == []
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"input_id": "torn')
    assert read_results(path) == records
    assert path.read_bytes() == whole + b'{"input_id": "torn'  # not repaired unless asked
    assert read_results(path, repair=True) == records
    assert path.read_bytes() == whole
    lines = whole.splitlines(keepends=True)
    path.write_bytes(lines[0] + b"garbage\n" + b"".join(lines[1:]))
    assert read_results(path) == records[:1]
    with pytest.raises(UserError, match="not the last line"):
        read_results(path, repair=True)
    path.write_bytes(lines[0] + b"garbage\n")
    assert read_results(path, repair=True) == records[:1]
    assert path.read_bytes() == lines[0]


def write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(encode_line(r) + b"\n" for r in records))


def test_audited_records_recompute_each_digest(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    records = [seal(record("a", n, 0, output={"stdout": str(n)})) for n in range(2)]
    write(path, records)
    assert list(audited_records(numbered_records(path), str(path))) == records
    # what in-world code printed may differ: it is not digested
    edited = [{**records[0], "output": {"stdout": "changed"}}, records[1]]
    write(path, edited)
    assert len(list(audited_records(numbered_records(path), str(path)))) == 2
    # a flipped verdict is not
    flipped = [{**records[0], "passed": False}, records[1]]
    write(path, flipped)
    with pytest.raises(TamperedRun):
        list(audited_records(numbered_records(path), str(path)))
    write(path, [records[0], records[0]])
    with pytest.raises(TamperedRun):
        list(audited_records(numbered_records(path), str(path)))
