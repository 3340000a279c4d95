"""The parts every verifier shares, in process: what a reader sees (rlenv.verifiers.text) and
what a verifier is given and returns (rlenv.verifiers.base). Part of the mutation run's fast
set for both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlenv.spec import Verifier
from rlenv.verifiers.base import VerifierContext, VerifierResult, expected_value, gold_problem
from rlenv.verifiers.text import skeleton, visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("pass\u200bword", "password"),
        ("soft\u00adhyphen", "softhyphen"),
        ("a\u034fb\u061cc\u115fd\u1160e", "abcde"),
        ("x\u17b4\u17b5\u180b\u180fy", "xy"),
        ("bidi\u202a\u202eend", "bidiend"),
        ("w\u2060\u206fj", "wj"),
        ("h\u3164f\ufe00\ufe0fz\ufeff\uffa0", "hfz"),
        ("s\ufff0\ufff8t", "st"),
        ("\U0001bca0\U0001bca3\U0001d173\U0001d17aok\U000e0000\U000e0fff", "ok"),
        ("tag\U000e0041s", "tags"),
        ("plain text, é and 漢字", "plain text, é and 漢字"),
        ("\u115e\u1161\u17b3\u17b6", "\u115e\u1161\u17b3\u17b6"),  # just outside the ranges
        ("\u0600x", "x"),  # a format character (Cf) outside the listed ranges
    ],
)
def test_visible_drops_what_renders_as_nothing(text: str, shown: str) -> None:
    assert visible(text) == shown


@pytest.mark.parametrize(
    ("text", "looks_like"),
    [
        ("pаssword", "password"),  # Cyrillic а
        ("ｐａｓｓｗｏｒｄ", "password"),  # fullwidth (NFKC)
        ("𝐩𝐚𝐬𝐬𝐰𝐨𝐫𝐝", "password"),  # mathematical bold (NFKC)
        ("pass\u200bword", "password"),
        ("Ηello", "Hello"),  # Greek capital eta
        ("0", "O"),  # digit zero and letter O look alike: the class's first ASCII letter
        ("l", skeleton("1")),
    ],
)
def test_skeleton_maps_look_alikes_together(text: str, looks_like: str) -> None:
    assert skeleton(text) == skeleton(looks_like)


def test_skeleton_representatives() -> None:
    assert skeleton("a") == "a" and skeleton("а") == "a"  # ASCII letter chosen
    assert skeleton("plain") == "pIain"  # l looks like I: the class's first ASCII letter
    assert skeleton("") == ""
    assert skeleton("0") == "O"
    assert skeleton("!") == skeleton("ǃ")  # ASCII non-letter chosen over non-ASCII
    assert skeleton("‐") == skeleton("-")


CONTEXT = VerifierContext(answer="a", messages=[], input={}, workdir=Path("."), seed=0)


def context(data: dict[str, Any]) -> VerifierContext:
    return VerifierContext(answer="a", messages=[], input=data, workdir=Path("."), seed=0)


def test_verifier_result_as_dict() -> None:
    result = VerifierResult("n", "exact_match", True, 1.0)
    assert result.as_dict() == {
        "name": "n",
        "type": "exact_match",
        "passed": True,
        "score": 1.0,
        "detail": None,
    }
    failed = VerifierResult("n", "python", False, 0.0, "boom", ["frame 1"])
    assert failed.as_dict()["traceback"] == ["frame 1"]
    assert "traceback" not in VerifierResult("n", "python", False, 0.0, "x", []).as_dict()
    assert CONTEXT.frozen_time is None


def test_expected_value() -> None:
    by_field = Verifier.model_validate({"type": "exact_match", "expected_field": "answer"})
    assert expected_value(by_field, context({"answer": "Paris"})) == "Paris"
    assert expected_value(by_field, context({"answer": ["a", "b"]})) == ["a", "b"]
    with pytest.raises(KeyError, match="input has no field 'answer'"):
        expected_value(by_field, context({}))
    with pytest.raises(ValueError, match="^input field 'answer' is null$"):
        expected_value(by_field, context({"answer": None}))
    with pytest.raises(ValueError, match="is null"):
        expected_value(by_field, context({"answer": ["a", None]}))
    fixed = Verifier.model_validate({"type": "exact_match", "expected": "Rome"})
    assert expected_value(fixed, context({"answer": "Paris"})) == "Rome"


def test_gold_problem() -> None:
    exact = Verifier.model_validate({"type": "exact_match", "expected_field": "answer"})
    assert gold_problem(exact, {"answer": "x"}) is None
    assert gold_problem(exact, {}) == "has no field 'answer'"
    assert gold_problem(exact, {"answer": None}) == (
        "field 'answer' is null; a null gold value would compare as the text 'None'"
    )
    assert gold_problem(exact, {"answer": [1, None]}) is not None
    assert gold_problem(exact, {"answer": "not a number"}) is None
    fixed = Verifier.model_validate({"type": "exact_match", "expected": "x"})
    assert gold_problem(fixed, {}) is None
    numeric = Verifier.model_validate({"type": "numeric", "expected_field": "answer"})
    assert gold_problem(numeric, {"answer": "#### 72"}) is None
    assert gold_problem(numeric, {"answer": 3.5}) is None
    problem = gold_problem(numeric, {"answer": "between 5 and 10"})
    assert problem is not None
    assert problem.startswith("field 'answer' is not a number this verifier reads: ambiguous")
    maths = Verifier.model_validate(
        {"type": "numeric", "expected_field": "answer", "extract": "math"}
    )
    assert gold_problem(maths, {"answer": "between 5 and 10"}) is None
