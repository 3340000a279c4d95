"""rlenv.metrics.flagging, flag by flag, at its boundaries (issue 27: a mutant moving
`high_suspect_rate`'s boundary survived the suite). Whole flags are compared, message included:
a flag is what a user reads."""

from __future__ import annotations

from typing import Any

import pytest

from rlenv.metrics.flagging import FAIL_SHARE, KINDS, NAMED, flags, is_greedy

FIRST = {"input_id": "q1", "rollout": 0, "error": "boom"}


def names(found: list[dict[str, Any]]) -> list[str]:
    return [flag["name"] for flag in found]


def test_nothing_to_flag() -> None:
    assert flags({}) == []
    assert flags({}, None) == []
    assert (FAIL_SHARE, NAMED) == (0.5, 10)


@pytest.mark.parametrize(
    ("rate", "threshold", "raised"),
    [(0.10, 0.10, True), (0.0999, 0.10, False), (0.11, 0.10, True), (0.3, 0.31, False)],
)
def test_high_suspect_rate_boundary(rate: float, threshold: float, raised: bool) -> None:
    """At the threshold the flag is raised (>=), just below it is not."""
    found = flags({"disagreements": {"suspect_rate": rate}}, suspect_threshold=threshold)
    assert names(found) == (["high_suspect_rate"] if raised else [])


def test_high_suspect_rate_default_threshold_and_flag() -> None:
    assert flags({"disagreements": {"suspect_rate": 0.0999}}) == []
    assert flags({"disagreements": {"suspect_rate": None}}) == []
    assert flags({"disagreements": {"suspect_rate": 0.1}}) == [
        {
            "fails_run": False,
            "kind": "note",
            "name": "high_suspect_rate",
            "message": "10% of rollouts have high reward but fail the verifiers",
            "value": 0.1,
            "threshold": 0.1,
        }
    ]


def test_collapse_flag_and_greedy() -> None:
    div = {
        "collapse": True,
        "collapsed_share": 0.5,
        "collapsed_inputs": [f"i{n}" for n in range(12)],
        "thresholds": {"collapsed_share": 0.2},
    }
    expected = {
        "fails_run": False,
        "kind": "note",
        "name": "collapse",
        "message": "12 inputs' rollouts are near-identical (mode collapse): "
        + ", ".join(f"i{n}" for n in range(10))
        + " ...",
        "value": {"collapsed_share": 0.5, "collapsed_inputs": 12},
        "threshold": {"collapsed_share": 0.2},
    }
    assert flags({"diversity": div}) == [expected]
    assert flags({"diversity": div}, {"temperature": 1.0}) == [expected]
    assert flags({"diversity": div}, {"temperature": 0}) == []
    assert flags({"diversity": {**div, "collapse": False}}) == []
    ten = {**div, "collapsed_inputs": [f"i{n}" for n in range(10)]}
    assert flags({"diversity": ten})[0]["message"].endswith("i8, i9")
    bare = flags({"diversity": {"collapse": True, "collapsed_inputs": ["a"]}})[0]
    assert bare["threshold"] == {"collapsed_share": None}
    assert bare["value"] == {"collapsed_share": None, "collapsed_inputs": 1}
    assert is_greedy({"temperature": 0}) and not is_greedy({}) and not is_greedy({"top_k": 0})


def bias(effect: float | None, p: float | None, n: int = 10) -> dict[str, Any]:
    within = {"effect_size": effect, "p_value": p, "slope_per_100": 0.25}
    return {"length_bias": {"n": n, "unit": "completion_tokens", "within_strata": within}}


def test_length_bias_flag() -> None:
    assert flags(bias(0.1, 0.01)) == [
        {
            "fails_run": False,
            "kind": "note",
            "name": "length_bias",
            "message": "among equally correct answers the reward pays for length: +0.25 per 100"
            " completion tokens; +20 % length buys 0.10 reward standard deviations"
            " (permutation p = 0.01)",
            "value": {"effect_size": 0.1, "p_value": 0.01, "slope_per_100": 0.25},
            "threshold": {"effect_size": 0.1, "p_value": 0.01},
        }
    ]
    no_unit = {"length_bias": {**bias(0.5, 0.001)["length_bias"], "unit": None}}
    assert " per 100 words;" in flags(no_unit)[0]["message"]


@pytest.mark.parametrize(
    ("effect", "p", "n", "kwargs", "raised"),
    [
        (0.0999, 0.001, 10, {}, False),
        (0.5, 0.0101, 10, {}, False),
        (0.5, 0.001, 9, {}, False),
        (None, 0.001, 50, {}, False),
        (0.5, None, 50, {}, False),
        (0.2, 0.02, 5, {"length_effect": 0.2, "length_alpha": 0.02, "min_length_n": 5}, True),
        (0.19, 0.02, 5, {"length_effect": 0.2, "length_alpha": 0.02, "min_length_n": 5}, False),
        (0.2, 0.021, 5, {"length_effect": 0.2, "length_alpha": 0.02, "min_length_n": 5}, False),
        (0.2, 0.02, 4, {"length_effect": 0.2, "length_alpha": 0.02, "min_length_n": 5}, False),
    ],
)
def test_length_bias_boundaries(
    effect: float | None, p: float | None, n: int, kwargs: dict[str, Any], raised: bool
) -> None:
    assert names(flags(bias(effect, p, n), **kwargs)) == (["length_bias"] if raised else [])


def test_length_bias_without_n_is_not_raised() -> None:
    metrics = bias(0.5, 0.001)
    del metrics["length_bias"]["n"]
    assert flags(metrics) == []


def test_negative_kl() -> None:
    assert flags({"kl": {"mean_k1": 0.0}}) == []
    assert flags({"kl": {"mean_k1": None}}) == []
    assert flags({"kl": {"mean_k1": -0.01}}) == [
        {
            "fails_run": False,
            "kind": "note",
            "name": "negative_kl",
            "message": "mean k1 KL estimate is negative: logprobs of policy and reference"
            " do not match the sampled tokens, or too few samples",
            "value": -0.01,
            "threshold": 0.0,
        }
    ]


def endpoint(share: float) -> dict[str, Any]:
    return {"component": "endpoint", "failed": 3, "of": 4, "unit": "rollouts", "share": share,
            "first": FIRST}  # fmt: skip


@pytest.mark.parametrize(("share", "fails"), [(0.5, False), (0.51, True), (0.75, True)])
def test_infra_errors(share: float, fails: bool) -> None:
    found = flags({"counts": {"infra_error": 3}, "errors": [endpoint(share)]})
    assert found == [
        {
            "fails_run": fails,
            "kind": "failure",
            "name": "infra_errors",
            "message": "3 rollouts failed on infrastructure (excluded from scores)"
            "; first (input q1, rollout 0): boom",
            "value": 3,
            "threshold": 0,
            "first_error": FIRST,
        }
    ]


def test_infra_errors_without_a_row() -> None:
    assert flags({"counts": {"infra_error": 0}}) == []
    assert flags({"counts": {"infra_error": 2}}) == [
        {
            "fails_run": False,
            "kind": "failure",
            "name": "infra_errors",
            "message": "2 rollouts failed on infrastructure (excluded from scores)",
            "value": 2,
            "threshold": 0,
        }
    ]
    row = {**endpoint(0.9), "first": None}
    found = flags({"counts": {"infra_error": 2}, "errors": [row]})
    assert found[0]["message"] == "2 rollouts failed on infrastructure (excluded from scores)"


def part(component: str, failed: int, of: int) -> dict[str, Any]:
    return {"component": component, "failed": failed, "of": of, "unit": "calls",
            "share": failed / of, "first": FIRST}  # fmt: skip


@pytest.mark.parametrize(
    ("component", "name"),
    [
        ("policy", "policy_failed"),
        ("fixtures", "fixture_misses"),
        ("verifier exact", "verifier_failed"),
        ("reward model", "reward_model_failed"),
    ],
)
def test_failing_parts(component: str, name: str) -> None:
    assert flags({"errors": [part(component, 1, 2)]}) == []
    assert flags({"errors": [part(component, 3, 4)]}) == [
        {
            "fails_run": True,
            "kind": "failure",
            "name": name,
            "message": f"{component} failed on 3 of 4 calls; first (input q1, rollout 0): boom",
            "value": 0.75,
            "threshold": FAIL_SHARE,
            "first_error": FIRST,
        }
    ]


def test_failing_tool_and_unknown_parts() -> None:
    assert flags({"errors": [part("tool search", 3, 4)]}) == []
    assert flags({"errors": [part("tool search", 4, 4)]}) == [
        {
            "fails_run": False,
            "kind": "failure",
            "name": "tool_failed",
            "message": "tool search failed on 4 of 4 calls; first (input q1, rollout 0): boom",
            "value": 1.0,
            "threshold": 1.0,
            "first_error": FIRST,
        }
    ]
    assert flags({"errors": [part("grader", 4, 4)]}) == []
    assert flags({"errors": [part("toolbox", 4, 4)]}) == []


def test_flag_order_and_kinds() -> None:
    metrics = {
        "diversity": {"collapse": True, "collapsed_inputs": ["a"]},
        **bias(0.5, 0.001),
        "disagreements": {"suspect_rate": 0.5},
        "kl": {"mean_k1": -1.0},
        "counts": {"infra_error": 1},
        "errors": [endpoint(0.9), part("policy", 4, 4)],
    }
    found = flags(metrics)
    assert names(found) == [
        "collapse",
        "length_bias",
        "high_suspect_rate",
        "negative_kl",
        "infra_errors",
        "policy_failed",
    ]
    assert [flag["kind"] for flag in found] == ["note"] * 4 + ["failure"] * 2
    assert set(KINDS.values()) == {"note"}


def test_part_names_with_spaces_and_a_missing_count() -> None:
    assert names(flags({"errors": [part("verifier my exact check", 3, 4)]})) == ["verifier_failed"]
    assert names(flags({"errors": [part("tool web search", 4, 4)]})) == ["tool_failed"]
    metrics = bias(0.5, 0.001)
    del metrics["length_bias"]["n"]
    assert flags(metrics, min_length_n=1) == []
