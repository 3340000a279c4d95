"""summary.json: what a run's records add up to (counts, pass rates, rewards, flags, the digest
and the outcome digest), tallied one record at a time as the runner writes them (`_Totals`) and
built by `build_summary`, which `rlenv grade` and the benchmarks call too, and with which every
reader of a run recomputes it to compare (rlenv.audit_reader.read_audited_run): so this module
imports nothing that runs rollouts (no env, runner, worker, world, sandbox or provider).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.audit_records import RecordAudit, TamperedRun
from rlenv.results import (
    OrderedDigests,
    RolloutRecord,
    WrittenLine,
    compact_for_metrics,
    decode_line,
    input_order,
    iter_results,
)
from rlenv.version import __version__


def _hazards(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Decoding settings that make sampled KL estimates biased or exploitable."""
    from rlenv.policy_shift.hazards import decoding_hazards

    return decoding_hazards(meta["decoding"])


class _Totals:
    """What a summary needs of each record, gathered one record at a time: as this process
    writes it to results.jsonl (:meth:`add_line`: the fields it reads parsed from the line's
    own bytes, so what is tallied is what is on disk), and as the summary reads the records
    that were there before (:meth:`add`). Counts are summed on the way, the metrics folded an
    input at a time (:class:`rlenv.metrics.tally.RunTally`) and the digests hashed in order as
    inputs complete (:class:`rlenv.results.OrderedDigests`); of each line written, its place
    in the run (three integers) is kept for the record checks at the end."""

    def __init__(
        self,
        rollouts_per_input: int | None = None,
        inputs: Iterable[int] | None = None,
        *,
        keep_all: bool = False,
    ) -> None:
        from rlenv.metrics.tally import RunTally

        self.fixtures: dict[str, int] = {}
        self.usage: dict[str, int] = {}
        self.cache: dict[str, int] = {"hits": 0, "misses": 0}
        self.pending = 0
        self.shared: dict[Any, Any] = {}
        self.tally = RunTally(rollouts_per_input, keep_all=keep_all)
        self.digests = OrderedDigests(rollouts_per_input, inputs)
        self.written = 0
        """Lines this process wrote (each a rollout record but those in `refused`)."""
        self.refused: dict[int, str] = {}
        """Position among the lines written -> why it is no rollout record (said in line order)."""
        self._ids: dict[str, int] = {}
        self._places = (array("i"), array("i"), array("i"))  # id ordinal, rollout, input index
        self._odd: dict[int, tuple[str, int, int]] = {}  # a place past 32 bits, by row

    @classmethod
    def for_run(cls, meta: Mapping[str, Any]) -> _Totals:
        """The totals of a run described by run.json's `meta` (rollouts per input, its inputs;
        every record kept when its summary judges against a baseline or splits into groups)."""
        indices = meta.get("input_indices")
        inputs = indices if isinstance(indices, list) else range(int(meta.get("inputs") or 0))
        return cls(
            meta.get("rollouts_per_input"),
            inputs if indices or meta.get("inputs") else None,
            keep_all=_keeps_all(meta),
        )

    def add(self, record: RolloutRecord, outcome: str | None = None) -> None:
        """One record (only its :data:`rlenv.results.TALLIED_FIELDS` are read), with its
        outcome digest when that is known already."""
        for call in record.get("tool_calls") or []:
            self.fixtures[call["fixture"]] = self.fixtures.get(call["fixture"], 0) + 1
        for key, value in (record.get("usage") or {}).items():
            if isinstance(value, int):
                self.usage[key] = self.usage.get(key, 0) + value
        for key, value in ((record.get("timing") or {}).get("grader_cache") or {}).items():
            self.cache[key] = self.cache.get(key, 0) + int(value)
        self.pending += record.get("grading") == "pending"
        row = compact_for_metrics(record, self.shared, outcome)
        self.tally.add(row)
        self.digests.add(row.input_index, row.rollout, row.digest, row.outcome)

    def add_line(self, line: bytes | WrittenLine) -> None:
        """A line this process just appended to results.jsonl. Its digest was made as the line
        was written (`rlenv.results.encode_record`) and is not recomputed here: later readers
        recompute it from the file. What the summary checks of every record is checked too, at
        its end (:meth:`admit_written`): a rollout record, with a digest, in its place in the
        run.
        Given as :func:`rlenv.results.encode_record` made it, only the fields the summary
        reads are parsed (their bytes as in the line), and its outcome digest is taken as
        computed from the same serialisation."""
        outcome = None
        if isinstance(line, WrittenLine):
            line, outcome = (line.tallied, line.outcome) if line.outcome else (line.line, None)
        record = decode_line(line)
        position, self.written = self.written, self.written + 1
        try:
            input_id = str(record["input_id"])
            rollout, index = int(record["rollout"]), int(record.get("input_index", 0))
        except (KeyError, TypeError, ValueError, AttributeError):
            self.refused[position] = "not a rollout record"
            return
        if not record.get("digest"):
            self.refused[position] = "record has no digest"
            return
        ordinal = self._ids.setdefault(input_id, len(self._ids))
        row = len(self._places[0])
        try:
            for column, value in zip(self._places, (ordinal, rollout, index), strict=True):
                column.append(value)
        except OverflowError:
            for column in self._places:
                del column[row:]
                column.append(0)
            self._odd[row] = (input_id, rollout, index)
        self.add(record, outcome)

    def admit_written(self, audit: RecordAudit, first_line: int) -> None:
        """The lines this process wrote, checked in their place after the earlier ones (lines
        `first_line`...), as the summary checks every record of results.jsonl."""
        ids = list(self._ids)
        ordinals, rollouts, indices = self._places
        rows = iter(range(len(ordinals)))
        for position in range(self.written):
            number = first_line + position
            if position in self.refused:
                raise TamperedRun(self.refused[position], where=f"{audit.where}:{number}")
            row = next(rows)
            place = self._odd.get(row) or (ids[ordinals[row]], rollouts[row], indices[row])
            audit.admit_key(number, *place)


def _keeps_all(meta: Mapping[str, Any]) -> bool:
    """A summary that reads every record whole: a verdict against a baseline, or groups."""
    return bool(meta.get("baseline") or meta.get("group_by"))


def judges_block(meta: Mapping[str, Any], run_dir: str | Path) -> dict[str, Any] | None:
    """summary.json's ``judges``: each judge's mode (from run.json) and how many of the run's
    judgments were made live (the exchanges kept in ``run_dir/judge-<name>.jsonl``), so a
    reader recomputes it from the run directory as `run` wrote it."""
    judges = meta.get("judges")
    if not isinstance(judges, Mapping) or not judges:
        return None
    out: dict[str, Any] = {}
    for label, described in judges.items():
        if not isinstance(described, Mapping) or Path(str(label)).name != label:
            raise TamperedRun(f"judges: {label!r} is not a judge run.json describes")
        log = Path(run_dir) / f"judge-{label}.jsonl"
        live = sum(1 for line in log.read_text().splitlines() if line) if log.is_file() else 0
        out[label] = {"mode": described.get("mode"), "live_judgments": live}
    return out


@dataclass(frozen=True)
class SummaryInputs:
    """What a summary reads of a run's inputs: how many it has (past --limit, the first
    `limit`), and, when it groups by a field, each input's value of it."""

    count: int
    labels: dict[Any, Any] | None = None

    @classmethod
    def of(cls, prepared: Any, meta: Mapping[str, Any]) -> SummaryInputs:
        """Of an :class:`rlenv.env.Environment` (its ``inputs``) and the run's run.json meta."""
        inputs = prepared.inputs[: meta["limit"]] if meta.get("limit") else prepared.inputs
        group_by = meta.get("group_by")
        labels = None
        if group_by:
            labels = {record.id: record.data.get(group_by) for record in prepared.inputs}
        return cls(len(inputs), labels)


@dataclass(frozen=True)
class SummaryPlan:
    """A run's summary.json as `run` builds it once every record is written: all but the
    records, in plain data, so the process that wrote and tallied them can build it
    (rlenv.results_aside) as well as the run's own."""

    inputs: SummaryInputs
    meta: dict[str, Any]
    results: Path
    earlier: int
    """Bytes of results.jsonl there before this run (--resume): read again, digests and all."""
    model_uri: str
    baseline: Sequence[Mapping[str, Any]] | None = None

    def totals(self) -> _Totals:
        """The totals the lines this run appends are tallied into as they are written."""
        return _Totals.for_run(self.meta)

    def build(self, written: _Totals) -> dict[str, Any]:
        """The summary: the earlier lines read again, then the written ones (`written`)."""
        return build_summary(
            self.inputs,
            self.meta,
            iter_results(self.results, end=self.earlier),
            self.model_uri,
            str(self.results),
            baseline=self.baseline,
            written=written,
        )


def build_summary(
    prepared: Any,
    meta: dict[str, Any],
    records: Iterable[RolloutRecord],
    model_uri: str,
    where: str = "results.jsonl",
    baseline: Sequence[Mapping[str, Any]] | None = None,
    written: _Totals | None = None,
) -> dict[str, Any]:
    """summary.json: env, model, decoding, counts, pass rates, pass@k/pass^k, reward, digest.

    `records` is consumed once (a generator over results.jsonl is fine): totals are summed on
    the way and each input folded once its rollouts are in (:class:`_Totals`), so a
    100k-rollout run is summarised in the memory of a 1k one. Each record's digest is
    recomputed from its content on the way, and a duplicate or missing (input, rollout) is
    refused: TamperedRun naming
    ``where:LINE`` (line = position in `records`, as in results.jsonl).

    `written` holds what `run` tallied of the lines it appended itself (after `records`, the
    lines that were there before: none, or an earlier run's on --resume); their digests were
    sealed by the workers, and they are checked in their place after `records`.
    """
    from rlenv import metrics

    seen = prepared if isinstance(prepared, SummaryInputs) else SummaryInputs.of(prepared, meta)
    expected_inputs = meta.get("input_indices") or seen.count
    audit = RecordAudit(
        where, rollouts_per_input=meta["rollouts_per_input"], inputs=expected_inputs
    )
    indices = range(expected_inputs) if isinstance(expected_inputs, int) else list(expected_inputs)
    totals = written
    if totals is None:
        keep_all = baseline is not None or bool(meta.get("group_by"))
        totals = _Totals(meta["rollouts_per_input"], indices, keep_all=keep_all)
    elif (order := totals.digests.order) and (
        len(order) != len(wanted := input_order(indices))
        or any(a != b for a, b in zip(order, wanted, strict=True))
    ):
        raise RuntimeError("the totals were made for other inputs than the summary's")
    tally = totals.tally
    if (baseline is not None or meta.get("group_by")) and not tally.keep_all:
        raise RuntimeError("a summary with a baseline or groups needs every record kept")
    line = 0
    for line, record in enumerate(records, start=1):
        audit.admit(line, record)
        totals.add(record)
    totals.admit_written(audit, first_line=line + 1)
    audit.finish()
    if totals.digests.late:  # pragma: no cover - the record checks refuse it first
        raise RuntimeError("a record came for an input already hashed")
    digest, outcome_digest = totals.digests.hexdigests()
    diagnostics = tally.result(
        decoding=meta["decoding"], baseline=list(baseline) if baseline is not None else None
    )
    group_by = meta.get("group_by")
    groups = None
    if group_by:
        groups = {"field": group_by, **metrics.group_stats(tally.kept, seen.labels or {})}
    n_records = tally.records
    n_inputs = len(tally.input_ids)
    calibration = meta.get("reward_calibration")
    kept, tally.kept = tally.kept, []
    return {
        "verdict": diagnostics["verdict"],
        "env": meta["env"],
        "model": meta["model"],
        "decoding": meta["decoding"],
        "rollouts_per_input": meta["rollouts_per_input"],
        "inputs": n_inputs,
        "rollouts": n_records,
        # a served session (`rlenv serve`) has no fixed number of rollouts per input
        "expected_rollouts": None
        if meta["rollouts_per_input"] is None
        else (expected_inputs if isinstance(expected_inputs, int) else len(expected_inputs))
        * meta["rollouts_per_input"],
        "counts": diagnostics["counts"]["by_status"],
        "pass_rate": diagnostics["pass_rate"],
        "pass_at_k": diagnostics["pass_k"]["pass@k"],
        "pass_hat_k": diagnostics["pass_k"]["pass^k"],
        "verifiers": diagnostics["verifiers"],
        "reward": diagnostics["reward"] if diagnostics["reward"].get("count") else None,
        **(
            {"reward_components": diagnostics["reward_components"]}
            if diagnostics.get("reward_components")
            else {}
        ),
        "fixtures": dict(sorted(totals.fixtures.items())),
        "usage": dict(sorted(totals.usage.items())),
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
        **({"groups": groups} if groups is not None else {}),
        **(
            {"reward_calibrated": metrics.calibrated_reward(kept, calibration)}
            if calibration is not None
            else {}
        ),
        "hazards": _hazards(meta) if meta.get("reference") else [],
        "world": meta.get("world") or {},  # run.json has held it since rlenv 0.2
        "grading": {"pending_rollouts": totals.pending, "grader_cache": totals.cache},
        "errors": diagnostics["errors"],
        "flags": diagnostics["flags"],
        "digest": digest,
        "outcome_digest": outcome_digest,
        "rlenv_version": __version__,
    }
