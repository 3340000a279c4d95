"""The CLI's one JSON printer (`json_text`, behind `--json`) writes through orjson only where
its text is proven the same as the reference's: ``json.dumps(indent=2)`` of the value with keys
sorted at every level and ``verdict`` (then ``checkpoints``) first."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rlenv.report import common
from rlenv.report.common import json_text


class Colour(enum.StrEnum):
    RED = "red"


class Old(str, enum.Enum):  # noqa: UP042 (on purpose: str() is "Old.X", its JSON text "x")
    X = "x"


class Level(enum.IntEnum):
    LOW = 1


def _reference_sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _reference_sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_reference_sorted(v) for v in value]
    return value


def reference(value: Any) -> str:
    """json_text as it was: a Python walk to sort, then json.dumps."""
    ordered = _reference_sorted(value)
    if isinstance(ordered, dict):
        ordered = {**{k: ordered[k] for k in common.FIRST if k in ordered}, **ordered}
    return json.dumps(ordered, indent=2, ensure_ascii=False)


def _outcome(function: Any, value: Any) -> tuple[str, Any]:
    try:
        return "text", function(value)
    except Exception as exc:
        return "raised", type(exc)


keys = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["verdict", "checkpoints", "a", "é", "\U0001f600", "\ue000"]),
    st.integers(-3, 3),
    st.sampled_from([Colour.RED, Old.X, None, True, 1.5]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 2**64 too
    st.floats(),  # NaN, infinities, -0.0, subnormals
    st.sampled_from([1.0, 1e16, 1e21, 1e-7, 1.5e-05, 0.0001, 5e-324, math.nan, -math.inf]),
    st.text(),  # control characters, lone surrogates, astral characters
    st.sampled_from([Colour.RED, Old.X, Level.LOW]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=25,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
@example({"b": {"z": 1, "a": [1.0, None]}, "verdict": {"status": "ok"}, "checkpoints": []})
@example({"pass_rate": {"value": math.nan, "ci": [None, None]}, "verdict": "x"})
@example({"reward": {"mean": math.inf}})
@example({"rows": [{"n": 1e-05}, {"n": 1e16}], "verdict": None})
@example({Old.X: 1, "b": 2})
@example({"id": 2**64, "verdict": 1})
def test_json_text_is_the_reference_text(value: Any) -> None:
    assert _outcome(json_text, value) == _outcome(reference, value)


def test_a_summary_goes_through_orjson_and_keeps_its_text() -> None:
    """A run's summary (every value finite) takes the fast way; one NaN sends it the slow way,
    which writes ``NaN`` as json.dumps does (orjson would have written ``null``)."""
    per_input = [
        {"input_id": f"i{index:07d}", "n_answers": 1, "similarity": None, "spread": 0.25}
        for index in range(200)
    ]
    summary = {
        "rollouts": 200,
        "pass_rate": {"value": 0.5, "ci": [0.4312, 0.5688]},
        "diagnostics": {"diversity": {"per_input": per_input, "distinct": {"1": 1.0, "2": None}}},
        "verdict": {"status": "inconclusive", "evidence": []},
        "run_dir": "runs/é",
    }
    assert common._json_text_through_orjson(summary) == reference(summary)
    assert json_text(summary).startswith('{\n  "verdict": {')
    summary["pass_rate"]["value"] = math.nan
    assert common._json_text_through_orjson(summary) is None
    assert '"value": NaN' in json_text(summary) == reference(summary)
