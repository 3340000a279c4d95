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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "HumanLabels": ("rlenv.results", "HumanLabels"),
    "proxy_reward": ("rlenv.metrics._records", "_reward"),
    "alignment_gap": ("rlenv.metrics.alignment", "alignment_gap"),
    "apply_calibration": ("rlenv.metrics.calibration", "apply_calibration"),
    "calibrated_reward": ("rlenv.metrics.calibration", "calibrated_reward"),
    "compare_runs": ("rlenv.metrics.compare", "compare_runs"),
    "compute_all": ("rlenv.metrics.diagnostics", "compute_all"),
    "flags": ("rlenv.metrics.flagging", "flags"),
    "is_greedy": ("rlenv.metrics.flagging", "is_greedy"),
    "length_bias": ("rlenv.metrics.length", "length_bias"),
    "length_explained_gain": ("rlenv.metrics.length", "length_explained_gain"),
    **{
        name: ("rlenv.metrics.run", name)
        for name in (
            "disagreements",
            "group_stats",
            "reward_stats",
            "sample_efficiency",
            "verifier_pass_rates",
        )
    },
    "diversity": ("rlenv.metrics.similarity", "diversity"),
    **{
        name: ("rlenv.metrics.stats", name)
        for name in (
            "bootstrap_ci",
            "noise_floor",
            "pass_at_k",
            "pass_hat_k",
            "pass_k_table",
            "pass_rate",
            "pearson",
            "rankdata",
            "spearman",
            "wilson_interval",
        )
    },
}
"""Where each public name lives: imported when first read (PEP 562), so a run that folds its
records (rlenv.metrics.tally) does not import numpy before its summary."""


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _WHERE[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


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
