"""Every diagnostic of one run, folded as its records come (:class:`RunTally`): what
:func:`rlenv.metrics.diagnostics.compute_all` returns, in memory that does not grow with the
rollouts per input.

Counts, verifier tallies and failed parts are summed record by record; an input's records are
held only until its K rollouts are in (``rollouts_per_input``), then folded into a few numbers
(scored and passed rollouts, where the first pass came, its diversity row). Only the rollouts
the reward-model measures read one by one are kept whole: those with a reward, reward parts
or a KL estimate (quantiles, suspects and the AUC need each value), or every rollout when a
measure reads them all (a baseline verdict, human labels, groups).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlenv.metrics._records import Record, _key, _mean, _passed, _reward
from rlenv.metrics.errors import ErrorTally
from rlenv.metrics.similarity import DiversityTally
from rlenv.results import HumanLabels, Status

if TYPE_CHECKING:
    from rlenv.metrics.length import LengthUnit

# the measures computed at the end import numpy: `result` imports them, so a run folds its
# records without numpy (and its BLAS threads) loaded


class RunTally:
    """:func:`compute_all`, one record at a time (:meth:`add`), then :meth:`result`.

    With ``rollouts_per_input`` K, an input is folded once K of its records are in; without
    it (or for an input that never gets K), at :meth:`result`. ``keep_all`` keeps every
    record (:attr:`kept`) for the measures that read them all."""

    def __init__(self, rollouts_per_input: int | None = None, *, keep_all: bool = False) -> None:
        self.per_input = rollouts_per_input if rollouts_per_input else None
        self.keep_all = keep_all
        self.kept: list[Record] = []
        """Every record with keep_all; else the scored ones with a reward, parts or KL."""
        self.records = 0
        self.scored = 0
        self.statuses: dict[str, int] = {}
        self.input_ids: set[str] = set()
        self.verifiers: dict[str, list[int]] = {}
        self.errors = ErrorTally()
        self.diversity = DiversityTally()
        self._open: dict[str, list[Record]] = {}
        # per folded input with a scored rollout: (scored, passed, first pass position,
        # best reward among the first k rollouts for each k; None without rewards)
        self._inputs: dict[str, tuple[int, int, int | None, list[float | None] | None]] = {}

    def add(self, record: Record) -> None:
        self.records += 1
        status = str(record.get("status", Status.OK))
        self.statuses[status] = self.statuses.get(status, 0) + 1
        input_id = _key(record)[0]
        self.input_ids.add(input_id)
        if record.get("status") != Status.INFRA_ERROR:
            self.scored += 1
            for verifier in record.get("verifiers") or []:
                if verifier.get("passed") is None:  # not graded (sampled out or deferred)
                    continue
                tally = self.verifiers.setdefault(str(verifier.get("name")), [0, 0])
                tally[0] += verifier.get("passed") is True
                tally[1] += 1
        self.errors.add(record)
        group = self._open.setdefault(input_id, [])
        group.append(record)
        if self.per_input is not None and len(group) >= self.per_input:
            self._fold(input_id)

    def _fold(self, input_id: str) -> None:
        records = self._open.pop(input_id)
        if self.keep_all:
            self.kept += records
        group = sorted(
            (r for r in records if r.get("status") != Status.INFRA_ERROR), key=lambda r: _key(r)
        )
        if not group:
            return
        rewards = [_reward(r) for r in group]
        if not self.keep_all:
            self.kept += [
                r
                for r, reward in zip(group, rewards, strict=True)
                if reward is not None
                or isinstance(r.get("rewards"), Mapping)
                or isinstance(r.get("kl"), Mapping)
            ]
        passed = [_passed(r) for r in group]
        first_pass = passed.index(True) if True in passed else None
        best: list[float | None] | None = None
        if any(value is not None for value in rewards):
            best, top = [], None
            for value in rewards:
                if value is not None and (top is None or value > top):
                    top = value
                best.append(top)
        self._inputs[input_id] = (len(group), sum(passed), first_pass, best)
        self.diversity.fold(input_id, group, rewards)

    def result(
        self,
        human: Mapping[tuple[str, int], float] | HumanLabels | None = None,
        *,
        length: LengthUnit = "words",
        alpha: float = 0.05,
        power: float = 0.8,
        decoding: Mapping[str, Any] | None = None,
        baseline: Sequence[Record] | None = None,
    ) -> dict[str, Any]:
        """What :func:`compute_all` returns for the records added (every open input folded)."""
        from rlenv.metrics._records import _jsonable
        from rlenv.metrics.alignment import alignment_gap
        from rlenv.metrics.flagging import flags
        from rlenv.metrics.length import length_bias
        from rlenv.metrics.run import (
            _kl_block,
            component_stats,
            disagreements,
            reward_auc,
            reward_stats,
        )
        from rlenv.metrics.stats import (
            noise_floor,
            noise_floor_of_means,
            pass_k_of_counts,
            pass_rate_of_counts,
        )
        from rlenv.metrics.verdict import judge_run

        for input_id in list(self._open):
            self._fold(input_id)
        ids = sorted(self._inputs)
        counts = [(self._inputs[i][0], self._inputs[i][1]) for i in ids]
        kept = self.kept
        rewards = reward_stats(kept)
        rewards["count_missing"] = self.scored - rewards["count"]
        statuses = self.statuses
        summary: dict[str, Any] = {
            "counts": {
                "records": self.records,
                "inputs": len(self.input_ids),
                "scored": self.scored,
                Status.INFRA_ERROR.value: statuses.get(Status.INFRA_ERROR, 0),
                "by_status": {s: statuses[s] for s in sorted(statuses)},
            },
            "pass_rate": {
                **pass_rate_of_counts(counts),
                "noise_floor": noise_floor_of_means([c / n for n, c in counts], alpha, power),
            },
            "pass_k": {
                name: {str(k): v for k, v in t.items()}
                for name, t in pass_k_of_counts(counts).items()
            },
            "reward": {
                **rewards,
                "noise_floor": noise_floor(kept, alpha, power, field="reward"),
            },
            "reward_components": component_stats(kept),
            "verifiers": self._verifier_rates(),
            "disagreements": disagreements(kept, baseline),
            "reward_auc": reward_auc(kept),
            "length_bias": length_bias(kept, length=length),
            "diversity": self.diversity.result(),
            "sample_efficiency": self._sample_efficiency(ids),
            "kl": _kl_block(kept),
            "alignment": alignment_gap(kept, human) if human is not None else None,
            "errors": self.errors.rows(),
        }
        summary["flags"] = flags(summary, decoding)
        summary["verdict"] = judge_run(kept, baseline)
        clean: dict[str, Any] = _jsonable(summary)
        return clean

    def _verifier_rates(self) -> dict[str, dict[str, Any]]:
        from rlenv.metrics.stats import pass_rate_rows

        return pass_rate_rows({name: list(tally) for name, tally in self.verifiers.items()})

    def _sample_efficiency(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """:func:`rlenv.metrics.run.sample_efficiency` from what each input kept."""
        if not ids:
            return []
        inputs = [self._inputs[i] for i in ids]
        rows = []
        for k in range(1, min(n for n, _, _, _ in inputs) + 1):
            any_pass = [
                1.0 if first is not None and first < k else 0.0 for _, _, first, _ in inputs
            ]
            best = [b[k - 1] for _, _, _, b in inputs if b is not None and b[k - 1] is not None]
            rows.append({"k": k, "pass_any": _mean(any_pass), "best_reward": _mean(best)})  # type: ignore[arg-type]
        return rows


def tally_all(records: Iterable[Record], *, keep_all: bool) -> RunTally:
    """A :class:`RunTally` of `records` (no K: every input folded at the end)."""
    tally = RunTally(keep_all=keep_all)
    for record in records:
        tally.add(record)
    return tally
