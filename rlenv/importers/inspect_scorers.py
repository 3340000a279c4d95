"""Inspect AI's text scorers as rlenv `python` verifiers (written beside an imported spec by
`rlenv import inspect`; standard library only, so it runs in any frozen world).

rlenv's built-in text verifiers normalise differently (`contains` maps look-alike characters,
`exact_match` has no number rule), so an imported task grades with these functions, which
follow Inspect AI 0.3.285's rules for `match`, `includes`, `exact`, `pattern` and `answer`:
for the same answers the pass rate is Inspect's accuracy. One difference, stated by the
importer: a number is read as Python's float() reads it (any script's digits); Inspect also
reads vulgar fractions, superscripts and Chinese numerals.

Each is called as ``check(answer, input, ctx, **options)``; the input's ``target_field``
(default ``target``) holds the target, a string or a list of strings (any one may match).
"""

from __future__ import annotations

import math
import re
import string
from typing import Any

_NUMBER_TRIM = "!?:;()[]{}'\"`"
ANSWER_PATTERNS = {
    "letter": r"(?is)ANSWER\s*:\s*([A-Za-z])(?:[^\w]|\n|$)(?!.*ANSWER\s*:)",
    "word": r"(?is)ANSWER\s*:\s*(\S+?)(?=[.,;:!?]?\s*(?:\n|$))(?!.*ANSWER\s*:)",
    "line": r"(?i)ANSWER\s*:\s*([^\n]+)\s*\Z",
}


def _targets(record: dict[str, Any], target_field: str) -> list[str]:
    value = record[target_field]
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


def _number(text: str, trim: bool = True) -> float | None:
    cleaned = text.strip(_NUMBER_TRIM) if trim else text
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _normal_number(text: str, trim: bool = True) -> str:
    value = _number(text, trim)
    return text if value is None else format(value, ".5g")


def _strip_numeric_punctuation(text: str) -> str:
    text = re.sub(r"\\([$,£,€*_])", r"\1", text)
    text = re.sub(r"[$,£,€,*,_]", "", text)
    return re.sub(r"\.(?=\s|$|\D)", "", text)


def _strip_punctuation(text: str) -> str:
    return text.strip(string.whitespace + string.punctuation)


def _match_one(value: str, target: str, location: str, ignore_case: bool, numeric: bool) -> bool:
    v, t = value.strip(), target.strip()
    if ignore_case:
        v, t = v.casefold(), t.casefold()
    if numeric:
        t = _strip_numeric_punctuation(t)
    if numeric and _number(t) is not None:
        words = re.split(r"\s+", _strip_numeric_punctuation(v))
        t = _normal_number(t)
        if location == "exact":
            return _normal_number(_strip_numeric_punctuation(v), trim=False) == t
        numbers = [_normal_number(word) for word in words if _number(word) is not None]
        if location == "any":
            return t in numbers
        if location == "end":
            numbers.reverse()
        return (numbers[0] if numbers else "") == t
    v, t = _strip_punctuation(v), _strip_punctuation(t)
    if location == "begin":
        return v.startswith(t)
    if location == "end":
        return v.endswith(t)
    if location == "exact":
        return v == t
    return t in v


def match(
    answer: str | None,
    input: dict[str, Any],
    ctx: Any,
    *,
    location: str = "end",
    ignore_case: bool = True,
    numeric: bool = False,
    target_field: str = "target",
) -> bool:
    """Inspect's `match()`: the target at the answer's begin/end, anywhere, or exactly."""
    text = answer or ""
    return any(
        _match_one(text, target, location, ignore_case, numeric)
        for target in _targets(input, target_field)
    )


def includes(
    answer: str | None,
    input: dict[str, Any],
    ctx: Any,
    *,
    ignore_case: bool = True,
    target_field: str = "target",
) -> bool:
    """Inspect's `includes()`: a target is a substring of the answer."""
    text = answer or ""
    for target in _targets(input, target_field):
        if (target.casefold() in text.casefold()) if ignore_case else (target in text):
            return True
    return False


def _is_float(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _normal_token(token: str) -> str:
    token = token.casefold()
    if not _is_float(token):
        stripped = _strip_punctuation(token)
        if _is_float(stripped):
            token = stripped
        else:
            token = "".join(char for char in token if char not in string.punctuation)
    if _is_float(token):
        token = str(float(token))
    token = re.sub(r"\b(a|an|the)\b", " ", token)
    return " ".join(token.split())


def _normal_text(text: str) -> str:
    tokens = [_normal_token(token) for token in re.split(" |-", text)]
    return " ".join(token for token in tokens if token.strip()).strip()


def exact(
    answer: str | None, input: dict[str, Any], ctx: Any, *, target_field: str = "target"
) -> bool:
    """Inspect's `exact()`: equal after its normalisation (case, punctuation, articles,
    numbers as floats, whitespace); a target empty after it never matches."""
    got = _normal_text(answer or "")
    targets = [_normal_text(target) for target in _targets(input, target_field)]
    return any(target and target == got for target in targets)


def pattern(
    answer: str | None,
    input: dict[str, Any],
    ctx: Any,
    *,
    pattern: str,
    ignore_case: bool = True,
    match_all: bool = False,
    target_field: str = "target",
) -> tuple[bool, str | None]:
    """Inspect's `pattern()` (and `answer()`): the regex's groups (or the whole match)
    compared with the targets."""
    found = re.search(pattern, answer or "", re.IGNORECASE if ignore_case else 0)
    if not found:
        return False, "scoring pattern not matched"
    groups = [group for group in (found.groups() or (found.group(0),)) if isinstance(group, str)]
    targets = _targets(input, target_field)
    if ignore_case:
        targets = [target.lower() for target in targets]

    def hit(group: str) -> bool:
        return (group.lower() if ignore_case else group) in targets

    if match_all:
        passed = bool(groups) and all(hit(group) for group in groups)
    else:
        passed = any(hit(group) and group for group in groups)
    return passed, None if passed else f"extracted {groups[:3]!r}"


def answer(
    answer: str | None,
    input: dict[str, Any],
    ctx: Any,
    *,
    kind: str = "letter",
    target_field: str = "target",
) -> tuple[bool, str | None]:
    """Inspect's `answer(kind)`: `pattern()` over the text after `ANSWER:`."""
    return pattern(answer, input, ctx, pattern=ANSWER_PATTERNS[kind], target_field=target_field)
