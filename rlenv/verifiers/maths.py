"""`numeric` with `extract: math`: expressions compared by Hugging Face's math-verify.

math-verify reads the rightmost expression it can parse, so "17, definitely not 42" reads as
42. Here the answer is first cut to its marked answers (as for `extract: final`), and every
digit of each must belong to the one expression math-verify read: another number beside it
makes the answer ambiguous. Every marked answer must match the gold.

math-verify's own timeouts use SIGALRM, which is the worker's rollout timer (and a wall-clock
limit would make a verdict depend on the machine): they are off; `limits.timeout_s` bounds the
rollout as it bounds every verifier.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from rlenv.errors import UserError
from rlenv.verifiers.base import Grader, VerifierContext, expected_value
from rlenv.verifiers.numbers import Unreadable, marked_answers
from rlenv.verifiers.text import visible

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier

MATH_EXTRA = "pip install 'rlenv[math]'"


def _digits(text: str) -> Counter[int]:
    return Counter(int(char) for char in text if char.isdecimal())


class _Reader:
    def __init__(self, config: Verifier) -> None:
        try:
            import math_verify
        except ImportError:
            raise UserError(
                f"verifier {config.label!r}: extract: math needs math-verify ({MATH_EXTRA})"
            ) from None
        # it warns once per process that its timeouts are off, which we mean: that line would
        # land in whichever rollout a worker grades first (its captured stderr)
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        self.math_verify = math_verify
        self.markers = list(config.markers)

    def expressions(self, text: str) -> list[tuple[list[Any], str]]:
        """Each marked answer (or the whole text) as math-verify parses it, with its text."""
        marked = marked_answers(text, self.markers)
        segments = marked[1] if marked else [visible(text)]
        read = []
        for segment in segments:
            parsed = self._parse(segment) or self._parse(f"${segment}$")  # bare LaTeX too
            if not parsed:
                raise Unreadable(f"math-verify reads no expression in {segment.strip()!r}")
            extracted = str(parsed[-1])
            if _digits(segment) - _digits(extracted):
                raise Unreadable(
                    f"ambiguous: {segment.strip()!r} holds more than the expression {extracted!r}"
                )
            read.append((parsed, extracted))
        return read

    def _parse(self, text: str) -> list[Any]:
        return list(self.math_verify.parse(text, parsing_timeout=None))

    def equal(self, gold: list[Any], answer: list[Any]) -> bool:
        return bool(self.math_verify.verify(gold, answer, timeout_seconds=None))


def gold_text(value: Any) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        raise Unreadable(f"gold value {value!r} is not an expression")
    return str(value)


def math_grader(config: Verifier) -> Grader:
    reader = _Reader(config)

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        gold = gold_text(expected_value(config, context))
        golds = reader.expressions(gold)
        if len(golds) != 1:
            raise Unreadable(f"gold value {gold!r} marks {len(golds)} answers")
        try:
            answers = reader.expressions(context.answer or "")
        except Unreadable as exc:
            return False, 0.0, str(exc)
        for parsed, extracted in answers:
            if not reader.equal(golds[0][0], parsed):
                return False, 0.0, f"got {extracted}, expected {golds[0][1]}"
        return True, 1.0, None

    return grade
