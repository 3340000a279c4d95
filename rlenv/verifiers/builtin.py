"""Built-in verifiers: exact match, regex, numeric, contains, JSON schema, python, file state.

The code-running ones (python_tests, program_cases) are in ``rlenv.verifiers.code``; how
numeric reads its number in ``numbers`` (and ``maths``), what contains compares in ``text``,
how json_schema reads JSON in ``json_answers``.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlenv.canonical import sha256_file
from rlenv.errors import FixtureMiss, UserError, VerifierCrash, env_frames
from rlenv.refs import import_ref
from rlenv.results import VERIFIER_ERROR
from rlenv.verifiers.base import (
    Grader,
    LiveJudgment,
    VerifierContext,
    VerifierResult,
    expected_value,
)
from rlenv.verifiers.numbers import Rule, Unreadable, read_gold, read_number
from rlenv.verifiers.text import skeleton

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalise(text: str, steps: Sequence[str]) -> str:
    for step in steps:
        if step == "lower":
            text = text.lower()
        elif step == "strip":
            text = text.strip()
        elif step == "punctuation":
            text = text.translate(_PUNCTUATION)
        elif step == "articles":
            text = _ARTICLES.sub(" ", text)
        elif step == "whitespace":
            text = " ".join(text.split())
    return text


def _exact(config: Verifier) -> Grader:
    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        expected = expected_value(config, context)
        candidates = expected if isinstance(expected, list) else [expected]
        if config.aliases_field and isinstance(context.input.get(config.aliases_field), list):
            candidates = candidates + list(context.input[config.aliases_field])
        answer = normalise(context.answer or "", config.normalize)
        ok = any(answer == normalise(str(candidate), config.normalize) for candidate in candidates)
        return ok, float(ok), None if ok else f"expected {candidates[0]!r}"

    return grade


_FLAGS = {"ignorecase": re.IGNORECASE, "multiline": re.MULTILINE, "dotall": re.DOTALL}


def _regex(config: Verifier) -> Grader:
    flags = 0
    for flag in config.flags:
        flags |= _FLAGS[flag]
    try:
        pattern = re.compile(config.pattern or "", flags)
    except re.error as exc:
        raise UserError(f"verifier {config.label!r}: invalid regex: {exc}") from None

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        text = context.answer or ""
        found = pattern.fullmatch(text) if config.fullmatch else pattern.search(text)
        return bool(found), float(bool(found)), None if found else "pattern not found"

    return grade


def _numeric(config: Verifier) -> Grader:
    if config.extract == "math":
        from rlenv.verifiers.maths import math_grader

        return math_grader(config)
    rule = Rule.of(config)

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        expected = read_gold(expected_value(config, context), rule)
        try:
            got = read_number(context.answer or "", rule)
        except Unreadable as exc:
            return False, 0.0, str(exc)
        ok = math.isclose(
            got, expected, abs_tol=config.tolerance, rel_tol=config.relative_tolerance
        )
        return ok, float(ok), None if ok else f"got {got:g}, expected {expected:g}"

    return grade


def _seen(text: str, steps: Sequence[str]) -> str:
    """Text as `contains` compares it: as it looks (`skeleton`), then normalised."""
    return skeleton(normalise(skeleton(text), steps))


def _contains(config: Verifier) -> Grader:
    skeleton("")  # loads the confusables data now, at the worker's start, not in a rollout

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        answer = _seen(context.answer or "", config.normalize)
        required = list(config.all)
        if config.expected_field:
            value = expected_value(config, context)
            required += [str(item) for item in value] if isinstance(value, list) else [str(value)]
        missing = [item for item in required if _seen(item, config.normalize) not in answer]
        present = [item for item in config.none if _seen(item, config.normalize) in answer]
        checks = len(required) + len(config.none)
        failures = len(missing) + len(present)
        score = 1.0 if checks == 0 else (checks - failures) / checks
        detail = None
        if missing or present:
            detail = "; ".join(
                part
                for part in (
                    f"missing {missing}" if missing else "",
                    f"forbidden {present}" if present else "",
                )
                if part
            )
        return failures == 0, score, detail

    return grade


def _json_schema(config: Verifier) -> Grader:
    from rlenv.verifiers.json_answers import schema_grader

    return schema_grader(config)


def _python(config: Verifier) -> Grader:
    function = import_ref(config.function or "", what=f"verifier {config.label!r}")
    if not callable(function):
        raise UserError(f"verifier {config.label!r}: {config.function} is not callable")

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        value = function(context.answer, context.input, context, **config.options)
        if isinstance(value, bool):
            return value, float(value), None
        if isinstance(value, int | float):
            return float(value) >= 1.0, float(value), None
        if isinstance(value, tuple) and len(value) == 2:
            return (
                bool(value[0]),
                float(bool(value[0])),
                None if value[1] is None else str(value[1]),
            )
        if isinstance(value, dict) and "passed" in value:
            passed = bool(value["passed"])
            return passed, float(value.get("score", float(passed))), value.get("detail")
        raise TypeError(f"returned {type(value).__name__}; expected bool, float, tuple or dict")

    return grade


def _file_state(config: Verifier) -> Grader:
    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        relative = config.path or str(context.input.get(config.path_field or "", ""))
        target = (context.workdir / relative).resolve()
        if not target.is_relative_to(context.workdir.resolve()):
            return False, 0.0, f"path {relative!r} leaves the workdir"
        if config.exists is False:
            ok = not target.exists()
            return ok, float(ok), None if ok else f"{relative} exists"
        if not target.is_file():
            return False, 0.0, f"{relative} does not exist"
        if config.sha256 is not None:
            ok = sha256_file(target) == config.sha256
            return ok, float(ok), None if ok else f"{relative} hash differs"
        content = target.read_text(encoding="utf-8", errors="replace")
        if config.contains is not None:
            ok = config.contains in content
            return ok, float(ok), None if ok else f"{relative} lacks {config.contains!r}"
        if config.expected is not None or config.expected_field is not None:
            expected = str(expected_value(config, context))
            ok = normalise(content, config.normalize) == normalise(expected, config.normalize)
            return ok, float(ok), None if ok else f"{relative} content differs"
        return True, 1.0, None

    return grade


def _code(config: Verifier) -> Grader:
    """python_tests and program_cases: the model's code runs in the sandbox (lazy import)."""
    from rlenv.verifiers.code import sandboxed_grader

    return sandboxed_grader(config)


def _judge(config: Verifier) -> Grader:
    from rlenv.verifiers.judge import build

    return build(config)


def _state(config: Verifier) -> Grader:
    from rlenv.verifiers.state import build_json, build_sqlite

    return build_sqlite(config) if config.type == "sqlite_state" else build_json(config)


_BUILDERS: dict[str, Callable[[Verifier], Grader]] = {
    "exact_match": _exact,
    "regex": _regex,
    "numeric": _numeric,
    "contains": _contains,
    "json_schema": _json_schema,
    "python": _python,
    "file_state": _file_state,
    "python_tests": _code,
    "program_cases": _code,
    "judge": _judge,
    "sqlite_state": _state,
    "json_state": _state,
}


class BuiltVerifier:
    def __init__(self, config: Verifier) -> None:
        self.config = config
        self.grader = _BUILDERS[config.type](config)

    def __call__(self, context: VerifierContext) -> VerifierResult:
        frames: list[str] | None = None
        state: dict[str, Any] | None = None
        try:
            output = self.grader(context)
            if len(output) == 4:  # a state verifier's diff
                state = output[3]
            passed, score, detail = _checked_output(*output[:3])
        except FixtureMiss as exc:  # a judge reply never recorded: no verdict can be given
            raise VerifierCrash(f"verifier {self.config.label}: {exc}") from None
        except LiveJudgment:  # made by the orchestrator, outside the world
            from rlenv.verifiers.judge import PENDING_JUDGMENT

            return VerifierResult(self.config.label, self.config.type, None, None, PENDING_JUDGMENT)
        except Exception as exc:  # a verifier that crashes fails the rollout, not the run
            passed, score, detail = False, 0.0, f"{VERIFIER_ERROR}{type(exc).__name__}: {exc}"
            frames = env_frames(exc)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: status verifier_error
            raise VerifierCrash(
                f"verifier {self.config.label}: {type(exc).__name__}: {exc}", env_frames(exc)
            ) from None
        return VerifierResult(
            self.config.label, self.config.type, passed, score, detail, frames, state
        )


def _checked_output(passed: Any, score: Any, detail: Any) -> tuple[bool, float, str | None]:
    """What a verifier returned, as a record can hold it (strict JSON); else TypeError/
    ValueError, which fail the rollout's verdict like a crash: a bool, a finite score, a
    string detail (a set or bytes is not JSON, NaN not a number)."""
    if not isinstance(passed, bool):
        raise TypeError(f"returned passed={type(passed).__name__}; expected a bool")
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise TypeError(f"returned score={type(score).__name__}; expected a number")
    if not math.isfinite(score):
        raise ValueError(f"returned score {score}; expected a finite number")
    if detail is not None and not isinstance(detail, str):
        raise TypeError(f"returned detail={type(detail).__name__}; expected a string or None")
    return passed, float(score), detail


def build_verifiers(configs: list[Verifier]) -> list[BuiltVerifier]:
    return [BuiltVerifier(config) for config in configs]
