"""lm-evaluation-harness's `exact_match` after its filters, as an rlenv `python` verifier
(written beside an imported spec by `rlenv import lm-eval`; standard library only).

Used when a task's filter pipeline or metric options go beyond what the built-in
`exact_match` verifier does (a `regex` filter, `regexes_to_ignore`, `ignore_numbers`); follows
lm-eval 0.4.13's rules: the filters in order on the answer (`regex`: `findall`, the
`group_select`-th match, its first non-empty group, stripped, else `fallback`; `take_first`;
`remove_whitespace`: strip; `lowercase`; `uppercase`), then each of `regexes_to_ignore` removed
from both sides, then case, punctuation and digits dropped as asked, then equality.
"""

from __future__ import annotations

import re
import string
from typing import Any

FILTERS = ("regex", "take_first", "remove_whitespace", "lowercase", "uppercase")


def _regex(text: str, step: dict[str, Any]) -> str:
    found = re.findall(step.get("regex_pattern", r"#### (\-?[0-9\.\,]+)"), text)
    fallback = str(step.get("fallback", "[invalid]"))
    if not found:
        return fallback
    try:
        chosen = found[int(step.get("group_select", 0))]
    except IndexError:
        return fallback
    if isinstance(chosen, tuple):
        groups = [group for group in chosen if group]
        if not groups:
            return fallback
        chosen = groups[0]
    return str(chosen).strip()


def filtered(answer: str, filters: list[dict[str, Any]]) -> str:
    """The answer after the filter pipeline (take_first is a no-op on one answer)."""
    text = answer
    for step in filters:
        function = step["function"]
        if function == "regex":
            text = _regex(text, step)
        elif function == "remove_whitespace":
            text = text.strip()
        elif function == "lowercase":
            text = text.lower()
        elif function == "uppercase":
            text = text.upper()
        elif function != "take_first":
            raise ValueError(f"filter {function!r} is not one of {', '.join(FILTERS)}")
    return text


def _comparable(
    text: str,
    regexes_to_ignore: list[str],
    ignore_case: bool,
    ignore_punctuation: bool,
    ignore_numbers: bool,
) -> str:
    for pattern in regexes_to_ignore:
        text = re.sub(pattern, "", text)
    if ignore_case:
        text = text.lower()
    if ignore_punctuation:
        text = text.translate(str.maketrans("", "", string.punctuation))
    if ignore_numbers:
        text = text.translate(str.maketrans("", "", string.digits))
    return text


def exact_match(
    answer: str | None,
    input: dict[str, Any],
    ctx: Any,
    *,
    target_field: str = "target",
    filters: list[dict[str, Any]] | None = None,
    regexes_to_ignore: list[str] | None = None,
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
    ignore_numbers: bool = False,
) -> tuple[bool, str | None]:
    """lm-eval's exact_match of the filtered answer and the target."""
    options = (regexes_to_ignore or [], ignore_case, ignore_punctuation, ignore_numbers)
    got = filtered(answer or "", filters or [])
    passed = _comparable(got, *options) == _comparable(str(input[target_field]), *options)
    return passed, None if passed else f"filtered answer {got[:80]!r}"
