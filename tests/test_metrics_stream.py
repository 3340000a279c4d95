"""Metrics that stream (issue 30): :class:`rlenv.metrics.tally.RunTally` folds each input once
its K rollouts are in, and gives what the record-list computation gave, byte for byte. The
reference below is ``compute_all`` as it was before it streamed (every record in one list)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from rlenv import metrics
from rlenv.canonical import canonical_bytes
from rlenv.metrics._records import Record, _jsonable, _key, _scored
from rlenv.metrics.alignment import alignment_gap
from rlenv.metrics.errors import errors
from rlenv.metrics.flagging import flags
from rlenv.metrics.length import LengthUnit, length_bias
from rlenv.metrics.run import (
    _kl_block,
    component_stats,
    disagreements,
    reward_auc,
    reward_stats,
    sample_efficiency,
    verifier_pass_rates,
)
from rlenv.metrics.similarity import diversity
from rlenv.metrics.stats import noise_floor, pass_k_table, pass_rate
from rlenv.metrics.tally import RunTally
from rlenv.metrics.verdict import judge_run
from rlenv.results import HumanLabels, Status, compact_for_metrics, seal
from tests import hacked_runs
from tests.test_summary_stream import _varied_records


def compute_all_before(
    records: Iterable[Record],
    human: Mapping[tuple[str, int], float] | HumanLabels | None = None,
    *,
    length: LengthUnit = "words",
    alpha: float = 0.05,
    power: float = 0.8,
    decoding: Mapping[str, Any] | None = None,
    baseline: Iterable[Record] | None = None,
) -> dict[str, Any]:
    """rlenv.metrics.compute_all before it streamed (the reference)."""
    records = list(records)
    baseline = list(baseline) if baseline is not None else None
    statuses: dict[str, int] = {}
    for record in records:
        status = str(record.get("status", Status.OK))
        statuses[status] = statuses.get(status, 0) + 1
    table = pass_k_table(records)
    summary: dict[str, Any] = {
        "counts": {
            "records": len(records),
            "inputs": len({_key(r)[0] for r in records}),
            "scored": len(_scored(records)),
            Status.INFRA_ERROR.value: statuses.get(Status.INFRA_ERROR, 0),
            "by_status": {s: statuses[s] for s in sorted(statuses)},
        },
        "pass_rate": {
            **pass_rate(records),
            "noise_floor": noise_floor(records, alpha, power, field="passed"),
        },
        "pass_k": {name: {str(k): v for k, v in t.items()} for name, t in table.items()},
        "reward": {
            **reward_stats(records),
            "noise_floor": noise_floor(records, alpha, power, field="reward"),
        },
        "reward_components": component_stats(records),
        "verifiers": verifier_pass_rates(records),
        "disagreements": disagreements(records, baseline),
        "reward_auc": reward_auc(records),
        "length_bias": length_bias(records, length=length),
        "diversity": diversity(records),
        "sample_efficiency": sample_efficiency(records),
        "kl": _kl_block(records),
        "alignment": alignment_gap(records, human) if human is not None else None,
        "errors": errors(records),
    }
    summary["flags"] = flags(summary, decoding)
    summary["verdict"] = judge_run(records, baseline)
    clean: dict[str, Any] = _jsonable(summary)
    return clean


def _canonical(value: Any) -> bytes:
    return canonical_bytes(json.loads(json.dumps(value, default=list)))


def _without_rewards(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same rollouts from an env with verifiers only (no reward model, parts or KL)."""
    out = []
    for record in records:
        record = {k: v for k, v in record.items() if k not in ("rewards", "kl", "digest")}
        out.append(seal({**record, "reward": None}))
    return out


def _families() -> dict[str, list[dict[str, Any]]]:
    varied = _varied_records()
    hacked = hacked_runs.build_records("hacked", "python:hacked")
    uneven = [r for r in varied if not (r["input_index"] % 3 == 0 and r["rollout"] == 3)]
    return {
        "varied": varied,
        "hacked": hacked,
        "clean": hacked_runs.build_records("clean", "python:clean"),
        "varied, no rewards": _without_rewards(varied),
        "hacked, no rewards": _without_rewards(hacked),
        "some inputs short of K": uneven,
        "one input all infra errors": [
            {**r, "status": "infra_error"} if r["input_index"] == 2 else r for r in varied
        ],
        "nothing": [],
    }


FAMILIES = _families()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_streamed_metrics_are_the_record_lists(name: str) -> None:
    """compute_all (now a tally) gives the reference's bytes; so does a tally folding each
    input as its K rollouts arrive, in a shuffled order, from compact rows."""
    records = FAMILIES[name]
    decoding = {"temperature": 1.0}
    before = _canonical(compute_all_before(records, decoding=decoding))
    assert _canonical(metrics.compute_all(records, decoding=decoding)) == before
    for seed in range(3):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        shared: dict[Any, Any] = {}
        tally = RunTally(hacked_runs.ROLLOUTS)
        for record in shuffled:
            tally.add(compact_for_metrics(record, shared))
        assert _canonical(tally.result(decoding=decoding)) == before, seed


def test_a_folded_input_keeps_no_record_without_a_reward() -> None:
    """Without a reward model nothing is kept per rollout once its input is folded; with one,
    only the rollouts with a reward (what quantiles and suspects read)."""
    records = FAMILIES["hacked, no rewards"]
    tally = RunTally(hacked_runs.ROLLOUTS)
    for record in records:
        tally.add(record)
    assert tally.kept == [] and not tally._open
    rewarded = RunTally(hacked_runs.ROLLOUTS)
    for record in FAMILIES["varied"]:
        rewarded.add(record)
    assert not rewarded._open
    assert 0 < len(rewarded.kept) < len(FAMILIES["varied"])


def test_streamed_metrics_with_a_baseline_and_human_labels() -> None:
    """A verdict against a baseline and the alignment gap read every record: kept whole."""
    records = FAMILIES["hacked"]
    baseline = FAMILIES["clean"]
    human = {(r["input_id"], r["rollout"]): (0.0 if r["passed"] else 1.0) for r in records}
    before = compute_all_before(records, human, baseline=baseline, length="completion_tokens")
    now = metrics.compute_all(records, human, baseline=baseline, length="completion_tokens")
    assert _canonical(now) == _canonical(before)
    assert now["verdict"]["status"] != "inconclusive" or now["verdict"]["evidence"] == []


def test_duplicate_keys_are_tallied_as_the_list_did() -> None:
    """compute_all takes any records: a key twice counts twice, as before."""
    records = FAMILIES["varied"] + FAMILIES["varied"][:5]
    assert _canonical(metrics.compute_all(records)) == _canonical(compute_all_before(records))


# -- summary.json: the same bytes whether streamed, resumed or read back -------------------


def _meta() -> dict[str, Any]:
    return {
        "env": {"name": "capitals"},
        "model": {"uri": "python:x"},
        "decoding": {"temperature": 1.0},
        "rollouts_per_input": hacked_runs.ROLLOUTS,
        "limit": None,
        "inputs": len(hacked_runs.CAPITALS),
        "world": {},
    }


def _prepared() -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        inputs=[
            SimpleNamespace(id=hacked_runs.input_id(i)) for i in range(len(hacked_runs.CAPITALS))
        ]
    )


def _expected_fields(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What summary.json said of these records before it streamed: the diagnostics of the
    whole record list, and the digests of the whole list sorted."""
    from rlenv.results import run_digest, run_outcome_digest

    diagnostics = compute_all_before(
        [compact_for_metrics(r, {}) for r in records], decoding={"temperature": 1.0}
    )
    return {
        "verdict": diagnostics["verdict"],
        "inputs": len({r["input_id"] for r in records}),
        "rollouts": len(records),
        "counts": diagnostics["counts"]["by_status"],
        "pass_rate": diagnostics["pass_rate"],
        "pass_at_k": diagnostics["pass_k"]["pass@k"],
        "pass_hat_k": diagnostics["pass_k"]["pass^k"],
        "verifiers": diagnostics["verifiers"],
        "reward": diagnostics["reward"] if diagnostics["reward"].get("count") else None,
        "diagnostics": {
            key: diagnostics[key]
            for key in (
                "disagreements",
                "reward_auc",
                "length_bias",
                "diversity",
                "sample_efficiency",
                "kl",
            )
        },
        "kl": diagnostics["kl"],
        "errors": diagnostics["errors"],
        "flags": diagnostics["flags"],
        "digest": run_digest(records),
        "outcome_digest": run_outcome_digest(records),
    }


@pytest.mark.parametrize("family", ["varied", "varied, no rewards", "hacked"])
@pytest.mark.parametrize("earlier", [None, 0, 10, 47])
def test_a_streamed_summary_says_what_the_record_list_said(
    family: str, earlier: int | None
) -> None:
    """Read back whole (`earlier` None), or `earlier` lines read back and the rest tallied as
    written in a shuffled order (a --resume; 0: a fresh run finishing out of order): the
    summary's every measure and both digests are those of the whole record list."""
    from rlenv.results import encode_line
    from rlenv.summary import _Totals, build_summary

    records = [seal(dict(record)) for record in FAMILIES[family]]
    meta = _meta()
    written = None
    before = records
    if earlier is not None:
        before, after = records[:earlier], list(records[earlier:])
        random.Random(earlier).shuffle(after)
        written = _Totals.for_run(meta)
        for record in after:
            written.add_line(encode_line(record))
    summary = build_summary(_prepared(), meta, before, "python:x", written=written)
    expected = _expected_fields(records)
    assert _canonical({key: summary[key] for key in expected}) == _canonical(expected)
    if "reward_components" in summary:
        assert family == "varied"


def test_a_written_place_past_32_bits_is_checked_as_any_other() -> None:
    """The place of a line written is kept in 32-bit columns; one that does not fit is kept
    apart and refused by the record checks as before (here: outside the run's rollouts)."""
    from rlenv.audit_records import TamperedRun
    from rlenv.results import encode_line
    from rlenv.summary import _Totals, build_summary

    records = [seal(dict(record)) for record in FAMILIES["hacked"]]
    meta = _meta()
    written = _Totals.for_run(meta)
    for record in records[1:]:
        written.add_line(encode_line(record))
    written.add_line(encode_line(seal({**records[0], "rollout": 2**40})))
    with pytest.raises(TamperedRun, match=rf":{len(records)}: rollout {2**40} of "):
        build_summary(_prepared(), meta, [], "python:x", written=written)


def _plain_record(index: int) -> dict[str, Any]:
    """A rollout as a plain run writes it: one answer, one verifier, no reward."""
    return {
        "input_id": f"i{index:07d}",
        "input_index": index,
        "rollout": 0,
        "status": "ok",
        "answer": f"k{index:07d}",
        "passed": index % 3 == 0,
        "verifiers": [{"name": "exact", "passed": index % 3 == 0}],
        "digest": f"{index:064x}",
        "outcome_digest": f"{index + 1:064x}",
    }


def test_a_folded_input_with_one_rollout_keeps_a_few_numbers() -> None:
    """What a run with one rollout per input keeps per input once folded (issue 30: the
    orchestrator at 10k inputs): counts for pass@k, a diversity row of four numbers, its id,
    not its answer nor a row dict. Measured with tracemalloc (sizes are deterministic)."""
    import tracemalloc

    count = 4000
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        shared: dict[Any, Any] = {}
        tally = RunTally(1)
        before = tracemalloc.get_traced_memory()[0]
        for index in range(count):
            tally.add(compact_for_metrics(_plain_record(index), shared))
        per_input = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        if not tracing:
            tracemalloc.stop()
    assert tally.records == count and not tally._open
    assert per_input < 800, f"{per_input:.0f} bytes kept per folded input"  # 971 with row dicts
    result = tally.result()
    assert len(result["diversity"]["per_input"]) == count
