"""The record checks of the run-integrity reader (rlenv.audit_records), in process: each line
parsed within bounds, each record's digest recomputed, no (input, rollout) twice, none outside
the run, no gap — and the one line that names where. Both ways of remembering what was seen
(a slot per rollout while K is small, a set otherwise) must say the same. The mutation run's
fast set for rlenv/audit_records.py (tests/test_audit.py runs the same promises through
`rlenv check` on a real run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlenv.audit_records import (
    DENSE_ROLLOUTS,
    RecordAudit,
    TamperedRun,
    audited_records,
    expected_inputs,
    numbered_records,
)
from rlenv.results import encode_line, seal

SPARSE = DENSE_ROLLOUTS + 1  # K above which a set per input is kept instead of slots


def record(input_id: str, rollout: int, index: int = 0, **extra: Any) -> dict[str, Any]:
    return seal(
        {
            "input_id": input_id,
            "input_index": index,
            "rollout": rollout,
            "answer": f"{input_id}{rollout}",
            "passed": True,
            "status": "ok",
            **extra,
        }
    )


def read(records: list[dict[str, Any]], **bounds: Any) -> list[dict[str, Any]]:
    return list(audited_records(enumerate(records, start=1), "R", **bounds))


def refused(records: list[dict[str, Any]], **bounds: Any) -> str:
    with pytest.raises(TamperedRun) as caught:
        read(records, **bounds)
    return str(caught.value)


def test_numbered_records_stop_at_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    assert list(numbered_records(path)) == []  # no file yet: nothing
    lines = [encode_line(record("a", n)) + b"\n" for n in range(2)]
    path.write_bytes(b"".join(lines) + b'{"input_id": "a", "roll')
    assert [number for number, _ in numbered_records(path)] == [1, 2]
    path.write_bytes(b"".join(lines) + b"{not json\n")  # the last line, whole but bad: torn
    assert [number for number, _ in numbered_records(path)] == [1, 2]
    path.write_bytes(lines[0] + b"{not json\n" + lines[1])
    with pytest.raises(TamperedRun, match=r"results.jsonl:2: not a JSON record"):
        list(numbered_records(path))
    path.write_bytes(lines[0] + b"[1, 2]\n" + lines[1])
    with pytest.raises(TamperedRun, match=r"results.jsonl:2: not a JSON object"):
        list(numbered_records(path))
    path.write_bytes(lines[0] + b"[" * 100_000 + b"]" * 100_000 + b"\n" + lines[1])
    with pytest.raises(TamperedRun, match=r"results.jsonl:2: a line nested too deeply"):
        list(numbered_records(path))


def test_intact_records_pass_in_any_order() -> None:
    records = [record("b", 1, 1), record("a", 0, 0), record("b", 0, 1), record("a", 1, 0)]
    for per_input in (2, None):
        assert read(records, rollouts_per_input=per_input, inputs=2) == records
    assert read(records, rollouts_per_input=2, inputs=[0, 1]) == records
    assert read(records) == records


def test_a_record_that_is_not_a_rollout_or_has_no_digest() -> None:
    assert refused([{"rollout": 0, "digest": "x"}]) == "R:1: not a rollout record"
    assert refused([{"input_id": "a", "rollout": "zero"}]) == "R:1: not a rollout record"
    bad_index = {"input_id": "a", "rollout": 0, "input_index": [1]}
    assert refused([bad_index]) == "R:1: not a rollout record"
    unsealed = {k: v for k, v in record("a", 0).items() if k != "digest"}
    assert refused([record("a", 1), unsealed]) == "R:2: record has no digest"
    assert refused([{**unsealed, "digest": ""}]) == "R:1: record has no digest"


def test_an_edited_record_does_not_match_its_digest() -> None:
    edited = {**record("a", 0), "passed": False}
    assert refused([record("b", 0, 1), edited]) == (
        "R:2: record ('a', rollout 0) does not match its digest"
        " (its content changed after it was written)"
    )


@pytest.mark.parametrize("per_input", [3, SPARSE, None])
def test_a_duplicate_names_the_first_line(per_input: int | None) -> None:
    records = [record("a", 0), record("a", 1), record("b", 1, 1), record("a", 1)]
    assert refused(records, rollouts_per_input=per_input) == (
        "R:4: duplicate record ('a', rollout 1), first on line 2"
    )
    forged = [record("a", 0), record("a", 0, answer="forged")]  # self-consistent, same slot
    assert refused(forged, rollouts_per_input=per_input) == (
        "R:2: duplicate record ('a', rollout 0), first on line 1"
    )


@pytest.mark.parametrize("per_input", [3, SPARSE])
def test_a_rollout_outside_the_run(per_input: int) -> None:
    assert refused([record("a", 0), record("a", per_input)], rollouts_per_input=per_input) == (
        f"R:2: rollout {per_input} of 'a' is outside the run's {per_input} rollouts per input"
    )
    assert refused([record("a", -1)], rollouts_per_input=per_input) == (
        f"R:1: rollout -1 of 'a' is outside the run's {per_input} rollouts per input"
    )
    # the refused record is refused again, not taken as a first sighting
    twice = [record("a", per_input), record("a", per_input)]
    assert refused(twice, rollouts_per_input=per_input).startswith("R:1: rollout")


def test_an_input_outside_the_run_or_an_index_named_twice() -> None:
    assert refused([record("a", 0, 0), record("c", 0, 2)], inputs=2) == (
        "R:2: input index 2 of 'c' is outside the run's 2 inputs"
    )
    assert refused([record("a", 0, -1)], inputs=2) == (
        "R:1: input index -1 of 'a' is outside the run's 2 inputs"
    )
    assert refused([record("c", 0, 5)], inputs=[1, 3]) == (
        "R:1: input index 5 of 'c' is outside the run's 2 inputs"
    )
    assert refused([record("a", 0, 0), record("z", 0, 0)]) == (
        "R:2: input index 0 belongs to 'a', not 'z'"
    )


@pytest.mark.parametrize("per_input", [3, SPARSE])
def test_a_missing_rollout_is_named_with_the_count(per_input: int) -> None:
    records = [record("a", n) for n in range(per_input)]
    assert read(records, rollouts_per_input=per_input) == records
    records += [record("b", 0, 1), record("b", 2, 1)]
    assert refused(records, rollouts_per_input=per_input) == (
        f"R: input 'b' is missing rollout 1 ({per_input - 2} of {per_input} missing)"
    )
    assert refused(records[1:], rollouts_per_input=per_input) == (
        f"R: input 'a' is missing rollout 0 (1 of {per_input} missing)"
    )


def test_many_inputs_each_keep_their_own_rollouts() -> None:
    # slots of one input must not be taken for another's (the dense layout grows per input)
    records = [record(f"i{n}", r, n) for r in range(2) for n in range(5)]
    assert read(records, rollouts_per_input=2, inputs=5) == records
    gap = [r for r in records if (r["input_id"], r["rollout"]) != ("i3", 1)]
    assert refused(gap, rollouts_per_input=2, inputs=5) == (
        "R: input 'i3' is missing rollout 1 (1 of 2 missing)"
    )


def test_a_missing_input_is_named_with_the_count() -> None:
    records = [record("a", 0, 0), record("c", 0, 2)]
    assert refused(records, rollouts_per_input=1, inputs=4) == (
        "R: input index 1 is missing (2 of 4 inputs missing)"
    )
    assert refused(records, inputs=[0, 2, 5, 7]) == (
        "R: input index 5 is missing (2 of 4 inputs missing)"
    )
    assert refused([], inputs=1) == "R: input index 0 is missing (1 of 1 inputs missing)"
    assert read([], inputs=0) == []


def test_the_checks_run_as_records_pass() -> None:
    """A reader that streams sees every good record before the bad one is refused."""
    seen = []
    stream = audited_records(enumerate([record("a", 0), record("a", 0)], 1), "R")
    with pytest.raises(TamperedRun):
        for one in stream:
            seen.append(one["rollout"])
    assert seen == [0]


def test_admit_key_alone_keeps_the_same_promises() -> None:
    checks = RecordAudit("W", rollouts_per_input=2, inputs=1)
    checks.admit_key(1, "a", 0, 0)
    with pytest.raises(TamperedRun, match="W:2: duplicate record"):
        checks.admit_key(2, "a", 0, 0)
    with pytest.raises(TamperedRun, match="W:3: input index 1 of 'b'"):
        checks.admit_key(3, "b", 0, 1)
    with pytest.raises(TamperedRun, match="W: input 'a' is missing rollout 1"):
        checks.finish()
    checks.admit_key(4, "a", 1, 0)
    checks.finish()


def test_a_record_without_an_input_index_is_input_zero() -> None:
    """Records written before input indices were kept: their index is 0."""
    old = [
        seal({k: v for k, v in record("a", n).items() if k not in ("digest", "input_index")})
        for n in range(2)
    ]
    assert read(old, rollouts_per_input=2, inputs=1) == old
    assert refused([*old, record("b", 0, 0)]) == "R:3: input index 0 belongs to 'a', not 'b'"


def test_expected_inputs() -> None:
    assert expected_inputs({"input_indices": [3, "5"], "inputs": 9}, {}) == [3, 5]
    assert expected_inputs({"inputs": 4}, {"expected_rollouts": 100}) == 4
    assert expected_inputs({"rollouts_per_input": 3}, {"expected_rollouts": 12}) == 4
    assert expected_inputs({"rollouts_per_input": 0}, {"expected_rollouts": 12}) is None
    one = expected_inputs({"rollouts_per_input": 1}, {"expected_rollouts": 3})
    assert one == 3 and type(one) is int
    assert expected_inputs({"rollouts_per_input": 4}, {"expected_rollouts": 14}) == 3
    assert expected_inputs({"rollouts_per_input": "3"}, {"expected_rollouts": 12}) is None
    assert expected_inputs({"rollouts_per_input": 3}, {"expected_rollouts": "12"}) is None
    assert expected_inputs({"inputs": "4"}, {}) is None
    assert expected_inputs({}, {}) is None
    assert json.dumps(expected_inputs({"input_indices": []}, {})) == "[]"
