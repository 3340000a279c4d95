"""One run's every diagnostic as one dict (summary.json, report): :func:`compute_all`.

Apart from :mod:`rlenv.metrics.run` (the per-run measures) because it also judges the run
(:mod:`rlenv.metrics.verdict`), which reads run's suspects: one direction, no circle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
from rlenv.metrics.verdict import judge_run
from rlenv.results import HumanLabels, Status


def compute_all(
    records: Iterable[Record],
    human: Mapping[tuple[str, int], float] | HumanLabels | None = None,
    *,
    length: LengthUnit = "words",
    alpha: float = 0.05,
    power: float = 0.8,
    decoding: Mapping[str, Any] | None = None,
    baseline: Iterable[Record] | None = None,
) -> dict[str, Any]:
    """Every diagnostic for one run, as one JSON-serialisable dict (summary.json, report).

    ``baseline``: a reference run's records (same env, e.g. the SFT checkpoint); failing
    rollouts scored above its passing answers are suspects too (:func:`disagreements`).

    ``verdict`` (:func:`rlenv.metrics.verdict.judge_run`): against ``baseline`` when given,
    else inconclusive (a run alone is never judged in the absolute).

    ``flags`` is the run's one list of flags (:func:`rlenv.metrics.flagging.flags`), given the
    run's ``decoding`` (temperature 0: no collapse flag); every output reads it from here.

    Dict keys are strings (pass@k tables are keyed "1", "2", ...); undefined values are None.
    """
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
