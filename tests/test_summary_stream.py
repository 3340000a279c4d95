"""The end-of-run summary without re-reading the run (issue 17): `rlenv run` tallies each line
as it writes it and reads back only the lines an earlier run left (--resume); the summary is
the one every later reader rebuilds from results.jsonl, byte for byte. Per record it keeps a
slotted compact row, and the record checks keep a line number per (input, rollout)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlenv import metrics
from rlenv.audit import RecordAudit, TamperedRun, audit_run, audited_records, seal_run_json
from rlenv.canonical import canonical_bytes
from rlenv.env import load_environment
from rlenv.results import (
    OrderedDigests,
    compact_for_metrics,
    components,
    encode_line,
    iter_results,
    record_digest,
    run_digest,
    seal,
)
from rlenv.runner import _pretty
from rlenv.summary import _Totals, build_summary
from tests import hacked_runs
from tests.conftest import EnvBuilder, cli

POLICY = """
import random


def policy(messages, tools, ctx):
    prompt = messages[-1]["content"]
    if prompt.endswith("boom"):
        raise RuntimeError("the policy fell over")
    word = prompt.split()[-1]
    if random.random() < 0.5:
        return " ".join([word] * random.randint(1, 4))
    return "other " * random.randint(1, 3)


def score(prompt, answer, ctx):
    return len((answer or "").split()) / 4 + random.random() / 10
"""

INPUTS = [{"id": f"i{n}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(7)] + [
    {"id": "i7", "prompt": "say boom", "answer": "boom"}
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with rewards, composite rewards, passes, fails and a failing part."""
    root = tmp_path_factory.mktemp("stream")
    builder = EnvBuilder(root / "env")
    spec = builder.write(
        POLICY,
        inputs=INPUTS,
        rollouts=3,
        reward_model={"function": f"{builder.module}:score"},
        reward={
            "components": {
                "exact": {"verifier": "exact_match"},
                "rm": {"reward_model": True, "weight": 0.5},
            }
        },
    )
    out = root / "run"
    result = cli("run", str(spec), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    return out


def _from_disk(run: Path) -> bytes:
    """summary.json as every later reader rebuilds it: all of results.jsonl, each record's
    digest recomputed (the path `rlenv grade` takes)."""
    meta = json.loads((run / "run.json").read_text())
    prepared = load_environment(meta["spec"], purpose="grade")
    results = run / "results.jsonl"
    summary = build_summary(
        prepared, meta, iter_results(results), meta["model"]["uri"], str(results)
    )
    return _pretty(seal_run_json(summary, run))


def test_run_summary_is_the_summary_of_its_file(finished: Path) -> None:
    summary = json.loads((finished / "summary.json").read_text())
    assert summary["rollouts"] == 24 and len(summary["counts"]) >= 2, summary["counts"]
    assert summary["reward"] and summary["reward_components"] and summary["errors"]
    assert (finished / "summary.json").read_bytes() == _from_disk(finished)
    # the run digest as RunDigest computes it from the file, and `rlenv check` agrees
    assert summary["digest"] == run_digest(iter_results(finished / "results.jsonl"))
    assert audit_run(finished).ok, audit_run(finished).problems


def test_resumed_summary_is_the_summary_of_its_file(finished: Path, tmp_path: Path) -> None:
    """Earlier lines read back and verified, the rest tallied as written: the same summary
    as the whole file read back, and the same run digest as the run done in one go."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run / "results.jsonl").write_bytes(b"".join(lines[:10]))
    (run / "summary.json").unlink()
    spec = json.loads((run / "run.json").read_text())["spec"]
    result = cli("run", spec, "--out", str(run), "--resume", "--json")
    assert result.returncode == 0, result.stderr
    assert len((run / "results.jsonl").read_bytes().splitlines()) == 24
    assert (run / "summary.json").read_bytes() == _from_disk(run)
    before = json.loads((finished / "summary.json").read_text())
    assert json.loads((run / "summary.json").read_text())["digest"] == before["digest"]


def test_resume_refuses_a_tampered_earlier_line_with_rollouts_to_run(
    finished: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    record = json.loads(lines[1])
    record["passed"] = not record["passed"]
    lines[1] = json.dumps(record, sort_keys=True).encode() + b"\n"
    (run / "results.jsonl").write_bytes(b"".join(lines[:12]))
    (run / "summary.json").unlink()
    spec = json.loads((run / "run.json").read_text())["spec"]
    result = cli("run", spec, "--out", str(run), "--resume")
    assert result.returncode == 2, result.stderr
    assert "results.jsonl:2:" in result.stderr and "does not match its digest" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (run / "summary.json").exists()


# -- the lines this process wrote are checked in their place ------------------------------


def _sealed(input_id: str, index: int, rollout: int, **extra: Any) -> dict[str, Any]:
    return seal(
        {
            "input_id": input_id,
            "input_index": index,
            "rollout": rollout,
            "status": "ok",
            "answer": f"{input_id} {rollout}",
            "verifiers": [{"name": "v", "passed": rollout == 0}],
            "passed": rollout == 0,
            "reward": 0.25 * rollout,
            **extra,
        }
    )


def _summary(earlier: list[dict[str, Any]], written: _Totals | None) -> dict[str, Any]:
    prepared = SimpleNamespace(inputs=[SimpleNamespace(id="a"), SimpleNamespace(id="b")])
    meta = {
        "env": {"name": "t"},
        "model": {"uri": "python:x"},
        "decoding": {"temperature": 1.0},
        "rollouts_per_input": 2,
        "limit": None,
        "world": {},
    }
    return build_summary(prepared, meta, earlier, "python:x", "results.jsonl", written=written)  # type: ignore[arg-type]


def _written(*records: dict[str, Any] | bytes) -> _Totals:
    totals = _Totals()
    for record in records:
        totals.add_line(record if isinstance(record, bytes) else encode_line(record))
    return totals


def test_written_lines_make_the_summary_the_file_would() -> None:
    records = [_sealed(i, n, r) for n, i in enumerate("ab") for r in range(2)]
    whole = _summary(records, None)
    assert _summary(records[:1], _written(*records[1:])) == whole
    assert _summary([], _written(*reversed(records))) == whole


@pytest.mark.parametrize(
    ("earlier", "written", "message"),
    [
        # a line written twice: named on its second line, after the earlier ones
        (1, [1, 2, 3, 3], r"results.jsonl:5: duplicate record \('b', rollout 1\), first on line 4"),
        (2, [0], r"results.jsonl:3: duplicate record \('a', rollout 0\), first on line 1"),
        (3, [], r"results.jsonl: input 'b' is missing rollout 1"),
        (0, [0, 1, 2], r"results.jsonl: input 'b' is missing rollout 1"),
    ],
)
def test_written_lines_are_checked_in_their_place(
    earlier: int, written: list[int], message: str
) -> None:
    records = [_sealed(i, n, r) for n, i in enumerate("ab") for r in range(2)]
    with pytest.raises(TamperedRun, match=message):
        _summary(records[:earlier], _written(*(records[n] for n in written)))


def test_a_written_line_without_a_digest_is_refused_at_its_line() -> None:
    records = [_sealed(i, n, r) for n, i in enumerate("ab") for r in range(2)]
    bare = dict(records[3])
    bare.pop("digest")
    with pytest.raises(TamperedRun, match=r"results.jsonl:4: record has no digest"):
        _summary(records[:1], _written(records[1], records[2], bare))
    with pytest.raises(TamperedRun, match=r"results.jsonl:3: not a rollout record"):
        _summary(records[:1], _written(records[1], b'{"rollout": 1}', records[3]))


# -- the record checks: the same verdicts as before, in a line number per slot -------------


def _verified_before(
    records: Iterable[tuple[int, dict[str, Any]]],
    where: str,
    *,
    rollouts_per_input: int | None = None,
    inputs: int | Sequence[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """rlenv.audit.audited_records as it was before RecordAudit (the reference)."""
    expected = (
        None if inputs is None else set(range(inputs)) if isinstance(inputs, int) else set(inputs)
    )
    seen: dict[tuple[str, int], int] = {}
    rollouts: dict[str, set[int]] = {}
    indices: dict[int, str] = {}
    for number, record in records:
        at = f"{where}:{number}"
        try:
            input_id = str(record["input_id"])
            rollout = int(record["rollout"])
            index = int(record.get("input_index", 0))
        except (KeyError, TypeError, ValueError):
            raise TamperedRun("not a rollout record", where=at) from None
        stored = record.get("digest")
        if not stored:
            raise TamperedRun("record has no digest", where=at)
        if stored != record_digest(record):
            raise TamperedRun(f"record ({input_id!r}, rollout {rollout}) does not match", where=at)
        key = (input_id, rollout)
        if key in seen:
            raise TamperedRun(
                f"duplicate record ({input_id!r}, rollout {rollout}), first on line {seen[key]}",
                where=at,
            )
        seen[key] = number
        if rollouts_per_input is not None and not 0 <= rollout < rollouts_per_input:
            raise TamperedRun(
                f"rollout {rollout} of {input_id!r} is outside the run's"
                f" {rollouts_per_input} rollouts per input",
                where=at,
            )
        if expected is not None and index not in expected:
            raise TamperedRun(
                f"input index {index} of {input_id!r} is outside the run's {len(expected)} inputs",
                where=at,
            )
        if indices.setdefault(index, input_id) != input_id:
            raise TamperedRun(
                f"input index {index} belongs to {indices[index]!r}, not {input_id!r}", where=at
            )
        rollouts.setdefault(input_id, set()).add(rollout)
        yield record
    if rollouts_per_input is not None:
        for input_id, found in rollouts.items():
            missing = sorted(set(range(rollouts_per_input)) - found)
            if missing:
                raise TamperedRun(
                    f"input {input_id!r} is missing rollout {missing[0]}"
                    f" ({len(missing)} of {rollouts_per_input} missing)",
                    where=where,
                )
    if expected is not None:
        absent = sorted(expected - set(indices))
        if absent:
            raise TamperedRun(
                f"input index {absent[0]} is missing ({len(absent)} of {len(expected)} inputs"
                " missing)",
                where=where,
            )


def _verdict(run: Iterator[dict[str, Any]]) -> str:
    try:
        return f"ok {len(list(run))}"
    except TamperedRun as exc:
        return str(exc).split(" does not match")[0]


_KEYS = st.tuples(st.sampled_from("abc"), st.integers(-1, 3), st.integers(-1, 3))


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(_KEYS, max_size=10),
    per_input=st.sampled_from([None, 1, 2, 3]),
    inputs=st.sampled_from([None, 2, 3, [0, 2], [1]]),
    dense=st.booleans(),
)
def test_record_checks_give_the_verdicts_they_gave_before(
    keys: list[tuple[str, int, int]],
    per_input: int | None,
    inputs: int | list[int] | None,
    dense: bool,
) -> None:
    records = [
        seal({"input_id": input_id, "input_index": index, "rollout": rollout})
        for input_id, rollout, index in keys
    ]
    numbered = list(enumerate(records, start=1))
    before = _verdict(_verified_before(numbered, "f", rollouts_per_input=per_input, inputs=inputs))

    def now() -> Iterator[dict[str, Any]]:
        audit = RecordAudit("f", rollouts_per_input=per_input, inputs=inputs)
        audit.dense = dense and per_input is not None
        for number, record in numbered:
            audit.admit(number, record)
            yield record
        audit.finish()

    assert _verdict(now()) == before
    assert (
        _verdict(audited_records(numbered, "f", rollouts_per_input=per_input, inputs=inputs))
        == before
    )


# -- compact rows: the metrics read them as they read the dicts they replace ---------------


def _compact_before(record: dict[str, Any], shared: dict[Any, Any]) -> dict[str, Any]:
    """rlenv.results.compact_for_metrics as it was before CompactRecord (the reference)."""

    def same(value: Any) -> Any:
        return shared.setdefault(value, value)

    verifiers = tuple((v.get("name"), v.get("passed")) for v in record.get("verifiers") or [])
    if verifiers not in shared:
        shared[verifiers] = [{"name": name, "passed": passed} for name, passed in verifiers]
    compact: dict[str, Any] = {
        "input_id": same(str(record["input_id"])),
        "input_index": int(record.get("input_index", 0)),
        "rollout": int(record["rollout"]),
        "status": same(record.get("status")),
        "passed": record.get("passed"),
        "reward": record.get("reward"),
        "answer": record.get("answer"),
        "verifiers": shared[verifiers],
    }
    ran, failed = components(record)
    compact["components"] = (same(ran), failed)
    tokens = (record.get("usage") or {}).get("completion_tokens")
    if tokens:
        compact["usage"] = {"completion_tokens": tokens}
    if record.get("kl") is not None:
        compact["kl"] = record["kl"]
    if record.get("rewards") is not None:
        compact["rewards"] = record["rewards"]
    return compact


def _varied_records() -> list[dict[str, Any]]:
    """The hacked run's records with every shape a summary meets: each status, failing parts
    (the same error many times, and distinct ones), composite rewards, no tokens, no kl."""
    records = hacked_runs.build_records("hacked", "python:hacked")
    for number, record in enumerate(records):
        if number % 7 == 1:
            record.update(status="infra_error", error="endpoint down", reward=None, passed=None)
        elif number % 7 == 2:
            record.update(status="policy_error", error=f"ValueError: {number}")
            record["traceback"] = ["policy.py:3", f"line {number}"]
        elif number % 7 == 3:
            record["tool_calls"] = [
                {"turn": 0, "id": "c", "name": "t", "arguments": {}, "fixture": "hit", "ok": True},
                {
                    "turn": 0,
                    "id": "d",
                    "name": "t",
                    "arguments": {},
                    "fixture": "miss",
                    "ok": False,
                    "error": "KeyError: 'x'",
                    "traceback": ["t.py:1"],
                },
            ]
        elif number % 7 == 4:
            record.update(reward=None, rewards={"exact": 1.0, "rm": 0.25 * number, "total": 1.5})
            record.pop("kl")
        elif number % 7 == 5:
            record["usage"] = {"prompt_tokens": 3, "completion_tokens": 0}
            record["reward"] = 1  # an int reward, equal to True and 1.0 as a key
        elif number % 7 == 6:
            record.update(status="timeout", reward=None, answer=None, passed=False)
            record["verifiers"] = [dict(record["verifiers"][0], passed=None)]
    return [seal(record) for record in records]


def _canonical(value: Any) -> bytes:
    return canonical_bytes(json.loads(json.dumps(value, default=list)))


def test_compact_rows_give_the_metrics_of_the_dicts_they_replace() -> None:
    records = _varied_records()
    baseline = hacked_runs.build_records("clean", "python:clean")
    shared: dict[Any, Any] = {}
    rows = [compact_for_metrics(record, shared) for record in records]
    before_shared: dict[Any, Any] = {}
    dicts = [_compact_before(record, before_shared) for record in records]
    base_rows = [compact_for_metrics(record, {}) for record in baseline]
    base_dicts = [_compact_before(record, {}) for record in baseline]
    for row, old in zip(rows, dicts, strict=True):
        assert dict(row) == {
            **old,
            "components": (old["components"][0], tuple(old["components"][1])),
        }
        assert all((key in row) == (key in old) for key in (*old, "usage", "kl", "rewards", "x"))
        for key in (*old, "usage", "kl", "rewards", "x"):
            if key != "components":  # a tuple of failures, where it was a list
                assert row.get(key, "none") == old.get(key, "none"), key
                assert key not in old or row[key] == old[key], key
    now = metrics.compute_all(rows, decoding={"temperature": 1.0}, baseline=base_rows)
    before = metrics.compute_all(dicts, decoding={"temperature": 1.0}, baseline=base_dicts)
    assert _canonical(now) == _canonical(before)
    assert now["errors"] and now["reward_components"] and now["kl"] and now["disagreements"]
    labels = {record["input_id"]: record["input_index"] % 3 for record in records}
    assert _canonical(metrics.group_stats(rows, labels)) == _canonical(
        metrics.group_stats(dicts, labels)
    )
    rewards = [row["reward"] for row in rows if row["reward"] is not None]
    assert any(type(value) is int for value in rewards) and not any(
        type(value) is bool for value in rewards
    )
    assert math.isclose(sum(rewards), sum(d["reward"] for d in dicts if d["reward"] is not None))


def test_compact_rows_share_repeated_failures() -> None:
    records = _varied_records()
    shared: dict[Any, Any] = {}
    rows = [compact_for_metrics(record, shared) for record in records]
    tool_failures = [
        failure
        for row in rows
        for failure in row["components"][1]
        if failure["component"] == "tool t"
    ]
    assert len(tool_failures) > 1 and len({id(failure) for failure in tool_failures}) == 1
    clean = [row["components"] for row in rows if not row["components"][1]]
    assert len({id(parts) for parts in clean}) < len(clean)
    assert isinstance(rows[0], Mapping)


def test_summary_json_is_written_in_a_fraction_of_dumps_memory() -> None:
    """summary.json and the CLI's --json (rlenv.canonical.indented_json): the text of
    ``json.dumps(indent=2, ensure_ascii=False)``, in less than half its peak memory (a 10k-input
    summary held 12 MB of chunks to write 2.4 MB; issue 30, the orchestrator at 10k)."""
    import tracemalloc

    from rlenv.canonical import indented_json

    row = {"input_id": "", "n": 1, "rate": None, "x": 0.25, "ok": False, "é": "ü\u2028", "y": 2}
    rows = [dict(row, input_id=f"i{i:07d}") for i in range(10_000)]  # a diversity row each
    value = {"diagnostics": {"diversity": {"per_input": rows}}, "big": 10**30}
    expected = json.dumps(value, indent=2, ensure_ascii=False)
    peaks = []
    tracing = tracemalloc.is_tracing()
    try:
        for write in (lambda v: json.dumps(v, indent=2, ensure_ascii=False), indented_json):
            tracemalloc.start()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            text = write(value)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            assert text == expected
            del text
            if not tracing:
                tracemalloc.stop()
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peaks[1] < peaks[0] / 2, peaks


def test_the_digests_of_a_run_of_every_input_hold_no_list_of_its_indices() -> None:
    """OrderedDigests for inputs 0..N-1 keeps the range, not N integers (issue 30: what the
    orchestrator holds per input)."""
    import tracemalloc

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        digests = OrderedDigests(2, range(100_000))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    assert held < 10_000, held
    for index in (1, 0, 0, 1):  # still hashed in input order
        digests.add(index, index, f"{index:064x}", f"{index + 1:064x}")
    assert digests._next == 2 and not digests.late
