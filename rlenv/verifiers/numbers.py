"""The one number a numeric verifier grades, read by a declared rule, locale and base.

An answer that holds two readings is refused with the reason (`Unreadable`), never resolved by
position: "17, definitely not 42" is not 42, "between 5 and 10" is not 10, `0x2A` is not 2 in
base 10 and `1,5` is not 15 in a locale that groups digits in threes.

`extract`:
  final   the number of the final-answer marks (`markers`: `\\boxed{}`, `####` to the end of
          its line, `answer:` / `answer is` to the end of its sentence, if it holds a digit):
          every mark holds one number, and all agree; without any mark, the one number in the
          answer (repeated, it is still one)
  whole   the answer, stripped, is one number
  math    math-verify compares expressions (`rlenv.verifiers.maths`); markers as for final
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from rlenv.spec_data import DEFAULT_MARKERS
from rlenv.verifiers.text import visible

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier

# locale -> (digit-group separators, decimal mark); an example of each is in LOCALE_EXAMPLES
LOCALES: dict[str, tuple[str, str]] = {
    "en": (",", "."),
    "de": (".", ","),
    "fr": ("\u202f\u00a0\u2009", ","),
    "ch": ("'\u2019", "."),
    "plain": ("", "."),
}
LOCALE_EXAMPLES = {
    "en": "1,234.5",
    "de": "1.234,5",
    "fr": "1\u202f234,5",
    "ch": "1'234.5",
    "plain": "1234.5",
}
_SHOWN_MARKER = {"boxed": "\\boxed{}", "####": "####", "answer": "answer:"}
_PREFIX_BASE = {"x": 16, "o": 8, "b": 2}
_BASE_DIGITS = {2: "01", 8: "01234567", 16: "0123456789abcdef"}

_SEPARATORS = ".,'\u2019\u202f\u00a0\u2009"
# a decimal run: digits joined by single separators, a sign only where no word or number
# precedes it, an exponent; a digit after a letter belongs to a word (CO2, x2), not a number
_RUN = re.compile(
    rf"(?<![\w{_SEPARATORS}])(?P<sign>[-+\u2212](?=\.?\d))?"
    rf"(?P<body>\.?\d+(?:[{_SEPARATORS}]\d+)*)(?P<exp>[eE][-+\u2212]?\d+(?!\w))?"
)
_PREFIXED = re.compile(r"(?<!\w)[-+\u2212]?0(?P<prefix>[xXoObB])(?P<digits>\w+)")
_TOKEN = re.compile(r"(?<![\w.])(?P<sign>[-+\u2212](?=\w))?(?P<body>\w+)")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####")
_ANSWER = re.compile(r"(?i)\banswer\b(?:\s*[*_]{1,2})?\s*(?:is\b\s*:?|[:=])")
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)|\n")


class Unreadable(ValueError):
    """The answer holds no single number under the declared rule; the message says why."""


@dataclass(frozen=True)
class Rule:
    """How a numeric verifier reads its number (the spec's extract, markers, locale, base)."""

    extract: str = "final"
    markers: tuple[str, ...] = DEFAULT_MARKERS
    locale: str = "en"
    base: int = 10

    @classmethod
    def of(cls, config: Verifier) -> Rule:
        return cls(config.extract, tuple(config.markers), config.locale, config.base)


def _grammar(locale: str) -> re.Pattern[str]:
    groups, decimal = LOCALES[locale]
    fraction = rf"(?:{re.escape(decimal)}\d+)?"
    grouped = rf"|\d{{1,3}}(?:[{re.escape(groups)}]\d{{3}})+{fraction}" if groups else ""
    return re.compile(rf"\d+{fraction}{grouped}|{re.escape(decimal)}\d+")


_GRAMMARS = {locale: _grammar(locale) for locale in LOCALES}


def _ascii_digits(text: str) -> str:
    return "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in text)


def _decimal_run(match: re.Match[str], locale: str, text: str) -> Decimal:
    body = match.group("body")
    after = text[match.end() : match.end() + 1]
    if after and unicodedata.category(after) == "No":  # 42², 4½: not a plain number
        raise Unreadable(f"{match.group(0) + after!r} is not a plain number")
    if not _GRAMMARS[locale].fullmatch(body):
        raise Unreadable(
            f"{body!r} is not a number in locale {locale} (written like"
            f" {LOCALE_EXAMPLES[locale]!r})"
        )
    groups, decimal = LOCALES[locale]
    plain = _ascii_digits("".join(c for c in body if c not in groups).replace(decimal, "."))
    sign = "-" if match.group("sign") in ("-", "\u2212") else ""
    exponent = _ascii_digits((match.group("exp") or "").replace("\u2212", "-"))
    try:
        return Decimal(sign + plain + exponent)
    except InvalidOperation:  # an exponent beyond what a decimal holds
        raise Unreadable(f"{match.group(0)!r} is not a finite number") from None


def _numbers_base10(text: str, locale: str) -> list[Decimal]:
    prefixed = _PREFIXED.search(text)
    if prefixed is not None:
        base = _PREFIX_BASE[prefixed.group("prefix").lower()]
        raise Unreadable(
            f"{prefixed.group(0)!r} is written in base {base}; this verifier reads base 10"
            " (`base:`)"
        )
    return [_decimal_run(match, locale, text) for match in _RUN.finditer(text)]


def _numbers_in_base(text: str, base: int) -> list[Decimal]:
    found: list[Decimal] = []
    digits = _BASE_DIGITS[base]
    for match in _TOKEN.finditer(text):
        body = match.group("body").lower()
        prefix_base = _PREFIX_BASE.get(body[1:2]) if body[:1] == "0" and len(body) > 2 else None
        if prefix_base is not None:
            if prefix_base != base:
                raise Unreadable(
                    f"{match.group(0)!r} is written in base {prefix_base}; this verifier reads"
                    f" base {base}"
                )
            body = body[2:]
        elif not body.isascii() or (base == 16 and not any(c.isdigit() for c in body)):
            continue  # a word ("a", "face"), not a number: a bare base-16 number has a digit
        if all(c in digits for c in body):
            value = int(body, base)
            found.append(Decimal(-value if match.group("sign") in ("-", "\u2212") else value))
        elif body.isdigit() or prefix_base is not None:
            raise Unreadable(f"{match.group(0)!r} is not a base-{base} number")
    return found


def numbers_in(text: str, *, locale: str = "en", base: int = 10) -> list[Decimal]:
    """Every number in the text, in order; Unreadable when one cannot be read."""
    shown = visible(text)
    return _numbers_base10(shown, locale) if base == 10 else _numbers_in_base(shown, base)


def _braced(text: str, start: int) -> str:
    depth = 1
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[start:index]
    raise Unreadable("a \\boxed{ is never closed")


def _segments(text: str, marker: str) -> list[str]:
    if marker == "boxed":
        return [_braced(text, match.end()) for match in _BOXED.finditer(text)]
    pattern = _HASHES if marker == "####" else _ANSWER
    segments = []
    for match in pattern.finditer(text):
        rest = text[match.end() :].lstrip()  # "The answer is:\n\n42"
        end = _SENTENCE_END.search(rest) if marker == "answer" else re.search(r"\n|####", rest)
        segments.append(rest[: end.start()] if end else rest)
    if marker == "answer":  # "Answer: Let's think step by step." is a label, not an answer
        return [segment for segment in segments if any(c.isdecimal() for c in segment)]
    return segments


def marked_answers(text: str, markers: Sequence[str]) -> tuple[str, list[str]] | None:
    """What each final-answer mark of the kinds in `markers` holds (every mark of every kind:
    a `\\boxed{42}` beside `#### 17` is two answers), and the kinds found; None: no mark."""
    shown = visible(text)
    found = {marker: _segments(shown, marker) for marker in markers}
    kinds = [_SHOWN_MARKER[marker] for marker, segments in found.items() if segments]
    if not kinds:
        return None
    return ", ".join(kinds), [segment for segments in found.values() for segment in segments]


def _shown(values: Sequence[Decimal]) -> str:
    return ", ".join(format(v, "f") if abs(v.adjusted()) < 16 else str(v) for v in values)


def _one(values: list[Decimal], where: str) -> Decimal:
    distinct = list(dict.fromkeys(values))
    if not distinct:
        raise Unreadable(f"no number {where}")
    if len(distinct) > 1:
        raise Unreadable(f"ambiguous: {len(distinct)} numbers ({_shown(distinct)}) {where}")
    return distinct[0]


def read_number(text: str, rule: Rule = Rule()) -> float:
    """The one number the answer gives under the rule (see the module docstring)."""
    locale, base = rule.locale, rule.base
    if rule.extract == "whole":
        stripped = visible(text).strip()
        values = numbers_in(stripped, locale=locale, base=base)
        pattern = _RUN if base == 10 else _TOKEN
        if len(values) != 1 or not pattern.fullmatch(stripped):
            raise Unreadable("the answer is not one number and nothing else (extract: whole)")
        return _finite(values[0])
    marked = marked_answers(text, rule.markers)
    if marked is None:
        values = numbers_in(text, locale=locale, base=base)
        where = "in the answer"
        if rule.markers and values:
            shown = ", ".join(_SHOWN_MARKER[marker] for marker in rule.markers)
            where = f"and no final-answer marker ({shown})"
        return _finite(_one(values, where))
    marker, segments = marked
    values = [
        _one(numbers_in(segment, locale=locale, base=base), f"in {marker} {segment.strip()!r}")
        for segment in segments
    ]
    return _finite(_one(values, f"marked by {marker}: the marked answers disagree"))


def _finite(value: Decimal) -> float:
    try:
        number = float(value)
    except (InvalidOperation, OverflowError):
        number = math.inf
    if not math.isfinite(number):
        raise Unreadable(f"{value} is not a finite number")
    return number


def read_gold(value: Any, rule: Rule = Rule()) -> float:
    """The gold value as a number: a JSON number, or a text read by the verifier's own rule
    (so a GSM8K solution ending in `#### 72` is 72); Unreadable otherwise."""
    if isinstance(value, bool) or value is None:
        raise Unreadable(f"gold value {value!r} is not a number")
    if isinstance(value, int | float):
        return _finite(Decimal(value))
    if isinstance(value, str):
        return read_number(value, rule)
    raise Unreadable(f"gold value of type {type(value).__name__} is not a number")
