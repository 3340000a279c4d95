"""Reward-hacking diagnostics: pure functions over result records, no I/O.

Every function takes result records (the dicts written to ``results.jsonl``, see
:class:`rlenv.results.RolloutRecord`) and returns plain Python values. Groupings are sorted by
(input_id, rollout), so no output depends on the order of the records or on set iteration.
Records with status ``infra_error`` are infrastructure failures, not model outcomes, and are
left out of every score (they are only counted). Undefined quantities (a correlation with zero
variance, a rate over nothing) are ``None``, never NaN, so :func:`compute_all` and
:func:`compare_runs` return JSON-serialisable dicts as they are.

Percentiles use numpy's default linear interpolation. Text lengths and n-grams use whitespace
tokens of ``answer`` (case-sensitive).

Modules: ``stats`` (intervals, correlations, pass@k, noise floor), ``run`` (one run's
measures), ``diagnostics`` (:func:`compute_all`), ``length``, ``similarity`` (diversity and
collapse), ``alignment`` (human labels), ``flagging`` (warnings and the greedy-decoding rule) and
``compare`` (checkpoints side by side). Human labels are read by :func:`rlenv.jsonl.load_human`.
"""

from rlenv.metrics._records import _reward as proxy_reward
from rlenv.metrics.alignment import alignment_gap
from rlenv.metrics.calibration import apply_calibration, calibrated_reward
from rlenv.metrics.compare import compare_runs
from rlenv.metrics.diagnostics import compute_all
from rlenv.metrics.flagging import flags, is_greedy
from rlenv.metrics.length import length_bias, length_explained_gain
from rlenv.metrics.run import (
    disagreements,
    group_stats,
    reward_stats,
    sample_efficiency,
    verifier_pass_rates,
)
from rlenv.metrics.similarity import diversity
from rlenv.metrics.stats import (
    bootstrap_ci,
    noise_floor,
    pass_at_k,
    pass_hat_k,
    pass_k_table,
    pass_rate,
    pearson,
    rankdata,
    spearman,
    wilson_interval,
)
from rlenv.results import HumanLabels

__all__ = [
    "HumanLabels",
    "proxy_reward",
    "alignment_gap",
    "apply_calibration",
    "calibrated_reward",
    "bootstrap_ci",
    "compare_runs",
    "compute_all",
    "disagreements",
    "diversity",
    "flags",
    "is_greedy",
    "length_bias",
    "length_explained_gain",
    "noise_floor",
    "pass_at_k",
    "pass_hat_k",
    "pass_k_table",
    "group_stats",
    "pass_rate",
    "pearson",
    "rankdata",
    "reward_stats",
    "sample_efficiency",
    "spearman",
    "verifier_pass_rates",
    "wilson_interval",
]
