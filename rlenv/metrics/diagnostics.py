"""One run's every diagnostic as one dict (summary.json, report): :func:`compute_all`.

Folded record by record by :class:`rlenv.metrics.tally.RunTally` (which summary.json streams
into as a run writes its records); the reference it must match, byte for byte, is the
record-list form kept in tests/test_metrics_stream.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rlenv.metrics._records import Record
from rlenv.metrics.length import LengthUnit
from rlenv.metrics.tally import tally_all
from rlenv.results import HumanLabels


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
    baseline = list(baseline) if baseline is not None else None
    tally = tally_all(records, keep_all=baseline is not None or human is not None)
    return tally.result(
        human, length=length, alpha=alpha, power=power, decoding=decoding, baseline=baseline
    )
