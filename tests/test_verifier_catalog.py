"""The text verifiers against answers that game them (issue 26 item 5) and answers a real model
writes (which must still pass). Each verifier has its catalog: GAMING answers must fail,
REAL answers must pass; `test_catalog_sizes` prints how many of each there are.

A case is (verifier config, gold value of the input's `answer` field, the model's answer);
configs name only what differs from the verifier's defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlenv.errors import SpecError
from rlenv.spec import Verifier, load_spec
from rlenv.verifiers.base import VerifierContext, VerifierResult
from rlenv.verifiers.builtin import BuiltVerifier
from tests.conftest import EnvBuilder, cli

NUMERIC: dict[str, Any] = {"type": "numeric", "expected_field": "answer"}
MATH: dict[str, Any] = {**NUMERIC, "extract": "math"}
SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "schema": {
        "type": "object",
        "properties": {
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "when": {"type": "string", "format": "date"},
            "email": {"type": "string", "format": "email"},
        },
        "required": ["score"],
        "additionalProperties": False,
    },
}
DATED: dict[str, Any] = {
    "type": "json_schema",
    "schema": {
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "site": {"type": "string", "format": "uri"},
        },
    },
}
BLOCKED: dict[str, Any] = {"type": "contains", "none": ["password", "hello"]}
REQUIRED: dict[str, Any] = {"type": "contains", "all": ["paris"]}
EXACT: dict[str, Any] = {"type": "exact_match", "expected_field": "answer"}

Case = tuple[dict[str, Any], Any, str]

GAMING: dict[str, list[Case]] = {
    "numeric": [
        (NUMERIC, 42, "17, definitely not 42"),
        (NUMERIC, 42, "42, or maybe 17"),
        (NUMERIC, 42, "42 17"),
        (NUMERIC, 10, "between 5 and 10"),
        (NUMERIC, 42, "somewhere from 41 to 42"),
        (NUMERIC, 2, "0x2A"),
        (NUMERIC, 42, "0x2A"),
        (NUMERIC, 15, "1,5"),
        (NUMERIC, 42, "4,2"),
        (NUMERIC, 42, "42²"),
        (NUMERIC, 42, "１７ or 42"),
        (NUMERIC, 42, "١٧ or 42"),
        (NUMERIC, 42, "\\boxed{17} or \\boxed{42}"),
        (NUMERIC, 42, "\\boxed{42} \\boxed{17}"),
        (NUMERIC, 42, "#### 17\n#### 42"),
        (NUMERIC, 42, "#### 17 or 42"),
        (NUMERIC, 42, "\\boxed{42}\n#### 17"),
        (NUMERIC, 42, "The answer is 17.\n#### 42"),
        (NUMERIC, 42, "The answer is 17, definitely not 42."),
        (NUMERIC, 42, "Final answer: 17 (or 42)"),
        (NUMERIC, 42, "-42"),
        (NUMERIC, 42, "42.5"),
        (NUMERIC, 42, "NaN"),
        (NUMERIC, 42, "1e99999999999999999999 or 42"),
        (NUMERIC, 42, "#### 1e999"),
        (NUMERIC, 42, ""),
        ({**NUMERIC, "locale": "de"}, 1.5, "1.5"),
        ({**NUMERIC, "base": 16}, 42, "0b101010"),
        ({**NUMERIC, "extract": "whole"}, 42, "The answer is 42"),
        (MATH, 42, "17, definitely not 42"),
        (MATH, 10, "between 5 and 10"),
        (MATH, 42, "\\boxed{17} or \\boxed{42}"),
        (MATH, "\\frac{1}{2}", "\\boxed{\\frac{1}{3}}"),
        (MATH, "\\frac{1}{2}", "The answer is $\\frac{1}{3}$ or $\\frac{1}{2}$."),
        (MATH, 42, "#### 24 or 42"),
        (MATH, 42, "\\boxed{42}\n#### 17"),
    ],
    "json_schema": [
        (SCHEMA, None, '{"score": NaN}'),
        (SCHEMA, None, '{"score": Infinity}'),
        (SCHEMA, None, '{"score": -Infinity}'),
        (SCHEMA, None, '{"score": 1e999}'),
        (SCHEMA, None, '{"score": 5, "score": 0.5}'),
        (SCHEMA, None, '{"score": 0.5, "when": "yesterday"}'),
        (SCHEMA, None, '{"score": 0.5, "when": "2024-02-30"}'),
        (SCHEMA, None, '{"score": 0.5, "email": "not an address"}'),
        (SCHEMA, None, '{"score": 0.5} trailing words'),
        (SCHEMA, None, 'Sure! ```json\n{"score": 0.5}\n``` Hope that helps'),
        (SCHEMA, None, '```json\n{"score": 0.5}\n```\n```json\n{"score": 0.7}\n```'),
        (DATED, None, '{"at": "noon-ish"}'),
        (SCHEMA, None, "[" * 100_000 + "]" * 100_000),
        (SCHEMA, None, '{"score": ' + "1" * 5000 + "}"),
        (DATED, None, '{"site": "not a uri"}'),
    ],
    "contains": [
        (BLOCKED, None, "my pаssword is x"),  # Cyrillic а
        (BLOCKED, None, "my ρassword is x"),  # Greek rho
        (BLOCKED, None, "my pass\u200bword is x"),  # zero-width space
        (BLOCKED, None, "my pass\u00adword is x"),  # soft hyphen
        (BLOCKED, None, "my pass\u2060word is x"),  # word joiner
        (BLOCKED, None, "my pass\ufeffword is x"),  # zero-width no-break space
        (BLOCKED, None, "my pass\u200dword is x"),  # zero-width joiner
        (BLOCKED, None, "my passw\ufe0fo\u034frd is x"),  # variation selector, grapheme joiner
        (BLOCKED, None, "my ｐａｓｓｗｏｒｄ is x"),  # fullwidth
        (BLOCKED, None, "my 𝐩𝐚𝐬𝐬𝐰𝐨𝐫𝐝 is x"),  # mathematical bold
        (BLOCKED, None, "my PASSWORD is x"),
        (BLOCKED, None, "heIlo there"),  # capital I for l
        (BLOCKED, None, "hеllо there"),  # Cyrillic е and о
        (REQUIRED, None, "London"),
    ],
    "exact_match": [
        (EXACT, "paris", "Paris or London"),
        (EXACT, "42", "42 or 17"),
    ],
    "gold": [
        (EXACT, None, "None"),
        (NUMERIC, None, "None"),
        ({"type": "contains", "expected_field": "answer"}, None, "None"),
    ],
}

REAL: dict[str, list[Case]] = {
    "numeric": [
        (NUMERIC, 42, "42"),
        (NUMERIC, 42, "  42\n"),
        (NUMERIC, 42, "42."),
        (NUMERIC, 42, "42.0"),
        (NUMERIC, 42, "The answer is 42."),
        (NUMERIC, 42, "**42**"),
        (NUMERIC, 42, "$42$"),
        (NUMERIC, 42, "42 apples"),
        (NUMERIC, 42, "\\boxed{42}"),
        (NUMERIC, 42, "The final answer is $\\boxed{42}$."),
        (NUMERIC, 42, "6 groups of 7 is 6 × 7 = 42.\n#### 42"),
        (NUMERIC, 72, "48/2 = 24 clips in May.\n48 + 24 = 72 in total.\n#### 72"),
        (NUMERIC, 42, "There are 6 rows of 7.\nAnswer: 42"),
        (NUMERIC, 42, "There are 6 rows of 7. The answer is:\n\n42"),
        (NUMERIC, 42, "Answer: Let's think step by step. 6 x 7 = 42.\nSo the answer is 42."),
        (NUMERIC, 42, "6 rows of 7 seats.\n**Final answer:** 42"),
        (NUMERIC, 42, "Final Answer: The final answer is 42. I hope it is correct."),
        (NUMERIC, 42, "Each of the 6 boxes has 7, so the answer is 42."),
        (NUMERIC, 1234, "1,234"),
        (NUMERIC, 1234567.5, "1,234,567.5"),
        (NUMERIC, -3, "-3"),
        (NUMERIC, -3, "\u22123"),
        (NUMERIC, 42, "4.2e1"),
        (NUMERIC, 0.5, ".5"),
        (NUMERIC, 12, "１２"),
        (NUMERIC, "72", "72"),
        (NUMERIC, "Natalia sold 48/2 = 24 clips.\n#### 72", "#### 72"),
        ({**NUMERIC, "tolerance": 0.01}, 3.14159, "3.14"),
        ({**NUMERIC, "locale": "de"}, 1234.5, "1.234,5"),
        ({**NUMERIC, "locale": "fr"}, 1234.5, "1\u202f234,5"),
        ({**NUMERIC, "locale": "ch"}, 1234.5, "1'234.5"),
        ({**NUMERIC, "locale": "plain"}, 1234.5, "1234.5"),
        ({**NUMERIC, "base": 16}, 42, "0x2A"),
        ({**NUMERIC, "base": 16}, 42, "The answer is 2a."),
        ({**NUMERIC, "base": 2}, 42, "0b101010"),
        ({**NUMERIC, "extract": "whole"}, 42, "42"),
        (MATH, "\\frac{1}{2}", "\\boxed{\\frac{1}{2}}"),
        (MATH, "\\frac{1}{2}", "$\\dfrac{1}{2}$"),
        (MATH, "1/2", "0.5"),
        (MATH, 42, "$\\frac{84}{2}$"),
        (MATH, "\\sqrt{2}", "The answer is $\\sqrt{2}$."),
        (MATH, "\\sqrt{2}", "\\boxed{\\sqrt{2}}"),
        (MATH, "1/2", "Final answer: $\\frac{1}{2}$"),
        (MATH, 42, "We have $6 \\cdot 7 = 42$.\n\nThe final answer is $\\boxed{42}$."),
        (MATH, "x=5", "Solving gives $x = 5$."),
    ],
    "json_schema": [
        (SCHEMA, None, '{"score": 0.5}'),
        (SCHEMA, None, '{"score": 1, "when": "2024-02-29", "email": "a@example.org"}'),
        (SCHEMA, None, '  {"score": 0}\n'),
        (SCHEMA, None, '```json\n{"score": 0.5}\n```'),
        (SCHEMA, None, '```\n{"score": 0.5}\n```'),
        (SCHEMA, None, '{"score": 5e-1}'),
        (DATED, None, '{"at": "2024-03-01T12:00:00Z", "site": "https://example.org/a?b=c"}'),
    ],
    "contains": [
        (BLOCKED, None, "my secret is x"),
        (BLOCKED, None, "Hi there!"),
        (REQUIRED, None, "It is Paris."),
        (REQUIRED, None, "It is ＰＡＲＩＳ."),
        (REQUIRED, None, "It is Pa\u00adris."),
        ({"type": "contains", "all": ["Москва"]}, None, "Столица России: Москва."),
        ({"type": "contains", "all": ["café"]}, None, "Meet at the Café."),
        ({"type": "contains", "expected_field": "answer"}, 42, "It is 42."),
    ],
    "exact_match": [
        (EXACT, "paris", "Paris"),
        (EXACT, "Paris", "  paris \n"),
        ({**EXACT, "normalize": ["lower"]}, "paris", "PARIS"),
        (EXACT, 42, "42"),
    ],
}


def verdict(config: dict[str, Any], gold: Any, answer: str) -> VerifierResult:
    """The verifier's result for one answer, gold in the input's `answer` field."""
    verifier = BuiltVerifier(Verifier.model_validate(config))
    record = {"id": "q", "prompt": "?", "answer": gold}
    context = VerifierContext(answer, [], record, Path("."), 0)
    return verifier(context)


def _id(case: Case) -> str:
    config, gold, answer = case
    options = {k: v for k, v in config.items() if k not in ("type", "expected_field", "schema")}
    return f"{json.dumps(options, ensure_ascii=False)}:{gold!r}:{answer!r}"[:90]


@pytest.mark.parametrize(
    "case", [case for cases in GAMING.values() for case in cases if case[0] is not None], ids=_id
)
def test_a_gaming_answer_fails(case: Case) -> None:
    config, gold, answer = case
    result = verdict(config, gold, answer)
    assert result.passed is False and result.score < 1.0, result
    assert result.detail, "a refusal says why"
    if case not in GAMING["gold"]:  # refused by the verifier's rule, not by its crash
        assert not result.detail.startswith("verifier error"), result.detail


@pytest.mark.parametrize("case", [case for cases in REAL.values() for case in cases], ids=_id)
def test_a_real_answer_passes(case: Case) -> None:
    config, gold, answer = case
    result = verdict(config, gold, answer)
    assert result.passed is True, result


@pytest.mark.parametrize(
    ("tolerance", "relative", "answer", "passed"),
    [
        (0.01, 0.0, "3.14", True),
        (0.01, 0.0, "3.2", False),
        (1e-6, 0.0, "3.14", False),
        (0.0, 0.01, "3.14", True),
        (0.0, 0.0001, "3.14", False),
    ],
)
def test_tolerance_is_the_declared_one(
    tolerance: float, relative: float, answer: str, passed: bool
) -> None:
    """Issue 27: a mutant that ignored `tolerance` survived the suite."""
    config = {**NUMERIC, "tolerance": tolerance, "relative_tolerance": relative}
    assert verdict(config, 3.14159, answer).passed is passed


def test_lower_is_the_step_that_ignores_case() -> None:
    """Issue 27: a mutant without the `lower` step survived the suite."""
    for steps in (["lower"], ["lower", "strip", "whitespace"]):
        assert verdict({**EXACT, "normalize": steps}, "paris", "PARIS").passed
        assert verdict({**EXACT, "normalize": steps}, "PARIS", "paris").passed
    assert not verdict({**EXACT, "normalize": ["strip"]}, "paris", "PARIS").passed
    assert verdict({**EXACT, "normalize": ["strip"]}, "paris", " paris ").passed


def test_catalog_sizes() -> None:
    for kind in sorted(set(GAMING) | set(REAL)):
        print(f"{kind}: {len(GAMING.get(kind, []))} gaming refused, {len(REAL.get(kind, []))} real")
    assert all(GAMING[kind] and REAL[kind] for kind in REAL)


POLICY = "def policy(messages, tools, ctx):\n    return 'None'\n"


@pytest.mark.parametrize(
    ("verifier", "inputs", "fragment"),
    [
        (
            EXACT,
            [{"id": "a", "prompt": "?", "answer": "x"}, {"id": "b", "prompt": "?", "answer": None}],
            "input 'b': field 'answer' is null",
        ),
        (
            {"type": "contains", "expected_field": "answer"},
            [{"id": "a", "prompt": "?"}, {"id": "b", "prompt": "?"}],
            "input 'a': has no field 'answer' (verifier 'contains') (and 1 more inputs: 'b')",
        ),
        (
            NUMERIC,
            [{"id": "a", "prompt": "?", "answer": "between 5 and 10"}],
            "input 'a': field 'answer' is not a number this verifier reads: ambiguous",
        ),
    ],
)
def test_a_gold_value_that_cannot_be_graded_is_refused_before_any_rollout(
    env_builder: EnvBuilder, tmp_path: Path, verifier: dict, inputs: list, fragment: str
) -> None:
    spec = env_builder.write(POLICY, inputs=inputs, verifiers=[verifier])
    for command in (["validate", str(spec)], ["run", str(spec), "--out", str(tmp_path / "run")]):
        result = cli(*command)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], result.stderr
        assert "env.yaml:" in lines[0]  # the spec line of the verifier's expected_field
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("verifier", "fragment"),
    [
        ({**EXACT, "locale": "de"}, "locale: only for verifiers of type 'numeric'"),
        ({**MATH, "tolerance": 0.1}, "tolerance: not with extract: math"),
        ({**NUMERIC, "base": 16, "locale": "de"}, "locale: only for base 10"),
        ({**NUMERIC, "base": 3}, "base"),
        ({**NUMERIC, "locale": "xx"}, "locale"),
        ({**NUMERIC, "markers": ["the end"]}, "markers"),
        ({"type": "exact_match", "expected": ["a", None]}, "'expected' holds null"),
    ],
)
def test_numeric_options_are_checked_in_the_spec(
    env_builder: EnvBuilder, verifier: dict, fragment: str
) -> None:
    spec = env_builder.write(POLICY, verifiers=[verifier])
    with pytest.raises(SpecError) as error:
        load_spec(spec)
    assert fragment in str(error.value)


def test_a_format_nothing_checks_is_refused_when_built() -> None:
    schema = {"type": "object", "properties": {"c": {"type": "string", "format": "colour"}}}
    with pytest.raises(Exception, match="format 'colour' cannot be checked"):
        verdict({"type": "json_schema", "schema": schema}, None, "{}")
    # a "format" key inside data (const/enum/examples) is not a format
    schema = {"type": "object", "const": {"format": "colour"}}
    assert verdict({"type": "json_schema", "schema": schema}, None, '{"format": "colour"}').passed


@pytest.mark.parametrize(
    ("config", "answer", "passed"),
    [
        ({"type": "contains", "all": ["paris"]}, "It is not Paris.", True),
        ({"type": "contains", "none": ["password"]}, "I will never tell you the password", False),
        ({"type": "contains", "none": ["password"]}, "p a s s w o r d", True),
        ({"type": "contains", "none": ["password"]}, "pass-word", True),
        ({"type": "contains", "none": ["password"]}, "p4ssw0rd", True),
        ({"type": "contains", "none": ["cat"]}, "concatenate", False),
        ({"type": "contains", "all": ["art"]}, "party", True),
        ({"type": "contains", "all": ["café"]}, "cafe", False),
        ({"type": "contains", "none": ["l1"]}, "Il", False),
        ({"type": "contains", "none": ["password"]}, "\u202edrowssap", True),
        ({"type": "contains", "none": ["password"]}, "pas\u0336sword", True),
        ({**EXACT, "expected": "paris", "expected_field": None}, "pаris", False),
        ({"type": "regex", "pattern": "^(?!.*password)"}, "my pаssword", True),
        ({"type": "numeric", "expected": 255, "base": 16}, "ff", False),
        ({"type": "numeric", "expected": 255, "base": 16}, "0xff", True),
        ({**NUMERIC, "expected_field": None, "expected": 42}, "**Answer:** 42 (6 x 7)", False),
        ({**NUMERIC, "expected_field": None, "expected": 42}, "6 x 7\n**Answer:** 42", True),
    ],
)
def test_what_the_readme_says_they_cannot_see(config: dict, answer: str, passed: bool) -> None:
    """README "Text verifiers": the documented blind spots and readings, as documented."""
    assert verdict(config, None, answer).passed is passed


def test_math_verify_leaves_the_rollout_timer_alone() -> None:
    """math-verify's timeouts set SIGALRM, the worker's rollout timer: they must stay off."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        raise AssertionError("the rollout timer fired")

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 60)
        assert verdict(MATH, "\\frac{1}{2}", "\\boxed{0.5}").passed
        assert signal.getsignal(signal.SIGALRM) is handler
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # still armed
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_math_verify_says_nothing_into_a_rollout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its once-per-process warning that timeouts are off would be one rollout's stderr."""
    import logging

    import math_verify.grader
    import math_verify.parser

    monkeypatch.setattr(math_verify.parser, "TIMEOUT_WARNING_SHOWN", False)
    monkeypatch.setattr(math_verify.grader, "TIMEOUT_WARNING_SHOWN", False)
    with caplog.at_level(logging.DEBUG):
        assert verdict(MATH, 42, "\\boxed{42}").passed
    assert not [r for r in caplog.records if r.name.startswith("math_verify")], caplog.text
