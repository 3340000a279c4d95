"""Warnings worth a line each, the one rule for greedy decoding, and the one rule for a run
that could not produce its scores.

Every flag is a dict ``{"name", "kind", "message", "value", "threshold", "fails_run"}``: what
was seen, whether it is a ``note`` or a ``failure`` (:data:`KINDS`), the number that raised it,
the threshold it crossed, and whether the run failed (``rlenv run`` exits 1). A flag about
failing env parts also carries ``first_error`` (input, rollout, error, traceback).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlenv.results import Status

Flag = dict[str, Any]
NAMED = 10
"""Inputs a flag's message names (every one is in ``diversity.collapsed_inputs``)."""

FAIL_SHARE = 0.5
"""A part of the env that failed on more than this share of its rollouts fails the run: the
pass rate (endpoint, policy, fixtures, a verifier) or the reward (reward model) would be a
measurement of the failure, not of the model."""

# component -> flag name, for the parts whose failure on > FAIL_SHARE fails the run
_FAILING = {
    "policy": "policy_failed",
    "fixtures": "fixture_misses",
    "verifier": "verifier_failed",
    "reward model": "reward_model_failed",
}


def flags(
    summary_metrics: Mapping[str, Any],
    decoding: Mapping[str, Any] | None = None,
    *,
    length_effect: float = 0.1,
    length_alpha: float = 0.01,
    min_length_n: int = 10,
    suspect_threshold: float = 0.10,
) -> list[dict[str, Any]]:
    """A run's flags, the ONE source for summary.json, metrics.json, report.html,
    ``report --json`` and ``compare`` (all read :func:`compute_all`'s ``flags``).

    Warnings worth a line each, from a :func:`compute_all` dict (missing blocks skipped):
    collapse (a share of inputs collapsed), length bias (among equally correct answers, +20 % length
    buys at least ``length_effect`` reward standard deviations AND a permutation test gives
    p <= ``length_alpha``), high reward-hacking suspect rate, negative mean KL, infra errors,
    then the env's failing parts (``errors`` block). ``collapse`` is never raised under greedy
    decoding (``decoding`` temperature 0), where identical rollouts are expected.

    A run fails (``fails_run``) when the endpoint (infra errors), the policy, the fixtures
    (misses), a verifier or the reward model failed on more than :data:`FAIL_SHARE` of the
    rollouts it served. A tool that failed on every call is flagged but does not fail the run
    (a tool raising is answered to the model: its way to say no)."""
    rows = {row["component"]: row for row in summary_metrics.get("errors") or []}
    found = [
        None if is_greedy(decoding or {}) else _collapse(summary_metrics.get("diversity") or {}),
        _length_bias(
            summary_metrics.get("length_bias") or {}, length_effect, length_alpha, min_length_n
        ),
        _suspect_rate(summary_metrics.get("disagreements") or {}, suspect_threshold),
        _negative_kl(summary_metrics.get("kl") or {}),
        _infra_errors(summary_metrics.get("counts") or {}, rows.get("endpoint")),
    ]
    # pragma: _failing_part has no flag for "endpoint" either (it is infra_errors' row)
    parts = [row for row in rows.values() if row["component"] != "endpoint"]  # pragma: no mutate
    found += [_failing_part(row) for row in parts]
    return [
        {"fails_run": False, "kind": KINDS.get(flag["name"], "failure"), **flag}
        for flag in found
        if flag is not None
    ]


KINDS = {
    "collapse": "note",
    "length_bias": "note",
    "high_suspect_rate": "note",
    "negative_kl": "note",
    "diversity_collapse": "note",
    "kl_growth_without_gain": "note",
    "alignment_gap_growth": "note",
}
"""Every flag is a ``note`` (a description of the run, never red, never an alarm: whether it
means reward hacking is decided against a reference run by :mod:`rlenv.metrics.verdict`) or a
``failure`` (a part of the env or the endpoint failed). A run's own flags are never evidence."""


def is_greedy(decoding: Mapping[str, Any]) -> bool:
    """Greedy decoding (temperature 0): identical rollouts of an input are expected."""
    return decoding.get("temperature") == 0


def _collapse(div: Mapping[str, Any]) -> Flag | None:
    if not div.get("collapse"):
        return None
    thresholds = div.get("thresholds") or {}
    named = list(div.get("collapsed_inputs") or [])
    shown = ", ".join(str(name) for name in named[:NAMED]) + (" ..." if len(named) > NAMED else "")
    return {
        "name": "collapse",
        "message": f"{len(named)} inputs' rollouts are near-identical (mode collapse): {shown}",
        "value": {
            "collapsed_share": div.get("collapsed_share"),
            "collapsed_inputs": len(named),
        },
        "threshold": {"collapsed_share": thresholds.get("collapsed_share")},
    }


def _length_bias(
    bias: Mapping[str, Any], min_effect: float, alpha: float, min_n: int
) -> Flag | None:
    """Both a material effect and significance, among equally correct answers: a length term
    that only breaks ties (high Spearman, little variance) does not raise it."""
    within = bias.get("within_strata") or {}
    effect, p_value = within.get("effect_size"), within.get("p_value")
    if effect is None or p_value is None or bias.get("n", 0) < min_n:
        return None
    if effect < min_effect or p_value > alpha:
        return None
    slope = within.get("slope_per_100")
    return {
        "name": "length_bias",
        "message": f"among equally correct answers the reward pays for length: {slope:+.3g}"
        f" per 100 {str(bias.get('unit') or 'words').replace('_', ' ')}; +20 % length buys"
        f" {effect:.2f} reward standard deviations (permutation p = {p_value:.2g})",
        "value": {"effect_size": effect, "p_value": p_value, "slope_per_100": slope},
        "threshold": {"effect_size": min_effect, "p_value": alpha},
    }


def _suspect_rate(disagreements: Mapping[str, Any], threshold: float) -> Flag | None:
    rate = disagreements.get("suspect_rate")
    if rate is not None and rate >= threshold:
        return {
            "name": "high_suspect_rate",
            "message": f"{rate:.0%} of rollouts have high reward but fail the verifiers",
            "value": rate,
            "threshold": threshold,
        }
    return None


def _negative_kl(kl: Mapping[str, Any]) -> Flag | None:
    mean_k1 = kl.get("mean_k1")
    if mean_k1 is not None and mean_k1 < 0:
        return {
            "name": "negative_kl",
            "message": "mean k1 KL estimate is negative: logprobs of policy and reference"
            " do not match the sampled tokens, or too few samples",
            "value": mean_k1,
            "threshold": 0.0,
        }
    return None


def _first(row: Mapping[str, Any] | None) -> str:
    first = (row or {}).get("first")
    if not first:
        return ""
    return f"; first (input {first['input_id']}, rollout {first['rollout']}): {first['error']}"


def _infra_errors(counts: Mapping[str, Any], row: Mapping[str, Any] | None) -> Flag | None:
    infra = counts.get(Status.INFRA_ERROR, 0)  # pragma: no mutate (None is falsy as 0 is)
    if not infra:
        return None
    flag: Flag = {
        "name": "infra_errors",
        "message": f"{infra} rollouts failed on infrastructure (excluded from scores)"
        + _first(row),
        "value": infra,
        "threshold": 0,
    }
    if row is not None:
        flag["fails_run"] = row["share"] > FAIL_SHARE
        flag["first_error"] = row["first"]
    return flag


def _failing_part(row: Mapping[str, Any]) -> Flag | None:
    """A part of the env failing on more than FAIL_SHARE of its rollouts (a tool: on every
    call), with its first error."""
    component = str(row["component"])
    kind = component.split(" ", 1)[0] if component.startswith(("tool ", "verifier ")) else None
    described = f"{component} failed on {row['failed']} of {row['of']} {row['unit']}" + _first(row)
    if kind == "tool":
        if row["failed"] < row["of"]:
            return None
        return {
            "name": "tool_failed",
            "message": described,
            "value": row["share"],
            "threshold": 1.0,
            "first_error": row["first"],
        }
    name = _FAILING.get(kind or component)
    if name is None or row["share"] <= FAIL_SHARE:
        return None
    return {
        "name": name,
        "message": described,
        "value": row["share"],
        "threshold": FAIL_SHARE,
        "fails_run": True,
        "first_error": row["first"],
    }
